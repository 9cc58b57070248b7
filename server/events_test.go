package server_test

import (
	"bufio"
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/warrenhq/warren/client"
	"github.com/warrenhq/warren/server"
)

// Stopping the server ends the open event streams at once instead of
// waiting ShutdownTimeout for them; a job the server cancels ends its
// streams with closed.
func TestEventStreamsEndOnStop(t *testing.T) {
	t.Parallel()
	cfg := setup(t)
	cfg.ShutdownTimeout = time.Minute
	srv, err := server.New(cfg)
	require.NoError(t, err)
	require.NoError(t, srv.Start(t.Context()))
	c := client.New(srv.URL())
	open := func() (*bufio.Reader, func()) {
		sub, err := c.Submit(t.Context(), client.JobSpec{Type: "nobody-runs-this", Tasks: []json.RawMessage{json.RawMessage(`1`)}})
		require.NoError(t, err)
		req, err := http.NewRequestWithContext(t.Context(), http.MethodGet, srv.URL()+"/v1/jobs/"+sub.ID+"/events", nil)
		require.NoError(t, err)
		resp, err := http.DefaultClient.Do(req)
		require.NoError(t, err)
		require.Equal(t, http.StatusOK, resp.StatusCode)
		r := bufio.NewReader(resp.Body)
		line, err := r.ReadString('\n')
		require.NoError(t, err)
		require.Equal(t, "event: progress\n", line)
		return r, func() {
			_, err := c.Cancel(t.Context(), sub.ID)
			require.NoError(t, err)
		}
	}

	r, cancel := open()
	cancel()
	rest, err := io.ReadAll(r)
	require.NoError(t, err)
	require.Contains(t, string(rest), "event: closed\n")
	require.Contains(t, string(rest), `"state":"cancelled"`)

	r, _ = open()
	start := time.Now()
	require.NoError(t, srv.Stop())
	require.Less(t, time.Since(start), 20*time.Second, "Stop does not wait ShutdownTimeout for the streams")
	rest, err = io.ReadAll(r)
	require.NoError(t, err, "the stream ends cleanly")
	require.False(t, strings.Contains(string(rest), "event: closed"), "the job is still open: %s", rest)
}
