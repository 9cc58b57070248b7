package api_test

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/warrenhq/warren"
	"github.com/warrenhq/warren/internal/api"
	"github.com/warrenhq/warren/store"
)

// sseEvent is one server-sent event, or one comment (comment set, the
// rest empty).
type sseEvent struct {
	event   string
	id      string
	data    string
	comment string
	at      time.Time // when it was read
}

// sseStream reads an event stream by the rules of the HTML standard
// (fields event, data, id; ':' comments; a blank line ends an event).
type sseStream struct {
	resp *http.Response
	r    *bufio.Reader
}

// openEvents opens the event stream of job id and requires a 200 stream.
func (b *testBundle) openEvents(t *testing.T, ctx context.Context, id string, header ...string) *sseStream {
	t.Helper()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, b.srv.URL+"/v1/jobs/"+id+"/events", nil)
	require.NoError(t, err)
	for i := 0; i+1 < len(header); i += 2 {
		req.Header.Set(header[i], header[i+1])
	}
	resp, err := b.srv.Client().Do(req)
	require.NoError(t, err)
	t.Cleanup(func() { _ = resp.Body.Close() })
	require.Equal(t, http.StatusOK, resp.StatusCode)
	require.Equal(t, "text/event-stream", resp.Header.Get("Content-Type"))
	require.Equal(t, "no-cache", resp.Header.Get("Cache-Control"))
	require.Equal(t, "no", resp.Header.Get("X-Accel-Buffering"))
	return &sseStream{resp: resp, r: bufio.NewReader(resp.Body)}
}

// next returns the next event or comment; io.EOF once the stream ended
// between two events.
func (s *sseStream) next() (sseEvent, error) {
	var (
		ev      sseEvent
		data    []string
		started bool
	)
	for {
		line, err := s.r.ReadString('\n')
		if err != nil {
			if errors.Is(err, io.EOF) && line == "" && !started {
				return sseEvent{}, io.EOF
			}
			return sseEvent{}, fmt.Errorf("stream cut inside an event (%q): %w", line, err)
		}
		line = strings.TrimSuffix(strings.TrimSuffix(line, "\n"), "\r")
		if line == "" {
			if !started {
				continue
			}
			ev.data, ev.at = strings.Join(data, "\n"), time.Now()
			return ev, nil
		}
		if rest, ok := strings.CutPrefix(line, ":"); ok {
			if !started {
				return sseEvent{comment: strings.TrimPrefix(rest, " "), at: time.Now()}, nil
			}
			continue
		}
		started = true
		field, value, _ := strings.Cut(line, ":")
		value = strings.TrimPrefix(value, " ")
		switch field {
		case "event":
			ev.event = value
		case "id":
			ev.id = value
		case "data":
			data = append(data, value)
		default:
			return sseEvent{}, fmt.Errorf("unexpected field %q", field)
		}
	}
}

// nextEvent returns the next event, skipping comments.
func (s *sseStream) nextEvent(t *testing.T) sseEvent {
	t.Helper()
	for {
		ev, err := s.next()
		require.NoError(t, err)
		if ev.comment == "" {
			return ev
		}
	}
}

// requireEnd checks that the stream ends after what was read.
func (s *sseStream) requireEnd(t *testing.T) {
	t.Helper()
	for {
		ev, err := s.next()
		if errors.Is(err, io.EOF) {
			return
		}
		require.NoError(t, err)
		require.NotEmpty(t, ev.comment, "no event after the last one: got %+v", ev)
	}
}

// jobOf decodes an event's job.
func jobOf(t *testing.T, ev sseEvent) map[string]any {
	t.Helper()
	var v map[string]any
	require.NoError(t, json.Unmarshal([]byte(ev.data), &v), "data: %s", ev.data)
	return v
}

// withEvents gives the handler the hub ev.
func withEvents(ev *api.Events) func(*testing.T, *api.Config) {
	return func(_ *testing.T, cfg *api.Config) { cfg.Events = ev }
}

// applyOutcomes records completed outcomes for tasks from..to of job id.
func applyOutcomes(t *testing.T, s store.Store, id string, from, to int64) {
	t.Helper()
	var outcomes []store.Outcome
	for i := from; i <= to; i++ {
		outcomes = append(outcomes, store.Outcome{JobID: id, TaskID: i, State: warren.TaskCompleted, Attempts: 1, Worker: "w",
			Result: json.RawMessage(strconv.FormatInt(i, 10))})
	}
	_, err := s.ApplyOutcomes(context.Background(), outcomes)
	require.NoError(t, err)
}

// closeJob closes a job all of whose tasks finished, as completed.
func closeJob(t *testing.T, s store.Store, id string) {
	t.Helper()
	job, err := s.GetJob(context.Background(), id)
	require.NoError(t, err)
	closed, err := s.FinishJob(context.Background(), id, job.Version, warren.JobCompleted, []byte(`[]`), "")
	require.NoError(t, err)
	require.True(t, closed)
}

func TestEventsFollowAJobToItsClose(t *testing.T) {
	t.Parallel()
	for _, kind := range bothStores {
		t.Run(string(kind), func(t *testing.T) {
			t.Parallel()
			b := setup(t, &options{kind: kind})
			job := createJob(t, b.store, 10)
			publishAll(t, b.store)
			s := b.openEvents(t, t.Context(), job.ID)

			first := s.nextEvent(t)
			require.Equal(t, "progress", first.event)
			now, err := b.store.GetJob(t.Context(), job.ID)
			require.NoError(t, err)
			require.Equal(t, strconv.FormatInt(now.Version, 10), first.id, "the id is the job's version")
			require.Equal(t, string(bytes.TrimSpace(b.get(t, "/v1/jobs/"+job.ID).body)), first.data,
				"the data is exactly the JSON of GET /v1/jobs/{id}")

			applyOutcomes(t, b.store, job.ID, 1, 3)
			ev := s.nextEvent(t)
			require.Equal(t, "progress", ev.event)
			require.Equal(t, 3.0, jobOf(t, ev)["completed_tasks"])
			require.Equal(t, "running", jobOf(t, ev)["state"])
			v, err := strconv.ParseInt(ev.id, 10, 64)
			require.NoError(t, err)
			require.Greater(t, v, now.Version)

			applyOutcomes(t, b.store, job.ID, 4, 10)
			closeJob(t, b.store, job.ID)
			for ev = s.nextEvent(t); ev.event == "progress"; ev = s.nextEvent(t) {
				require.Equal(t, 10.0, jobOf(t, ev)["completed_tasks"])
			}
			require.Equal(t, "closed", ev.event)
			require.Equal(t, "completed", jobOf(t, ev)["state"])
			require.Equal(t, "/v1/jobs/"+job.ID+"/result", jobOf(t, ev)["result_url"])
			s.requireEnd(t)
		})
	}
}

// A closed job gives its closed event at once, and the stream ends; the
// stream is checked against the OpenAPI document.
func TestEventsOfAClosedJob(t *testing.T) {
	t.Parallel()
	b := setup(t, nil)
	job := createJob(t, b.store, 2)
	finish(t, b.store, job.ID, 2, warren.JobFailed, nil, 1)

	resp := b.get(t, "/v1/jobs/"+job.ID+"/events")
	require.Equal(t, http.StatusOK, resp.status)
	s := &sseStream{r: bufio.NewReader(bytes.NewReader(resp.body))}
	ev := s.nextEvent(t)
	require.Equal(t, "closed", ev.event)
	require.Equal(t, "failed", jobOf(t, ev)["state"])
	require.Equal(t, []any{map[string]any{"task_id": 1.0, "error": "task 1 broke"}}, jobOf(t, ev)["errors"])
	s.requireEnd(t)

	// HEAD (which the document, like net/http, leaves implicit) gets the
	// headers only.
	head, err := b.srv.Client().Head(b.srv.URL + "/v1/jobs/" + job.ID + "/events")
	require.NoError(t, err)
	require.NoError(t, head.Body.Close())
	require.Equal(t, http.StatusOK, head.StatusCode)
	require.Equal(t, "text/event-stream", head.Header.Get("Content-Type"))
}

func TestEventsOfAnUnknownJob(t *testing.T) {
	t.Parallel()
	b := setup(t, nil)
	resp := b.get(t, "/v1/jobs/no-such-job/events")
	requireError(t, resp, http.StatusNotFound, "not_found")
	require.Contains(t, errorMessage(t, resp), `job "no-such-job" not found`)
}

func TestEventsNeedAToken(t *testing.T) {
	t.Parallel()
	b := setup(t, &options{tokens: "r0:read,w0:write"})
	job := createJob(t, b.store, 1)
	requireError(t, b.get(t, "/v1/jobs/"+job.ID+"/events"), http.StatusUnauthorized, "unauthorized")
	requireError(t, b.get(t, "/v1/jobs/"+job.ID+"/events", bearer("nope")...), http.StatusUnauthorized, "unauthorized")

	s := b.openEvents(t, t.Context(), job.ID, bearer("r0")...)
	require.Equal(t, "progress", s.nextEvent(t).event)
}

// Many changes in a short time give at most one progress event per 250 ms
// to each stream; the closed event that follows one at once is not held
// back or dropped.
func TestEventsAreThrottled(t *testing.T) {
	t.Parallel()
	events := api.NewEvents(api.EventsConfig{PollInterval: 10 * time.Millisecond})
	t.Cleanup(events.Close)
	b := setup(t, &options{onNew: withEvents(events)})
	const n = 300
	job := createJob(t, b.store, n)
	publishAll(t, b.store)
	s := b.openEvents(t, t.Context(), job.ID)
	require.Equal(t, "progress", s.nextEvent(t).event)

	got := make(chan []sseEvent, 1)
	go func() {
		var evs []sseEvent
		defer func() { got <- evs }()
		for {
			ev, err := s.next()
			if err != nil {
				return
			}
			if ev.comment == "" {
				evs = append(evs, ev)
			}
		}
	}()
	start := time.Now()
	for i := int64(1); i <= n && time.Since(start) < 1500*time.Millisecond; i++ {
		applyOutcomes(t, b.store, job.ID, i, i)
		events.Notify(job.ID)
		// Paced: on a fast machine the 300 changes would otherwise all
		// fall within one throttle interval, which shows nothing.
		time.Sleep(3 * time.Millisecond)
	}
	elapsed := time.Since(start)
	all, err := b.store.GetJob(t.Context(), job.ID)
	require.NoError(t, err)
	applyOutcomes(t, b.store, job.ID, all.CompletedTasks+1, n)
	closeJob(t, b.store, job.ID)
	events.Notify(job.ID)

	evs := <-got
	require.NotEmpty(t, evs)
	last := evs[len(evs)-1]
	require.Equal(t, "closed", last.event, "the stream ends with closed")
	require.Equal(t, float64(n), jobOf(t, last)["completed_tasks"])
	progress := evs[:len(evs)-1]
	for _, ev := range progress {
		require.Equal(t, "progress", ev.event)
	}
	t.Logf("%d changes in %s gave %d progress events", all.CompletedTasks, elapsed, len(progress))
	limit := int(elapsed/api.DefaultEventsMinInterval) + 2
	require.LessOrEqual(t, len(progress), limit, "%d progress events in %s, after %d changes", len(progress), elapsed, all.CompletedTasks)
	require.GreaterOrEqual(t, len(progress), 2, "progress is streamed while the job runs (%s)", elapsed)
	if len(progress) >= 2 {
		span := progress[len(progress)-1].at.Sub(progress[0].at)
		require.GreaterOrEqual(t, span, time.Duration(len(progress)-2)*api.DefaultEventsMinInterval,
			"%d progress events within %s", len(progress), span)
	}
}

// Notify shows a change at once, without waiting for the next poll; a job
// deleted meanwhile ends the stream with a deleted event.
func TestEventsNotifyAndDeleted(t *testing.T) {
	t.Parallel()
	events := api.NewEvents(api.EventsConfig{PollInterval: time.Hour})
	t.Cleanup(events.Close)
	b := setup(t, &options{onNew: withEvents(events)})

	job := createJob(t, b.store, 2)
	publishAll(t, b.store)
	s := b.openEvents(t, t.Context(), job.ID)
	require.Equal(t, "progress", s.nextEvent(t).event)
	applyOutcomes(t, b.store, job.ID, 1, 2)
	closeJob(t, b.store, job.ID)
	events.Notify(job.ID)
	ev := s.nextEvent(t)
	require.Equal(t, "closed", ev.event, "seen through Notify: the next poll is an hour away")
	s.requireEnd(t)

	other := createJob(t, b.store, 1)
	publishAll(t, b.store)
	s = b.openEvents(t, t.Context(), other.ID)
	require.Equal(t, "progress", s.nextEvent(t).event)
	finish(t, b.store, other.ID, 1, warren.JobCompleted, []byte(`[1]`))
	require.NoError(t, b.store.DeleteJob(t.Context(), other.ID))
	events.Notify(other.ID)
	ev = s.nextEvent(t)
	require.Equal(t, "deleted", ev.event)
	require.JSONEq(t, fmt.Sprintf(`{"id":%q}`, other.ID), ev.data)
	require.Empty(t, ev.id)
	s.requireEnd(t)
}

// The handler notifies the hub of the jobs it cancels.
func TestEventsOfACancel(t *testing.T) {
	t.Parallel()
	events := api.NewEvents(api.EventsConfig{PollInterval: time.Hour})
	t.Cleanup(events.Close)
	b := setup(t, &options{onNew: withEvents(events)})
	job := createJob(t, b.store, 3)
	s := b.openEvents(t, t.Context(), job.ID)
	require.Equal(t, "progress", s.nextEvent(t).event)
	require.Equal(t, http.StatusOK, b.do(t, http.MethodPost, "/v1/jobs/"+job.ID+"/cancel", nil).status)
	ev := s.nextEvent(t)
	require.Equal(t, "closed", ev.event)
	require.Equal(t, "cancelled", jobOf(t, ev)["state"])
	s.requireEnd(t)
}

func TestEventsKeepAlive(t *testing.T) {
	t.Parallel()
	events := api.NewEvents(api.EventsConfig{KeepAlive: 20 * time.Millisecond})
	t.Cleanup(events.Close)
	b := setup(t, &options{onNew: withEvents(events)})
	job := createJob(t, b.store, 1)
	s := b.openEvents(t, t.Context(), job.ID)
	require.Equal(t, "progress", s.nextEvent(t).event)
	for range 2 {
		ev, err := s.next()
		require.NoError(t, err)
		require.Equal(t, sseEvent{comment: "keepalive", at: ev.at}, ev)
	}
}

// One poll per job and interval however many streams follow it, and none
// once the last stream left.
func TestEventsPollOncePerJob(t *testing.T) {
	t.Parallel()
	const interval = 20 * time.Millisecond
	var gets atomic.Int64
	events := api.NewEvents(api.EventsConfig{PollInterval: interval})
	t.Cleanup(events.Close)
	b := setup(t, &options{onNew: withEvents(events), wrap: func(s store.Store) store.Store {
		return &countingStore{Store: s, gets: &gets}
	}})
	job := createJob(t, b.store, 1)
	ctx, cancel := context.WithCancel(t.Context())
	const streams = 10
	for range streams {
		s := b.openEvents(t, ctx, job.ID)
		require.Equal(t, "progress", s.nextEvent(t).event)
	}
	require.Equal(t, 1, api.WatchedJobs(events))

	before, start := gets.Load(), time.Now()
	time.Sleep(20 * interval) // polls are counted over a span of time
	polls, span := gets.Load()-before, time.Since(start)
	require.LessOrEqual(t, polls, int64(span/interval)+2, "%d reads in %s for %d streams", polls, span, streams)
	require.GreaterOrEqual(t, polls, int64(2), "the job is polled")

	cancel()
	require.Eventually(t, func() bool { return api.WatchedJobs(events) == 0 }, 5*time.Second, 5*time.Millisecond,
		"the watch stops when its last stream leaves")
}

// countingStore counts GetJob calls.
type countingStore struct {
	store.Store
	gets *atomic.Int64
}

func (c *countingStore) GetJob(ctx context.Context, id string) (warren.Job, error) {
	c.gets.Add(1)
	return c.Store.GetJob(ctx, id)
}

// Shutdown of the http.Server ends the open streams at once rather than
// waiting for them; a closed hub refuses new streams with 503.
func TestEventsEndOnShutdown(t *testing.T) {
	t.Parallel()
	events := api.NewEvents(api.EventsConfig{})
	b := setup(t, &options{onNew: withEvents(events)})
	job := createJob(t, b.store, 1)
	s := b.openEvents(t, t.Context(), job.ID)
	require.Equal(t, "progress", s.nextEvent(t).event)

	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	start := time.Now()
	require.NoError(t, b.srv.Config.Shutdown(ctx), "Shutdown does not wait for the streams")
	require.Less(t, time.Since(start), 5*time.Second)
	s.requireEnd(t)
}

func TestEventsRefusedWhenClosedOrFull(t *testing.T) {
	t.Parallel()
	events := api.NewEvents(api.EventsConfig{MaxStreams: 1})
	t.Cleanup(events.Close)
	b := setup(t, &options{onNew: withEvents(events)})
	job := createJob(t, b.store, 1)
	s := b.openEvents(t, t.Context(), job.ID)
	require.Equal(t, "progress", s.nextEvent(t).event)
	resp := b.get(t, "/v1/jobs/"+job.ID+"/events")
	requireError(t, resp, http.StatusServiceUnavailable, "unavailable")
	require.Contains(t, errorMessage(t, resp), "too many event streams")
	require.Contains(t, string(b.get(t, "/metrics").body), "\nwarren_api_event_streams 1\n")

	events.Close()
	s.requireEnd(t)
	require.Contains(t, string(b.get(t, "/metrics").body), "\nwarren_api_event_streams 0\n",
		"a stream is no longer counted once it ended")
	resp = b.get(t, "/v1/jobs/"+job.ID+"/events")
	requireError(t, resp, http.StatusServiceUnavailable, "unavailable")
	require.Contains(t, errorMessage(t, resp), "shutting down")
}

func TestEventsHubServesOneHandler(t *testing.T) {
	t.Parallel()
	events := api.NewEvents(api.EventsConfig{})
	t.Cleanup(events.Close)
	s := openStore(t, sqliteStore, 0)
	_, err := api.New(api.Config{Store: s, Events: events})
	require.NoError(t, err)
	_, err = api.New(api.Config{Store: s, Events: events})
	require.ErrorContains(t, err, "Config.Events")
}

// One client (one token; one remote address without tokens) holds at most
// MaxStreamsPerClient streams, so that it cannot take every one of
// MaxStreams (issue 24, item 7).
func TestEventsPerClientLimit(t *testing.T) {
	t.Parallel()
	events := api.NewEvents(api.EventsConfig{MaxStreamsPerClient: 2})
	t.Cleanup(events.Close)
	b := setup(t, &options{tokens: "hog:read,other:read", onNew: withEvents(events)})
	job := createJob(t, b.store, 1)
	for range 2 {
		s := b.openEvents(t, t.Context(), job.ID, bearer("hog")...)
		require.Equal(t, "progress", s.nextEvent(t).event)
	}
	resp := b.get(t, "/v1/jobs/"+job.ID+"/events", bearer("hog")...)
	requireError(t, resp, http.StatusServiceUnavailable, "unavailable")
	require.Contains(t, errorMessage(t, resp), "this client holds 2 event streams already")
	s := b.openEvents(t, t.Context(), job.ID, bearer("other")...)
	require.Equal(t, "progress", s.nextEvent(t).event, "another token has its own share")

	// Without tokens, by remote address.
	open := setup(t, &options{onNew: withEvents(api.NewEvents(api.EventsConfig{MaxStreamsPerClient: 1}))})
	job = createJob(t, open.store, 1)
	require.Equal(t, "progress", open.openEvents(t, t.Context(), job.ID).nextEvent(t).event)
	requireError(t, open.get(t, "/v1/jobs/"+job.ID+"/events"), http.StatusServiceUnavailable, "unavailable")
}

// A stream ends after MaxStreamLife; the client reconnects with the
// Last-Event-ID it saw and is not sent that event again, only what is
// newer (issue 24, item 7).
func TestEventsStreamLifeAndResume(t *testing.T) {
	t.Parallel()
	events := api.NewEvents(api.EventsConfig{MaxStreamLife: 100 * time.Millisecond, PollInterval: time.Hour, KeepAlive: time.Hour})
	t.Cleanup(events.Close)
	b := setup(t, &options{onNew: withEvents(events)})
	job := createJob(t, b.store, 3)
	applyOutcomes(t, b.store, job.ID, 1, 1) // a version of its own: an event id
	s := b.openEvents(t, t.Context(), job.ID)
	first := s.nextEvent(t)
	require.Equal(t, "progress", first.event)
	require.NotEmpty(t, first.id)
	s.requireEnd(t)

	s = b.openEvents(t, t.Context(), job.ID, "Last-Event-ID", first.id)
	ev, err := s.next()
	require.NoError(t, err)
	require.Equal(t, "resumed", ev.comment, "the event the client has is not sent again")
	s.requireEnd(t)

	applyOutcomes(t, b.store, job.ID, 2, 2)
	events.Notify(job.ID)
	s = b.openEvents(t, t.Context(), job.ID, "Last-Event-ID", first.id)
	ev = s.nextEvent(t)
	require.Equal(t, "progress", ev.event, "what is newer is sent")
	require.NotEqual(t, first.id, ev.id)

	s = b.openEvents(t, t.Context(), job.ID, "Last-Event-ID", "nonsense")
	require.Equal(t, "progress", s.nextEvent(t).event, "an id this server did not send: from the start")
}
