package main

import (
	"net/http/httptest"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/warrenhq/warren/internal/api"
	"github.com/warrenhq/warren/internal/heartbeats"
	"github.com/warrenhq/warren/store/sqlite"
)

// status and watch say that a job's queue has no consumer, and for how
// long.
func TestStatusAndWatchSayThatNoOneConsumesTheQueue(t *testing.T) {
	t.Parallel()
	st, err := sqlite.Open(t.Context(), filepath.Join(t.TempDir(), "w.db"))
	require.NoError(t, err)
	t.Cleanup(func() { _ = st.Close() })
	since := time.Now().Add(-42 * time.Second)
	asked := make(chan struct{}, 16) // each time the API shows the job
	h, err := api.New(api.Config{Store: st, Waiting: func(_, q string) *api.Waiting {
		asked <- struct{}{}
		return &api.Waiting{Reason: api.WaitingNoConsumer, Queue: q, Since: since}
	}})
	require.NoError(t, err)
	srv := httptest.NewServer(h)
	t.Cleanup(srv.Close)

	code, out, errOut := runCLI(t, nil, "submit", "--server", srv.URL, writeFile(t, `{"type": "echo", "queue": "gpu", "tasks": [1]}`))
	require.Equal(t, 0, code, errOut)
	id := strings.TrimSpace(out)

	code, out, errOut = runCLI(t, nil, "status", "--server", srv.URL, id)
	require.Equal(t, 0, code, errOut)
	for len(asked) > 0 {
		<-asked
	}
	require.Regexp(t, `waiting   no consumer on queue gpu for 4[2-9] s `, out)

	// watch shows it in its progress lines until the job closes (cancelled
	// here, from another goroutine once watch runs: exit status 1).
	done := make(chan struct{})
	go func() {
		defer close(done)
		code, out, errOut = runCLI(t, nil, "watch", "--server", srv.URL, id)
	}()
	select {
	case <-asked: // watch has the job as it waits
	case <-time.After(10 * time.Second):
		t.Fatal("watch did not ask for the job")
	}
	c, _, cancelErr := runCLI(t, nil, "cancel", "--server", srv.URL, id)
	require.Equal(t, 0, c, cancelErr)
	<-done
	require.Equal(t, exitJobFailed, code, errOut)
	require.Regexp(t, `progress: pending 0/1 tasks finished \(0 failed\), - tasks/s; no consumer on queue gpu for 4[2-9] s`, out)
	require.NotContains(t, out, "waiting   ", "a closed job waits for nothing")
}

// submit warns on stderr, exit status 0, when no live worker serves the
// job's type on its queue, and status says so.
func TestSubmitWarnsAndStatusSaysNoWorkerServesTheType(t *testing.T) {
	t.Parallel()
	st, err := sqlite.Open(t.Context(), filepath.Join(t.TempDir(), "w.db"))
	require.NoError(t, err)
	t.Cleanup(func() { _ = st.Close() })
	h, err := api.New(api.Config{Store: st, Workers: func() []heartbeats.Worker {
		return []heartbeats.Worker{{ID: "a", Name: "thumbs", Queues: []string{"default"}, Types: []string{"thumbnail"}, Alive: true}}
	}})
	require.NoError(t, err)
	srv := httptest.NewServer(h)
	t.Cleanup(srv.Close)

	code, out, errOut := runCLI(t, nil, "submit", "--server", srv.URL, writeFile(t, `{"type": "resize", "tasks": [1]}`))
	require.Equal(t, 0, code, errOut)
	require.Contains(t, errOut, `warren submit: warning: no live worker serves type "resize" on queue "default"`)
	id := strings.TrimSpace(out)
	require.NotEmpty(t, id)

	code, out, errOut = runCLI(t, nil, "status", "--server", srv.URL, id)
	require.Equal(t, 0, code, errOut)
	require.Regexp(t, `waiting   no live worker serves type resize on queue default for [0-9]+ s `, out)

	code, _, errOut = runCLI(t, nil, "submit", "--server", srv.URL, writeFile(t, `{"type": "thumbnail", "tasks": [1]}`))
	require.Equal(t, 0, code, errOut)
	require.NotContains(t, errOut, "warning")
}
