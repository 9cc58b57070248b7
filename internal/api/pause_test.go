package api_test

import (
	"context"
	"errors"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/warrenhq/warren"
	"github.com/warrenhq/warren/internal/api"
	"github.com/warrenhq/warren/protocol"
	"github.com/warrenhq/warren/store"
)

// broadcasts records what the API asked Config.Pause to tell the
// workers, and fails it while err is set.
type broadcasts struct {
	mu   sync.Mutex
	sent []protocol.Control
	err  error
}

func (b *broadcasts) pause(_ context.Context, c protocol.Control) error {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.err != nil {
		return b.err
	}
	b.sent = append(b.sent, c)
	return nil
}

func (b *broadcasts) all() []protocol.Control {
	b.mu.Lock()
	defer b.mu.Unlock()
	return append([]protocol.Control(nil), b.sent...)
}

func withBroadcasts(bc *broadcasts) *options {
	return &options{onNew: func(_ *testing.T, cfg *api.Config) { cfg.Pause = bc.pause }}
}

// A pause is in the store and told to the workers before the answer;
// the job shows it (paused, paused_at, waiting), a second pause keeps
// its time, and a resume undoes it.
func TestPauseAndResumeAJob(t *testing.T) {
	t.Parallel()
	bc := &broadcasts{}
	b := setup(t, withBroadcasts(bc))
	job := createJob(t, b.store, 2)

	resp := b.do(t, http.MethodPost, "/v1/jobs/"+job.ID+"/pause", nil)
	require.Equal(t, http.StatusOK, resp.status, "%s", resp.body)
	body := resp.json(t)
	require.Equal(t, true, body["paused"])
	pausedAt, _ := body["paused_at"].(string)
	require.NotEmpty(t, pausedAt)
	require.Nil(t, body["warnings"])
	waiting, _ := body["waiting"].(map[string]any)
	require.Equal(t, api.WaitingPaused, waiting["reason"])
	require.Equal(t, pausedAt, waiting["since"])
	require.Equal(t, []protocol.Control{{Type: protocol.ControlPause, JobID: job.ID}}, bc.all(), "told before the answer")
	stored, err := b.store.GetJob(t.Context(), job.ID)
	require.NoError(t, err)
	require.True(t, stored.Paused())

	again := b.do(t, http.MethodPost, "/v1/jobs/"+job.ID+"/pause", nil)
	require.Equal(t, http.StatusOK, again.status)
	require.Equal(t, pausedAt, again.json(t)["paused_at"], "a second pause keeps the first time")
	require.Equal(t, true, b.get(t, "/v1/jobs/"+job.ID).json(t)["paused"])

	resp = b.do(t, http.MethodPost, "/v1/jobs/"+job.ID+"/resume", nil)
	require.Equal(t, http.StatusOK, resp.status, "%s", resp.body)
	body = resp.json(t)
	require.Equal(t, false, body["paused"])
	require.Nil(t, body["paused_at"])
	require.Nil(t, body["waiting"])
	require.Equal(t, protocol.Control{Type: protocol.ControlResume, JobID: job.ID}, bc.all()[2])
}

func TestPauseAClosedOrUnknownJob(t *testing.T) {
	t.Parallel()
	b := setup(t, nil)
	job := createJob(t, b.store, 1)
	require.Equal(t, http.StatusOK, b.do(t, http.MethodPost, "/v1/jobs/"+job.ID+"/cancel", nil).status)
	for _, route := range []string{"/pause", "/resume"} {
		resp := b.do(t, http.MethodPost, "/v1/jobs/"+job.ID+route, nil)
		requireError(t, resp, http.StatusConflict, "conflict")
		require.Contains(t, errorMessage(t, resp), "cancelled")
		requireError(t, b.do(t, http.MethodPost, "/v1/jobs/no-such-job"+route, nil), http.StatusNotFound, "not_found")
	}
}

// When the workers cannot be told, the pause stands and the answer says
// so: the server tells them again at its next refresh.
func TestPauseThatCannotBeBroadcastWarns(t *testing.T) {
	t.Parallel()
	bc := &broadcasts{err: errors.New("not connected to the broker")}
	b := setup(t, withBroadcasts(bc))
	job := createJob(t, b.store, 1)
	resp := b.do(t, http.MethodPost, "/v1/jobs/"+job.ID+"/pause", nil)
	require.Equal(t, http.StatusOK, resp.status)
	body := resp.json(t)
	require.Equal(t, true, body["paused"])
	warnings, _ := body["warnings"].([]any)
	require.Len(t, warnings, 1)
	require.Contains(t, warnings[0], "not connected to the broker")

	resp = b.do(t, http.MethodPost, "/v1/queues/q1/pause", nil)
	require.Equal(t, http.StatusOK, resp.status)
	warnings, _ = resp.json(t)["warnings"].([]any)
	require.Len(t, warnings, 1)
}

// A queue pause holds the queue's jobs, with or without any: they show
// waiting queue_paused, and the queue list names it.
func TestPauseAndResumeAQueue(t *testing.T) {
	t.Parallel()
	bc := &broadcasts{}
	opts := withBroadcasts(bc)
	onNew := opts.onNew
	opts.onNew = func(t *testing.T, cfg *api.Config) {
		onNew(t, cfg)
		cfg.Queues = func(context.Context) ([]api.Queue, error) { return nil, nil }
	}
	b := setup(t, opts)
	job, _, err := b.store.CreateJob(t.Context(), store.NewJob{Type: "echo", Policy: warren.Policy{Queue: "q1"}}, payloads(1))
	require.NoError(t, err)

	resp := b.do(t, http.MethodPost, "/v1/queues/q1/pause", nil)
	require.Equal(t, http.StatusOK, resp.status, "%s", resp.body)
	body := resp.json(t)
	require.Equal(t, "q1", body["queue"])
	require.Equal(t, true, body["paused"])
	pausedAt, _ := body["paused_at"].(string)
	require.NotEmpty(t, pausedAt)
	require.Equal(t, []protocol.Control{{Type: protocol.ControlPause, Queue: "q1"}}, bc.all())

	detail := b.get(t, "/v1/jobs/"+job.ID).json(t)
	require.Equal(t, false, detail["paused"], "the queue is paused, not the job")
	waiting, _ := detail["waiting"].(map[string]any)
	require.Equal(t, api.WaitingQueuePaused, waiting["reason"])
	require.Equal(t, "q1", waiting["queue"])

	queues := b.get(t, "/v1/queues")
	require.Equal(t, http.StatusOK, queues.status, "%s", queues.body)
	require.JSONEq(t, `{"queues":[],"paused":[{"queue":"q1","paused":true,"paused_at":"`+pausedAt+`"}]}`, string(queues.body))

	resp = b.do(t, http.MethodPost, "/v1/queues/q1/resume", nil)
	require.Equal(t, http.StatusOK, resp.status)
	require.JSONEq(t, `{"queue":"q1","paused":false,"paused_at":null}`, string(resp.body))
	require.Nil(t, b.get(t, "/v1/jobs/"+job.ID).json(t)["waiting"])
	require.JSONEq(t, `{"queues":[],"paused":[]}`, string(b.get(t, "/v1/queues").body))
}

func TestPauseAQueueByAnInvalidName(t *testing.T) {
	t.Parallel()
	b := setup(t, nil)
	for _, route := range []string{"/pause", "/resume"} {
		resp := b.do(t, http.MethodPost, "/v1/queues/"+strings.Repeat("q", 300)+route, nil)
		requireError(t, resp, http.StatusUnprocessableEntity, "validation_failed")
		require.Contains(t, errorMessage(t, resp), "queue")
	}
}

// The event stream of a job says paused and resumed at once: a pause
// moves no version, so they are events of their own.
func TestEventsOfAPauseAndAResume(t *testing.T) {
	t.Parallel()
	events := api.NewEvents(api.EventsConfig{PollInterval: time.Hour})
	t.Cleanup(events.Close)
	b := setup(t, &options{onNew: withEvents(events)})
	job := createJob(t, b.store, 3)
	s := b.openEvents(t, t.Context(), job.ID)
	require.Equal(t, "progress", s.nextEvent(t).event)
	require.Equal(t, http.StatusOK, b.do(t, http.MethodPost, "/v1/jobs/"+job.ID+"/pause", nil).status)
	ev := s.nextEvent(t)
	require.Equal(t, "paused", ev.event)
	require.Equal(t, true, jobOf(t, ev)["paused"])
	require.Equal(t, http.StatusOK, b.do(t, http.MethodPost, "/v1/jobs/"+job.ID+"/resume", nil).status)
	ev = s.nextEvent(t)
	require.Equal(t, "resumed", ev.event)
	require.Equal(t, false, jobOf(t, ev)["paused"])
}
