package worker

import (
	"context"
	"crypto/rand"
	"fmt"
	"runtime/debug"
	"slices"
	"sync"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/warrenhq/warren/internal/wire"
	"github.com/warrenhq/warren/protocol"
)

// heartbeatPublishTimeout bounds the wait for one heartbeat's publish
// (the goodbye's, at shutdown): a blocked connection must not hold up
// Run's return.
const heartbeatPublishTimeout = 2 * time.Second

// heartbeater publishes the worker's heartbeat on a channel of its own on
// the publisher connection, every Config.HeartbeatInterval, for one
// connected period. It never touches the task channels: a heartbeat that
// cannot be published is logged, and the tasks go on.
type heartbeater struct {
	w    *Worker
	ch   *amqp.Channel // nil when heartbeats are off or failed to start
	quit chan struct{}
	done chan struct{}
	once sync.Once
	// mu serializes publishes on ch: the loop's and the goodbye.
	mu sync.Mutex
	// user is the connection's user, the heartbeats' user_id: "" when
	// the connection authenticated otherwise (EXTERNAL, a certificate),
	// whose user the worker cannot name.
	user string
}

// startHeartbeat starts the heartbeat loop on conn, at once with a first
// heartbeat. With heartbeats off, or when the channel cannot be opened,
// it returns a heartbeater that does nothing.
func (w *Worker) startHeartbeat(conn *amqp.Connection) *heartbeater {
	h := &heartbeater{w: w, quit: make(chan struct{}), done: make(chan struct{})}
	if w.cfg.HeartbeatInterval < 0 || conn == nil {
		close(h.done)
		return h
	}
	ch, err := conn.Channel()
	if err != nil {
		w.log.Warn("worker: cannot open the heartbeat channel; this worker will not appear in the servers' list of workers", "error", err)
		close(h.done)
		return h
	}
	h.ch, h.user = ch, connectionUser(conn)
	go h.run()
	return h
}

// connectionUser is the user conn authenticated as with a user name and
// password, or "" for another mechanism.
func connectionUser(conn *amqp.Connection) string {
	for _, auth := range conn.Config.SASL {
		switch a := auth.(type) {
		case *amqp.PlainAuth:
			return a.Username
		case *amqp.AMQPlainAuth:
			return a.Username
		}
	}
	return ""
}

// run publishes a heartbeat now and then every interval until stop, or
// until the channel closes under it.
func (h *heartbeater) run() {
	defer close(h.done)
	closed := h.ch.NotifyClose(make(chan *amqp.Error, 1))
	t := time.NewTicker(h.w.cfg.HeartbeatInterval)
	defer t.Stop()
	for {
		if err := h.publish(protocol.HeartbeatRunning); err != nil {
			h.w.log.Debug("worker: heartbeat not published", "error", err)
		}
		select {
		case <-h.quit:
			return
		case err := <-closed:
			// Not a reason to reconnect: the task channels are fine. The
			// next connected period opens a new one. A connection that
			// closes takes it along, which the rest of Run reports.
			log := h.w.log.Debug
			if err != nil && channelError(err.Code) {
				log = h.w.log.Warn
			}
			log("worker: the heartbeat channel closed; no heartbeats until the next reconnect", "error", err)
			return
		case <-t.C:
		}
	}
}

// channelError reports whether an AMQP close code is the broker closing
// the channel over what was done on it, not its connection going.
func channelError(code int) bool {
	switch code {
	case amqp.AccessRefused, amqp.NotFound, amqp.ResourceLocked, amqp.PreconditionFailed:
		return true
	}
	return false
}

// stop ends the loop; the channel closes with its connection.
func (h *heartbeater) stop() {
	h.once.Do(func() { close(h.quit) })
}

// goodbye ends the loop and publishes the worker's last heartbeat, state
// stopping, waiting at most heartbeatPublishTimeout.
func (h *heartbeater) goodbye() {
	h.stop()
	if h.ch == nil {
		return
	}
	sent := make(chan error, 1)
	go func() {
		<-h.done
		sent <- h.publish(protocol.HeartbeatStopping)
	}()
	t := time.NewTimer(heartbeatPublishTimeout)
	defer t.Stop()
	select {
	case err := <-sent:
		if err != nil {
			h.w.log.Debug("worker: goodbye heartbeat not published", "error", err)
		}
	case <-t.C:
		h.w.log.Debug("worker: goodbye heartbeat not published in time")
	}
}

// publish sends one heartbeat in state, unconfirmed (wire.Heartbeat).
func (h *heartbeater) publish(state string) error {
	out, err := wire.Heartbeat(h.w.names, h.w.heartbeat(state), time.Now())
	if err != nil {
		return err
	}
	// The broker checks user_id against the connection's user: servers
	// then know the heartbeat's publisher, and keep its entry for it.
	out.Msg.UserId = h.user
	h.mu.Lock()
	defer h.mu.Unlock()
	ctx, cancel := context.WithTimeout(context.Background(), heartbeatPublishTimeout)
	defer cancel()
	return h.ch.PublishWithContext(ctx, out.Exchange, out.Key, false, false, out.Msg)
}

// heartbeat is the worker's heartbeat now.
func (w *Worker) heartbeat(state string) protocol.Heartbeat {
	w.mu.RLock()
	types := make([]string, 0, len(w.handlers))
	for t := range w.handlers {
		types = append(types, t)
	}
	w.mu.RUnlock()
	slices.Sort(types)
	return protocol.Heartbeat{
		ID: w.runID, Name: w.cfg.Name, State: state,
		Queues: w.cfg.Queues, Types: types, Concurrency: w.cfg.Concurrency,
		InFlight: int(max(0, w.inFlight.Load())), StartedAt: w.startedAt,
		IntervalMS: w.cfg.HeartbeatInterval.Milliseconds(), Version: version(),
	}
}

// version is the version of warren's module this worker was built with,
// when the build recorded it.
var version = sync.OnceValue(func() string {
	info, ok := debug.ReadBuildInfo()
	if !ok {
		return ""
	}
	if info.Main.Path == "github.com/warrenhq/warren" {
		if info.Main.Version == "(devel)" {
			return ""
		}
		return info.Main.Version
	}
	for _, m := range info.Deps {
		if m.Path == "github.com/warrenhq/warren" {
			return m.Version
		}
	}
	return ""
})

// newRunID returns a random UUID (version 4) for one Run.
func newRunID() string {
	var b [16]byte
	_, _ = rand.Read(b[:])
	b[6] = b[6]&0x0f | 0x40
	b[8] = b[8]&0x3f | 0x80
	return fmt.Sprintf("%x-%x-%x-%x-%x", b[0:4], b[4:6], b[6:8], b[8:10], b[10:16])
}
