package api

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"net"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/warrenhq/warren"
)

// renderJob is the JSON of GET /v1/jobs/{id} for job.
func (s *server) renderJob(ctx context.Context, job warren.Job) ([]byte, error) {
	out, err := s.jobDetailContext(ctx, job)
	if err != nil {
		return nil, err
	}
	return json.Marshal(out)
}

// jobEvents handles GET /v1/jobs/{id}/events: a text/event-stream of the
// job's changes. The job as it is now comes at once (a progress event, or
// closed if it is already closed); then a progress event whenever its
// version changed, at most one per MinInterval; then closed (or deleted)
// ends the stream. Keepalive comments fill silences; the stream also ends
// when the client goes away and when the server shuts down.
func (s *server) jobEvents(w http.ResponseWriter, r *http.Request) {
	id, ok := pathJobID(w, r)
	if !ok {
		return
	}
	ctx := r.Context()
	job, err := s.cfg.Store.GetJob(ctx, id)
	if err != nil {
		s.storeError(w, r, err, "get job", "job_id", id)
		return
	}
	data, err := s.renderJob(ctx, job)
	if err != nil {
		s.storeError(w, r, err, "job errors", "job_id", id)
		return
	}
	e := s.events
	srv, _ := ctx.Value(http.ServerContextKey).(*http.Server)
	e.closeOnShutdown(srv)
	sub, err := e.subscribe(id, streamClient(r))
	switch {
	case errors.Is(err, errEventsClosed):
		writeError(w, errorf(http.StatusServiceUnavailable, codeUnavailable, "the server is shutting down; retry on another"))
		return
	case errors.Is(err, errClientBusy):
		writeError(w, errorf(http.StatusServiceUnavailable, codeUnavailable,
			"this client holds %d event streams already, the most one may; close one, or poll GET /v1/jobs/{id}", e.cfg.MaxStreamsPerClient))
		return
	case err != nil:
		writeError(w, errorf(http.StatusServiceUnavailable, codeUnavailable,
			"too many event streams are open (%d); retry later or poll GET /v1/jobs/{id}", e.cfg.MaxStreams))
		return
	}
	defer e.unsubscribe(sub)
	s.cfg.Metrics.eventStream(1)
	defer s.cfg.Metrics.eventStream(-1)

	st := newEventStream(w, srv)
	defer st.end()
	h := w.Header()
	h.Set("Content-Type", "text/event-stream")
	h.Set("Cache-Control", "no-cache")
	h.Set("X-Accel-Buffering", "no") // nginx would otherwise hold events back in its buffer
	h.Set("X-Content-Type-Options", "nosniff")
	w.WriteHeader(http.StatusOK)
	if r.Method == http.MethodHead {
		return
	}
	first := snapshot{version: job.Version, closed: job.State.Terminal(), paused: job.Paused(), data: data}
	s.followJob(ctx, st, sub, first, resumesAt(r, first))
}

// streamClient names the client of an event stream, for
// MaxStreamsPerClient: its API token (a hash of it: the key stays in
// memory only, but a hash is all it needs), else its remote address
// without the port.
func streamClient(r *http.Request) string {
	if token, ok := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer "); ok && token != "" {
		sum := sha256.Sum256([]byte(token))
		return "token " + hex.EncodeToString(sum[:])
	}
	host, _, err := net.SplitHostPort(r.RemoteAddr)
	if err != nil {
		host = r.RemoteAddr
	}
	return "address " + host
}

// resumesAt reports whether a reconnecting client (EventSource sends the
// id of the last event it saw as Last-Event-ID) has first already: the
// job is open and not newer than that event, so its first progress event
// would repeat one.
func resumesAt(r *http.Request, first snapshot) bool {
	last, err := strconv.ParseInt(strings.TrimSpace(r.Header.Get("Last-Event-ID")), 10, 64)
	// A pause moves no version: the client of a paused job is sent its
	// state again, as it may have missed the pause.
	return err == nil && !first.closed && !first.paused && first.version <= last
}

// followJob writes first, then the changes of sub's job, until the job
// closes or is deleted, the client goes away, the hub closes or a write
// fails.
func (s *server) followJob(ctx context.Context, st *eventStream, sub *subscription, first snapshot, resumed bool) {
	e := s.events
	if first.closed {
		_ = st.event("closed", first.version, first.data)
		return
	}
	if resumed {
		// Something to say at once, so that the client knows it is
		// connected; the event it has is not sent again.
		if st.comment("resumed") != nil {
			return
		}
	} else if st.event("progress", first.version, first.data) != nil {
		return
	}
	sent, lastSent, paused := first.version, time.Now(), first.paused
	keepAlive := time.NewTimer(e.cfg.KeepAlive)
	defer keepAlive.Stop()
	// The stream ends after MaxStreamLife: the client reconnects with
	// Last-Event-ID, and its slot was not held for ever.
	life := time.NewTimer(e.cfg.MaxStreamLife)
	defer life.Stop()
	var (
		held     *time.Timer // set while a change waits out MinInterval
		heldDone <-chan time.Time
	)
	defer func() {
		if held != nil {
			held.Stop()
		}
	}()
	for {
		select {
		case <-ctx.Done():
			return
		case <-e.done:
			return
		case <-life.C:
			_ = st.comment("the stream lasted its longest; reconnect with Last-Event-ID")
			return
		case <-keepAlive.C:
			if st.comment("keepalive") != nil {
				return
			}
			keepAlive.Reset(e.cfg.KeepAlive)
			continue
		case <-sub.changed:
		case <-heldDone:
			held, heldDone = nil, nil
		}
		snap, ok := e.latest(sub)
		var err error
		switch {
		case ok && !snap.deleted && !snap.closed && snap.paused != paused:
			// Never held back: a pause is what someone watching a job
			// wants to see at once.
			name := "resumed"
			if snap.paused {
				name = "paused"
			}
			err = st.event(name, snap.version, snap.data)
			sent, lastSent, paused = max(sent, snap.version), time.Now(), snap.paused
		case !ok || (!snap.deleted && snap.version <= sent):
			continue // nothing newer than what the stream has
		case snap.deleted:
			data, _ := json.Marshal(map[string]string{"id": sub.w.id})
			_ = st.event("deleted", 0, data)
			return
		case snap.closed:
			_ = st.event("closed", snap.version, snap.data)
			return
		case time.Since(lastSent) < e.cfg.MinInterval:
			if held == nil {
				held = time.NewTimer(e.cfg.MinInterval - time.Since(lastSent))
				heldDone = held.C
			}
			continue
		default:
			err = st.event("progress", snap.version, snap.data)
			sent, lastSent = snap.version, time.Now()
		}
		if err != nil {
			return
		}
		keepAlive.Reset(e.cfg.KeepAlive)
	}
}

// eventStream writes server-sent events to one response, flushing each.
type eventStream struct {
	w  http.ResponseWriter
	rc *http.ResponseController
	// timeout bounds each write: the server's WriteTimeout, which would
	// otherwise cut the stream that long after the request, extended per
	// write; else eventsWriteTimeout.
	timeout time.Duration
	buf     []byte
}

func newEventStream(w http.ResponseWriter, srv *http.Server) *eventStream {
	st := &eventStream{w: w, rc: http.NewResponseController(w), timeout: eventsWriteTimeout}
	if srv != nil && srv.WriteTimeout > 0 {
		st.timeout = srv.WriteTimeout
	}
	return st
}

// event writes one event: its name, its id (when > 0) and data, one data
// line per line of data.
func (st *eventStream) event(name string, id int64, data []byte) error {
	b := append(st.buf[:0], "event: "...)
	b = append(b, name...)
	b = append(b, '\n')
	if id > 0 {
		b = append(b, "id: "...)
		b = strconv.AppendInt(b, id, 10)
		b = append(b, '\n')
	}
	for {
		line, rest, more := cutLine(data)
		b = append(b, "data: "...)
		b = append(b, line...)
		b = append(b, '\n')
		if !more {
			break
		}
		data = rest
	}
	b = append(b, '\n')
	st.buf = b
	return st.write(b)
}

// comment writes a comment line, which clients ignore.
func (st *eventStream) comment(text string) error {
	return st.write([]byte(": " + text + "\n\n"))
}

func (st *eventStream) write(b []byte) error {
	_ = st.rc.SetWriteDeadline(time.Now().Add(st.timeout))
	if _, err := st.w.Write(b); err != nil {
		return err
	}
	return st.rc.Flush()
}

// end clears the write deadline, which would otherwise outlive the
// response on a kept-alive connection of a server without WriteTimeout
// (net/http sets it again for the next request only when it has one).
func (st *eventStream) end() {
	_ = st.rc.SetWriteDeadline(time.Time{})
}

// cutLine splits data at its first line break (\r\n, \n or \r).
func cutLine(data []byte) (line, rest []byte, found bool) {
	for i, c := range data {
		switch c {
		case '\n':
			return data[:i], data[i+1:], true
		case '\r':
			if i+1 < len(data) && data[i+1] == '\n' {
				return data[:i], data[i+2:], true
			}
			return data[:i], data[i+1:], true
		}
	}
	return data, nil, false
}
