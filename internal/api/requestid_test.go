package api_test

import (
	"bytes"
	"log/slog"
	"net/http"
	"regexp"
	"strings"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/warrenhq/warren/internal/api"
)

// syncBuffer is a bytes.Buffer safe for the server's goroutines.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// Every answer carries a request id, the client's when it sends a usable
// one, and every log line of the request has it as request_id.
func TestRequestsHaveAnIDInTheirLogsAndAnswers(t *testing.T) {
	t.Parallel()
	var logs syncBuffer
	b := setup(t, &options{onNew: func(_ *testing.T, cfg *api.Config) {
		cfg.Logger = slog.New(slog.NewJSONHandler(&logs, nil))
	}})

	resp := b.do(t, http.MethodPost, "/v1/jobs", strings.NewReader(`{"type":"echo","tasks":[1]}`),
		"Content-Type", "application/json", api.HeaderRequestID, "client-42.a:b")
	require.Equal(t, http.StatusAccepted, resp.status, string(resp.body))
	require.Equal(t, "client-42.a:b", resp.header.Get(api.HeaderRequestID), "the client's id comes back")
	require.Contains(t, logs.String(), `"msg":"api: job submitted"`)
	require.Contains(t, logs.String(), `"request_id":"client-42.a:b"`, "the submission's log line has it")

	resp = b.get(t, "/v1/jobs/nope")
	require.Equal(t, http.StatusNotFound, resp.status)
	require.Regexp(t, regexp.MustCompile(`^[0-9a-f]{16}$`), resp.header.Get(api.HeaderRequestID), "a new id when the client sends none")

	for _, bad := range []string{"has space", "quote\"", strings.Repeat("x", 129)} {
		resp = b.get(t, "/v1/jobs/nope", api.HeaderRequestID, bad)
		require.Regexp(t, regexp.MustCompile(`^[0-9a-f]{16}$`), resp.header.Get(api.HeaderRequestID), "%q is replaced", bad)
	}
}
