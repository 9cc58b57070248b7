package client

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"mime"
	"net/http"
	"net/url"
	"sync/atomic"
	"time"
)

const (
	// watchFirstEvent is how long Watch waits for a stream's first event.
	// The server sends it at once, so a stream silent for longer is held
	// back by a proxy that buffers, and Watch polls instead.
	watchFirstEvent = 10 * time.Second
	// watchIdle is how long a stream may go without a byte before Watch
	// takes its connection for dead: the server sends a keepalive comment
	// every 15 s.
	watchIdle = 45 * time.Second
	// maxEventBytes bounds one event of a stream.
	maxEventBytes = 32 << 20
)

// Watch follows a job until it closes and returns it as it closed. It
// reads the job's event stream (GET /v1/jobs/{id}/events), calling
// onProgress (when not nil) with the job as it is at once and after each
// change the server reports, at most a few times a second, and with the
// closed job last. A stream cut before the close (a server restarting, a
// connection lost) is opened again once; when that fails too, or the
// server has no event stream (an older one), or a proxy holds the events
// back, Watch polls the job as Wait does instead, calling onProgress with
// every status read. API errors end it: an unknown job is an Error that
// IsNotFound reports, and so is a job deleted while watched. With
// WithGiveUpAfter, a server that has not answered for that long ends it
// with an error that wraps ErrUnreachable, whether it was following the
// stream or polling.
func (c *Client) Watch(ctx context.Context, id string, onProgress func(Job)) (Job, error) {
	if onProgress == nil {
		onProgress = func(Job) {}
	}
	cuts := 0
	answered := time.Now() // when the server last answered, for WithGiveUpAfter
	for {
		f := c.follow(ctx, id, onProgress)
		if f.answered {
			answered = time.Now()
		}
		switch f.end {
		case streamClosed:
			return f.job, nil
		case streamDeleted:
			return f.job, &Error{Status: http.StatusNotFound, Code: "not_found", Message: fmt.Sprintf("job %q was deleted", id)}
		case streamFailed:
			return f.job, f.err
		}
		if c.giveUp > 0 && !f.answered && time.Since(answered) >= c.giveUp {
			return f.job, fmt.Errorf("%w (no answer for %s)", ErrUnreachable, time.Since(answered).Round(time.Second))
		}
		switch f.end {
		case streamUnsupported:
			return c.wait(ctx, id, &WaitOpts{OnProgress: onProgress}, answered)
		}
		// Cut: open it again, unless the last attempt showed nothing
		// either, and then poll.
		if f.events > 0 {
			cuts = 0
		}
		if cuts++; cuts > 1 {
			return c.wait(ctx, id, &WaitOpts{OnProgress: onProgress}, answered)
		}
		select {
		case <-ctx.Done():
			return f.job, ctx.Err()
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// streamEnd is how one event stream of Watch ended.
type streamEnd int

const (
	streamClosed      streamEnd = iota // the closed event: done
	streamDeleted                      // the deleted event
	streamFailed                       // an error that ends Watch (an API error, ctx done)
	streamUnsupported                  // no usable stream: poll
	streamCut                          // the stream ended or failed early: open it again
)

// followed is what one stream of Watch gave.
type followed struct {
	end    streamEnd
	job    Job   // the last job read
	events int   // progress and closed events read
	err    error // with streamFailed
	// answered: the server answered the request, and the stream ended
	// after that answer.
	answered bool
}

// follow reads one event stream of job id until it ends.
func (c *Client) follow(ctx context.Context, id string, onProgress func(Job)) followed {
	streamCtx, cancel := context.WithCancel(ctx)
	defer cancel()
	var silent atomic.Bool // the watchdog cut the stream
	watchdog := time.AfterFunc(watchFirstEvent, func() {
		silent.Store(true)
		cancel()
	})
	defer watchdog.Stop()

	var f followed
	resp, err := c.openStream(streamCtx, id)
	switch {
	case ctx.Err() != nil:
		return followed{end: streamFailed, err: ctx.Err()}
	case err != nil:
		return followed{end: streamCut}
	}
	defer resp.Body.Close()
	if f, ok := c.refused(ctx, id, resp); ok {
		f.answered = true
		return f
	}
	f.answered = true
	sse := &sseReader{r: bufio.NewReader(resp.Body), onLine: func() {
		if f.events > 0 {
			watchdog.Reset(watchIdle)
		}
	}}
	for {
		ev, err := sse.next()
		switch {
		case ctx.Err() != nil:
			f.end, f.err = streamFailed, ctx.Err()
			return f
		case err != nil && silent.Load() && f.events == 0:
			f.end = streamUnsupported // held back: a buffering proxy
			return f
		case err != nil:
			f.end = streamCut
			return f
		}
		switch ev.event {
		case "progress", "closed", "paused", "resumed":
			var job Job
			if err := json.Unmarshal(ev.data, &job); err != nil {
				f.end = streamUnsupported
				return f
			}
			f.job = job
			f.events++
			watchdog.Reset(watchIdle)
			onProgress(job)
			if ev.event == "closed" {
				f.end = streamClosed
				return f
			}
		case "deleted":
			f.end = streamDeleted
			return f
		}
		// Other events are for newer clients.
	}
}

// openStream sends the request for job id's event stream. The stream
// lasts as long as the job, so it is read without the client's timeout.
func (c *Client) openStream(ctx context.Context, id string) (*http.Response, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, c.base+"/v1/jobs/"+url.PathEscape(id)+"/events", nil)
	if err != nil {
		return nil, err
	}
	req.Header.Set("Accept", "text/event-stream")
	req.Header.Set("Cache-Control", "no-cache")
	if c.token != "" {
		req.Header.Set("Authorization", "Bearer "+c.token)
	}
	hc := *c.http
	hc.Timeout = 0
	return hc.Do(req)
}

// refused says how Watch goes on when the server did not answer with an
// event stream (ok true), or ok false for a stream.
func (c *Client) refused(ctx context.Context, id string, resp *http.Response) (followed, bool) {
	if resp.StatusCode == http.StatusOK {
		mt, _, _ := mime.ParseMediaType(resp.Header.Get("Content-Type"))
		if mt == "text/event-stream" {
			return followed{}, false
		}
		return followed{end: streamUnsupported}, true
	}
	apiErr := decodeError(resp)
	switch {
	case resp.StatusCode == http.StatusNotFound || resp.StatusCode == http.StatusMethodNotAllowed:
		// The job is unknown, or the server has no such route: ask.
		if _, err := c.Get(ctx, id); err != nil {
			return followed{end: streamFailed, err: err}, true
		}
		return followed{end: streamUnsupported}, true
	case resp.StatusCode >= 500:
		return followed{end: streamCut}, true // busy, shutting down, or the store is down
	default:
		return followed{end: streamFailed, err: apiErr}, true
	}
}

// sseEvent is one server-sent event.
type sseEvent struct {
	event string // "message" when the stream names none
	id    string // the last event id seen
	data  []byte
}

// sseReader reads server-sent events as the HTML standard's event stream
// parsing says: lines end with CRLF, LF or CR; a line starting with ':' is
// a comment; "field: value" sets event, data (lines joined with LF), id
// (without NUL) or retry (ignored here); a blank line dispatches the event
// if it has data; a last event without its blank line is dropped.
type sseReader struct {
	r      *bufio.Reader
	onLine func() // called after each line read, comments included
	skipLF bool   // the last line ended with CR: a LF now is part of it
	bom    bool   // the stream's first byte was read (a byte order mark there is skipped)
	lastID string
	line   []byte
}

// next returns the next event with data; the stream's error (io.EOF at
// its end) once it ends.
func (s *sseReader) next() (sseEvent, error) {
	var (
		event string
		data  []byte
		has   bool // a data line was seen
	)
	for {
		line, err := s.readLine()
		if err != nil {
			return sseEvent{}, err
		}
		if s.onLine != nil {
			s.onLine()
		}
		if len(line) == 0 {
			if !has {
				event = ""
				continue
			}
			if event == "" {
				event = "message"
			}
			if data == nil {
				data = []byte{}
			}
			return sseEvent{event: event, id: s.lastID, data: data}, nil
		}
		if line[0] == ':' {
			continue
		}
		field, value, found := bytes.Cut(line, []byte(":"))
		if found {
			value = bytes.TrimPrefix(value, []byte(" "))
		}
		switch string(field) {
		case "event":
			event = string(value)
		case "data":
			if has {
				data = append(data, '\n')
			}
			data, has = append(data, value...), true
			if len(data) > maxEventBytes {
				return sseEvent{}, fmt.Errorf("client: an event of the stream is over %d bytes", maxEventBytes)
			}
		case "id":
			if bytes.IndexByte(value, 0) < 0 {
				s.lastID = string(value)
			}
		}
	}
}

// readLine returns the next line without its end; the slice is valid
// until the next call.
func (s *sseReader) readLine() ([]byte, error) {
	s.line = s.line[:0]
	for {
		b, err := s.r.ReadByte()
		if err != nil {
			if errors.Is(err, io.EOF) && len(s.line) > 0 {
				err = io.ErrUnexpectedEOF
			}
			return nil, err
		}
		if s.skipLF {
			s.skipLF = false
			if b == '\n' {
				continue
			}
		}
		if !s.bom {
			s.bom = true
			if b == 0xEF {
				if rest, err := s.r.Peek(2); err == nil && bytes.Equal(rest, []byte{0xBB, 0xBF}) {
					_, _ = s.r.Discard(2)
					continue
				}
			}
		}
		switch b {
		case '\n':
			return s.line, nil
		case '\r':
			s.skipLF = true
			return s.line, nil
		}
		s.line = append(s.line, b)
		if len(s.line) > maxEventBytes {
			return nil, fmt.Errorf("client: a line of the stream is over %d bytes", maxEventBytes)
		}
	}
}
