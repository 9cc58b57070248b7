package client

import (
	"bufio"
	"errors"
	"io"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// readAll reads every event of stream.
func readAll(t *testing.T, stream string) ([]sseEvent, error) {
	t.Helper()
	r := &sseReader{r: bufio.NewReaderSize(strings.NewReader(stream), 16)}
	var out []sseEvent
	for {
		ev, err := r.next()
		if err != nil {
			return out, err
		}
		out = append(out, ev)
	}
}

func TestSSEParsing(t *testing.T) {
	t.Parallel()
	stream := "\xEF\xBB\xBF: a comment first\n" +
		"event: progress\nid: 7\ndata: {\"a\":\ndata:1}\n" + // one event, two data lines; no space after the colon
		"\n" +
		"event: nothing\n\n" + // no data: not dispatched, and its name is forgotten
		"data\n\n" + // a field without a colon: empty data
		"retry: 100\r\nunknown: x\r\ndata:  two spaces\r\n\r\n" + // CRLF; only one space is removed
		"event: closed\rid: 9\rdata: last\r\r" + // CR alone
		"id: a\x00b\ndata: keeps 9\n\n" + // an id with NUL is ignored
		"data: never dispatched" // no blank line at the end
	evs, err := readAll(t, stream)
	require.ErrorIs(t, err, io.ErrUnexpectedEOF)
	require.Equal(t, []sseEvent{
		{event: "progress", id: "7", data: []byte("{\"a\":\n1}")},
		{event: "message", id: "7", data: []byte("")},
		{event: "message", id: "7", data: []byte(" two spaces")},
		{event: "closed", id: "9", data: []byte("last")},
		{event: "message", id: "9", data: []byte("keeps 9")},
	}, evs)

	evs, err = readAll(t, "data: x\n\n")
	require.True(t, errors.Is(err, io.EOF))
	require.Len(t, evs, 1)
}
