package api

import (
	"context"
	"errors"
	"log/slog"
	"net/http"
	"sync"
	"time"

	"github.com/warrenhq/warren"
	"github.com/warrenhq/warren/store"
)

// Defaults of EventsConfig.
const (
	// DefaultEventsPollInterval is how often a watched job is read from
	// the store when nothing in this process says it changed.
	DefaultEventsPollInterval = 250 * time.Millisecond
	// DefaultEventsMinInterval is the shortest time between two progress
	// events of one stream.
	DefaultEventsMinInterval = 250 * time.Millisecond
	// DefaultEventsKeepAlive is how long a stream may stay silent before
	// it sends a keepalive comment.
	DefaultEventsKeepAlive = 15 * time.Second
	// DefaultMaxEventStreams is how many event streams a handler serves
	// at once; more are answered 503.
	DefaultMaxEventStreams = 1000
	// DefaultMaxEventStreamsPerClient is how many of them one client (one
	// API token, or one remote address without tokens) may hold.
	DefaultMaxEventStreamsPerClient = 50
	// DefaultMaxEventStreamLife is how long a stream lasts at most before
	// the server ends it; the client reconnects with Last-Event-ID.
	DefaultMaxEventStreamLife = time.Hour
)

// eventsWriteTimeout bounds one write of an event stream when the
// http.Server sets no WriteTimeout: a client that stops reading is cut
// rather than holding its stream (and its goroutine) forever.
const eventsWriteTimeout = 30 * time.Second

// EventsConfig tunes an Events hub; the zero value gives the defaults.
type EventsConfig struct {
	// PollInterval is how often each watched job is read from the store,
	// once per interval however many streams follow it. Changes made in
	// this process (Events.Notify) are seen at once; changes made by
	// another server sharing the store, at the next poll. 0 means
	// DefaultEventsPollInterval.
	PollInterval time.Duration
	// MinInterval is the shortest time between two progress events of one
	// stream; the closed and deleted events are never held back. 0 means
	// DefaultEventsMinInterval.
	MinInterval time.Duration
	// KeepAlive is how long a stream stays silent before it sends a
	// ": keepalive" comment, which keeps proxies from closing it. 0
	// means DefaultEventsKeepAlive.
	KeepAlive time.Duration
	// MaxStreams is how many streams may be open at once; more are
	// answered 503. 0 means DefaultMaxEventStreams.
	MaxStreams int
	// MaxStreamsPerClient is how many of them one client may hold: the
	// streams of one API token, or of one remote address on a server
	// without tokens. More are answered 503, so that no client holds all
	// of MaxStreams. 0 means DefaultMaxEventStreamsPerClient.
	MaxStreamsPerClient int
	// MaxStreamLife is how long a stream lasts at most: then it ends, and
	// the client reconnects with the Last-Event-ID it saw, so a stream's
	// slot is not held for ever. 0 means DefaultMaxEventStreamLife.
	MaxStreamLife time.Duration
}

func (c EventsConfig) withDefaults() EventsConfig {
	if c.PollInterval <= 0 {
		c.PollInterval = DefaultEventsPollInterval
	}
	if c.MinInterval <= 0 {
		c.MinInterval = DefaultEventsMinInterval
	}
	if c.KeepAlive <= 0 {
		c.KeepAlive = DefaultEventsKeepAlive
	}
	if c.MaxStreams <= 0 {
		c.MaxStreams = DefaultMaxEventStreams
	}
	if c.MaxStreamsPerClient <= 0 {
		c.MaxStreamsPerClient = DefaultMaxEventStreamsPerClient
	}
	if c.MaxStreamLife <= 0 {
		c.MaxStreamLife = DefaultMaxEventStreamLife
	}
	return c
}

// Events is the hub behind GET /v1/jobs/{id}/events (eventstream.go): it watches each job
// some stream follows, reading it from the store once per poll interval
// however many streams follow it (and at once after Notify), and hands
// each change to the job's streams. Make one with NewEvents and give it
// to one handler in Config.Events. Its methods are safe for concurrent
// use.
type Events struct {
	cfg EventsConfig

	// Set by the handler it is given to (bind).
	store  store.Store
	render func(ctx context.Context, job warren.Job) ([]byte, error)
	log    *slog.Logger

	ctx    context.Context // the watchers' store calls; cancelled by Close
	cancel context.CancelFunc
	done   chan struct{} // closed by Close: every stream ends
	wg     sync.WaitGroup

	mu        sync.Mutex
	bound     bool
	closed    bool
	streams   int
	clients   map[string]int // streams by client (subscribe's client)
	watches   map[string]*watch
	shutdowns map[*http.Server]bool // servers whose Shutdown calls Close
}

// NewEvents returns an Events hub.
func NewEvents(cfg EventsConfig) *Events {
	ctx, cancel := context.WithCancel(context.Background())
	return &Events{cfg: cfg.withDefaults(), ctx: ctx, cancel: cancel, done: make(chan struct{}),
		watches: map[string]*watch{}, shutdowns: map[*http.Server]bool{}}
}

// Notify says that job jobID may have changed: the streams following it
// see the change now rather than at the next poll. The server calls it
// when it closed or cancelled a job. It never blocks.
func (e *Events) Notify(jobID string) {
	if e == nil {
		return
	}
	e.mu.Lock()
	w := e.watches[jobID]
	e.mu.Unlock()
	if w != nil {
		signal(w.wake)
	}
}

// Close ends every stream and refuses new ones (503), and stops the
// watchers. The handler also has every http.Server that serves a stream
// call it from Shutdown, which would otherwise wait for the streams to
// end by themselves. It is safe to call more than once.
func (e *Events) Close() {
	e.mu.Lock()
	if e.closed {
		e.mu.Unlock()
		return
	}
	e.closed = true
	close(e.done)
	e.mu.Unlock()
	e.cancel()
	e.wg.Wait()
}

// bind attaches e to the handler that serves its streams.
func (e *Events) bind(st store.Store, render func(context.Context, warren.Job) ([]byte, error), log *slog.Logger) error {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.bound {
		return errors.New("api: Config.Events is already used by another handler")
	}
	e.bound, e.store, e.render, e.log = true, st, render, log
	return nil
}

// closeOnShutdown has srv call Close when it shuts down, once per server.
func (e *Events) closeOnShutdown(srv *http.Server) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if srv == nil || e.shutdowns[srv] {
		return
	}
	e.shutdowns[srv] = true
	srv.RegisterOnShutdown(e.Close)
}

// snapshot is a watched job as last read.
type snapshot struct {
	version int64
	closed  bool // completed, failed or cancelled
	deleted bool // the job is gone
	// paused is warren.Job.Paused: a pause and a resume move no version
	// (store.Store.PauseJob), so a snapshot tells them apart by it.
	paused bool
	data   []byte // the job's JSON, as GET /v1/jobs/{id} answers it
}

// watch is one job followed by one or more streams.
type watch struct {
	id   string
	wake chan struct{} // capacity 1: read the job now
	stop chan struct{} // closed when the last stream left

	// Guarded by Events.mu.
	subs map[*subscription]struct{}
	last snapshot
	have bool // last was read
}

// subscription is one stream's hold on a watch.
type subscription struct {
	w       *watch
	client  string        // who holds it, for MaxStreamsPerClient
	changed chan struct{} // capacity 1: w.last changed
}

var (
	errEventsClosed = errors.New("events: closed")
	errEventsBusy   = errors.New("events: too many streams")
	errClientBusy   = errors.New("events: too many streams of this client")
)

// subscribe adds a stream of client following job id, starting its
// watcher if it is the first.
func (e *Events) subscribe(id, client string) (*subscription, error) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.closed {
		return nil, errEventsClosed
	}
	if e.streams >= e.cfg.MaxStreams {
		return nil, errEventsBusy
	}
	if e.clients[client] >= e.cfg.MaxStreamsPerClient {
		return nil, errClientBusy
	}
	w := e.watches[id]
	if w == nil {
		w = &watch{id: id, wake: make(chan struct{}, 1), stop: make(chan struct{}), subs: map[*subscription]struct{}{}}
		e.watches[id] = w
		e.wg.Add(1)
		go e.poll(w)
	}
	sub := &subscription{w: w, client: client, changed: make(chan struct{}, 1)}
	w.subs[sub] = struct{}{}
	if w.have {
		signal(sub.changed)
	}
	e.streams++
	if e.clients == nil {
		e.clients = make(map[string]int)
	}
	e.clients[client]++
	return sub, nil
}

// unsubscribe removes a stream, stopping its job's watcher if it was the
// last.
func (e *Events) unsubscribe(sub *subscription) {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.streams--
	if e.clients[sub.client]--; e.clients[sub.client] <= 0 {
		delete(e.clients, sub.client)
	}
	w := sub.w
	delete(w.subs, sub)
	if len(w.subs) == 0 {
		close(w.stop)
		delete(e.watches, w.id)
	}
}

// latest returns the job of sub as last read, and whether it was read.
func (e *Events) latest(sub *subscription) (snapshot, bool) {
	e.mu.Lock()
	defer e.mu.Unlock()
	return sub.w.last, sub.w.have
}

// poll reads w's job every poll interval, and when woken, until its last
// stream leaves or the hub closes.
func (e *Events) poll(w *watch) {
	defer e.wg.Done()
	tick := time.NewTicker(e.cfg.PollInterval)
	defer tick.Stop()
	failing := false
	for {
		if err := e.refresh(w); err != nil {
			if !failing && e.ctx.Err() == nil {
				e.log.Warn("api: events: cannot read a watched job; retrying at each poll", "job_id", w.id, "error", err)
			}
			failing = true
		} else {
			failing = false
		}
		select {
		case <-w.stop:
			return
		case <-e.done:
			return
		case <-tick.C:
		case <-w.wake:
		}
	}
}

// refresh reads w's job and, when its version or its pause changed (or
// it is gone),
// hands it to w's streams.
func (e *Events) refresh(w *watch) error {
	job, err := e.store.GetJob(e.ctx, w.id)
	var snap snapshot
	switch {
	case errors.Is(err, warren.ErrNotFound):
		snap = snapshot{deleted: true}
	case err != nil:
		return err
	case w.have && !w.last.deleted && job.Version <= w.last.version && job.Paused() == w.last.paused: // only the poller writes w.last
		return nil
	default:
		data, err := e.render(e.ctx, job)
		if err != nil {
			return err
		}
		snap = snapshot{version: job.Version, closed: job.State.Terminal(), paused: job.Paused(), data: data}
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	w.last, w.have = snap, true
	for sub := range w.subs {
		signal(sub.changed)
	}
	return nil
}

// signal sends on a channel of capacity 1 without blocking: a signal
// already pending stands for both.
func signal(ch chan struct{}) {
	select {
	case ch <- struct{}{}:
	default:
	}
}

// useEvents binds the handler's hub (Config.Events, or one of its own)
// and has it notified of the jobs the handler cancels, redrives and
// deletes (and pauses and resumes: pause.go).
func (s *server) useEvents() error {
	s.events = s.cfg.Events
	if s.events == nil {
		s.events = NewEvents(EventsConfig{})
	}
	if err := s.events.bind(s.cfg.Store, s.renderJob, s.log); err != nil {
		return err
	}
	onCancel := s.cfg.OnCancel
	s.cfg.OnCancel = func(job warren.Job) {
		s.events.Notify(job.ID)
		if onCancel != nil {
			onCancel(job)
		}
	}
	for _, hook := range []*func(string){&s.cfg.OnRedrive, &s.cfg.OnDelete} {
		next := *hook
		*hook = func(id string) {
			s.events.Notify(id)
			if next != nil {
				next(id)
			}
		}
	}
	return nil
}
