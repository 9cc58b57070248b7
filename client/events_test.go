package client_test

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/warrenhq/warren"
	"github.com/warrenhq/warren/client"
	"github.com/warrenhq/warren/internal/api"
	"github.com/warrenhq/warren/store"
	"github.com/warrenhq/warren/store/sqlite"
)

// watchBundle is an API server with tokens whose requests are counted by
// kind, in front of which a test may put its own handler.
type watchBundle struct {
	store  store.Store
	client *client.Client
	url    string

	mu       sync.Mutex
	streams  int           // event stream requests
	polls    int           // GET /v1/jobs/{id}
	streamed chan struct{} // a stream request arrived
	polled   chan struct{} // a poll arrived
}

// watchSetup serves the API, through front when it is not nil (which
// gets the API's handler to call).
func watchSetup(t *testing.T, front func(w http.ResponseWriter, r *http.Request, api http.Handler)) *watchBundle {
	t.Helper()
	s, err := sqlite.Open(context.Background(), filepath.Join(t.TempDir(), "w.db"))
	require.NoError(t, err)
	t.Cleanup(func() { _ = s.Close() })
	events := api.NewEvents(api.EventsConfig{PollInterval: 10 * time.Millisecond, MinInterval: 10 * time.Millisecond})
	t.Cleanup(events.Close)
	h, err := api.New(api.Config{Store: s, Events: events, Tokens: []api.Token{{Value: "tok", Scopes: []api.Scope{api.ScopeRead, api.ScopeWrite}}}})
	require.NoError(t, err)
	b := &watchBundle{store: s, streamed: make(chan struct{}, 100), polled: make(chan struct{}, 1000)}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b.mu.Lock()
		switch {
		case strings.HasSuffix(r.URL.Path, "/events"):
			b.streams++
			b.streamed <- struct{}{}
		case r.Method == http.MethodGet && strings.Count(r.URL.Path, "/") == 3:
			b.polls++
			b.polled <- struct{}{}
		}
		b.mu.Unlock()
		if front != nil {
			front(w, r, h)
			return
		}
		h.ServeHTTP(w, r)
	}))
	t.Cleanup(srv.Close)
	b.url = srv.URL
	b.client = client.New(srv.URL, client.WithToken("tok"))
	return b
}

// counts returns the stream and poll requests so far.
func (b *watchBundle) counts() (streams, polls int) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.streams, b.polls
}

// submit submits a job of n tasks and marks them queued.
func (b *watchBundle) submit(t *testing.T, n int) string {
	t.Helper()
	tasks := make([]json.RawMessage, n)
	for i := range tasks {
		tasks[i] = json.RawMessage(`1`)
	}
	sub, err := b.client.Submit(t.Context(), client.JobSpec{Type: "echo", Tasks: tasks})
	require.NoError(t, err)
	_, err = b.store.RelayBatch(t.Context(), 1000, func(_ context.Context, tasks []store.OutboxTask) ([]store.TaskRef, error) {
		refs := make([]store.TaskRef, len(tasks))
		for i, tk := range tasks {
			refs[i] = tk.Ref()
		}
		return refs, nil
	})
	require.NoError(t, err)
	return sub.ID
}

// complete records completed outcomes for tasks from..to of job id, and
// closes the job when close is set.
func (b *watchBundle) complete(t *testing.T, id string, from, to int64, close bool) {
	t.Helper()
	var outcomes []store.Outcome
	for i := from; i <= to; i++ {
		outcomes = append(outcomes, store.Outcome{JobID: id, TaskID: i, State: warren.TaskCompleted, Result: json.RawMessage(`1`), Attempts: 1})
	}
	_, err := b.store.ApplyOutcomes(t.Context(), outcomes)
	require.NoError(t, err)
	if !close {
		return
	}
	job, err := b.store.GetJob(t.Context(), id)
	require.NoError(t, err)
	ok, err := b.store.FinishJob(t.Context(), id, job.Version, warren.JobCompleted, []byte(`[]`), "")
	require.NoError(t, err)
	require.True(t, ok)
}

// watch runs Watch in the background; its progress comes on the
// returned channel, its answer on the other.
func (b *watchBundle) watch(t *testing.T, id string) (<-chan client.Job, <-chan watchResult) {
	t.Helper()
	progress := make(chan client.Job, 1000)
	done := make(chan watchResult, 1)
	go func() {
		job, err := b.client.Watch(t.Context(), id, func(j client.Job) { progress <- j })
		done <- watchResult{job, err}
	}()
	return progress, done
}

type watchResult struct {
	job client.Job
	err error
}

// waitFor waits for a job on progress for which ok holds.
func waitFor(t *testing.T, progress <-chan client.Job, ok func(client.Job) bool) client.Job {
	t.Helper()
	timeout := time.After(10 * time.Second)
	for {
		select {
		case j := <-progress:
			if ok(j) {
				return j
			}
		case <-timeout:
			t.Fatal("no such progress")
		}
	}
}

// wait waits for a signal on ch.
func wait(t *testing.T, ch <-chan struct{}, what string) {
	t.Helper()
	select {
	case <-ch:
	case <-time.After(10 * time.Second):
		t.Fatalf("no %s", what)
	}
}

func result(t *testing.T, done <-chan watchResult) watchResult {
	t.Helper()
	select {
	case r := <-done:
		return r
	case <-time.After(10 * time.Second):
		t.Fatal("Watch did not return")
		return watchResult{}
	}
}

func TestWatchFollowsTheStream(t *testing.T) {
	t.Parallel()
	b := watchSetup(t, nil)
	id := b.submit(t, 3)
	progress, done := b.watch(t, id)
	first := waitFor(t, progress, func(client.Job) bool { return true })
	require.Equal(t, id, first.ID)
	require.Equal(t, int64(0), first.CompletedTasks)

	b.complete(t, id, 1, 1, false)
	waitFor(t, progress, func(j client.Job) bool { return j.CompletedTasks == 1 })
	b.complete(t, id, 2, 3, true)
	r := result(t, done)
	require.NoError(t, r.err)
	require.Equal(t, client.JobCompleted, r.job.State)
	require.Equal(t, int64(3), r.job.CompletedTasks)
	last := waitFor(t, progress, func(j client.Job) bool { return j.Terminal() })
	require.Equal(t, r.job, last, "the closed job is passed on last")

	streams, polls := b.counts()
	require.Equal(t, 1, streams)
	require.Zero(t, polls, "followed through the stream, not polled")
}

// A stream cut before the close is opened again.
func TestWatchReconnectsACutStream(t *testing.T) {
	t.Parallel()
	var (
		mu   sync.Mutex
		cuts = 1
	)
	b := watchSetup(t, func(w http.ResponseWriter, r *http.Request, h http.Handler) {
		mu.Lock()
		cut := cuts > 0 && strings.HasSuffix(r.URL.Path, "/events")
		if cut {
			cuts--
		}
		mu.Unlock()
		if !cut {
			h.ServeHTTP(w, r)
			return
		}
		// Pass the first event on, then end the response, as a proxy that
		// drops a connection would.
		ctx, cancel := context.WithCancel(r.Context())
		defer cancel()
		h.ServeHTTP(&cutAfterFlush{ResponseWriter: w, cancel: cancel}, r.WithContext(ctx))
	})
	id := b.submit(t, 2)
	progress, done := b.watch(t, id)
	wait(t, b.streamed, "first stream")
	wait(t, b.streamed, "second stream")
	b.complete(t, id, 1, 2, true)
	r := result(t, done)
	require.NoError(t, r.err)
	require.Equal(t, client.JobCompleted, r.job.State)
	require.Equal(t, client.JobCompleted, waitFor(t, progress, func(j client.Job) bool { return j.Terminal() }).State)
	streams, polls := b.counts()
	require.Equal(t, 2, streams)
	require.Zero(t, polls)
}

// cutAfterFlush ends a request (through cancel) once it flushed.
type cutAfterFlush struct {
	http.ResponseWriter
	cancel context.CancelFunc
}

func (c *cutAfterFlush) Flush() {
	c.ResponseWriter.(http.Flusher).Flush()
	c.cancel()
}

// Against a server without the event stream (an older one), or behind a
// proxy that answers something else, Watch polls.
func TestWatchFallsBackToPolling(t *testing.T) {
	t.Parallel()
	for name, answer := range map[string]func(w http.ResponseWriter){
		"no route": func(w http.ResponseWriter) {
			w.Header().Set("Content-Type", "application/json")
			w.WriteHeader(http.StatusNotFound)
			_, _ = w.Write([]byte(`{"error":{"code":"not_found","message":"no route for GET /v1/jobs/x/events"}}`))
		},
		"not a stream": func(w http.ResponseWriter) {
			w.Header().Set("Content-Type", "text/html")
			_, _ = w.Write([]byte(`<html>proxy</html>`))
		},
		"unavailable twice": func(w http.ResponseWriter) {
			w.Header().Set("Content-Type", "application/json")
			w.WriteHeader(http.StatusServiceUnavailable)
			_, _ = w.Write([]byte(`{"error":{"code":"unavailable","message":"too many event streams"}}`))
		},
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			b := watchSetup(t, func(w http.ResponseWriter, r *http.Request, h http.Handler) {
				if strings.HasSuffix(r.URL.Path, "/events") {
					answer(w)
					return
				}
				h.ServeHTTP(w, r)
			})
			id := b.submit(t, 2)
			progress, done := b.watch(t, id)
			wait(t, b.polled, "poll")
			b.complete(t, id, 1, 2, true)
			r := result(t, done)
			require.NoError(t, r.err)
			require.Equal(t, client.JobCompleted, r.job.State)
			require.Equal(t, client.JobCompleted, waitFor(t, progress, func(j client.Job) bool { return j.Terminal() }).State)
			streams, polls := b.counts()
			require.GreaterOrEqual(t, polls, 1)
			if name == "unavailable twice" {
				require.Equal(t, 2, streams, "a failed stream is tried once more before polling")
			} else {
				require.Equal(t, 1, streams)
			}
		})
	}
}

func TestWatchErrors(t *testing.T) {
	t.Parallel()
	b := watchSetup(t, nil)
	_, err := b.client.Watch(t.Context(), "no-such-job", nil)
	require.True(t, client.IsNotFound(err), "%v", err)

	id := b.submit(t, 1)
	_, err = client.New(b.url, client.WithToken("wrong")).Watch(t.Context(), id, nil)
	var apiErr *client.Error
	require.ErrorAs(t, err, &apiErr)
	require.Equal(t, http.StatusUnauthorized, apiErr.Status)

	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	_, err = b.client.Watch(ctx, id, nil)
	require.ErrorIs(t, err, context.Canceled)
}
