package server

import (
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/warrenhq/warren/internal/api"
	"github.com/warrenhq/warren/internal/broker"
	"github.com/warrenhq/warren/internal/queuereaper"
)

// topology is the options the server declares its queues with.
func (s *Server) topology() *broker.TopologyOptions {
	return &broker.TopologyOptions{RetryTiers: s.tiers, DeliveryLimit: s.cfg.DeliveryLimit,
		QuorumReplicas: s.cfg.QuorumReplicas, Logger: s.log}
}

// declareWorkQueue declares work queue q for the relay, on the consumer
// connection conn, and tells the reaper it is in use. It takes turns with
// the reaper's unbind and delete, so that this server never publishes
// into a queue its reaper is deleting.
func (s *Server) declareWorkQueue(conn *amqp.Connection, q string) error {
	s.queueMu.Lock()
	defer s.queueMu.Unlock()
	s.reaper.Note(q)
	return broker.DeclareWorkQueue(conn, s.names, q, s.topology())
}

// newReaper is the queue reaper: it deletes the work queues per type
// idle for Config.QueueIdleDelete, on the current consumer connection,
// and reads every open job's queue for its "waiting" (queuestats).
func (s *Server) newReaper() (*queuereaper.Reaper, error) {
	withConn := func(f func(conn *amqp.Connection) error) error {
		conn := s.consumerConn()
		if conn == nil {
			return errDisconnected
		}
		return f(conn)
	}
	return queuereaper.New(queuereaper.Config{
		Idle:     s.cfg.QueueIdleDelete,
		Interval: s.cfg.QueueSweepInterval,
		Open:     s.store.OpenQueues,
		Logger:   s.log,
		Depth: func(q string) (d broker.QueueDepth, err error) {
			err = withConn(func(conn *amqp.Connection) error {
				p := broker.NewProber(conn)
				defer p.Close()
				d, err = p.Depth(s.names.WorkQueue(q))
				return err
			})
			return d, err
		},
		Unbind: func(q string) error {
			s.queueMu.Lock()
			defer s.queueMu.Unlock()
			return withConn(func(conn *amqp.Connection) error { return broker.UnbindWorkQueue(conn, s.names, q) })
		},
		Delete: func(q string) (deleted bool, lost int, err error) {
			s.queueMu.Lock()
			defer s.queueMu.Unlock()
			err = withConn(func(conn *amqp.Connection) error {
				deleted, lost, err = broker.DeleteIdleWorkQueue(conn, s.names, q, s.topology())
				return err
			})
			return deleted, lost, err
		},
		Declare: func(q string) error {
			s.queueMu.Lock()
			defer s.queueMu.Unlock()
			return withConn(func(conn *amqp.Connection) error { return broker.DeclareWorkQueue(conn, s.names, q, s.topology()) })
		},
		Forget: func(q string) {
			if bs := s.current(); bs != nil {
				bs.relay.ForgetQueue(q)
			}
		},
		Observe: func(q string, d broker.QueueDepth, at time.Time) { s.consumers.Observe(q, d.Consumers, at) },
		OnDeleted: func(q string) {
			s.consumers.Forget(q)
			if h := s.cfg.Hooks.OnQueueDeleted; h != nil {
				h(q)
			}
		},
	})
}

// waiting is api.Config.Waiting: an open job waits for a consumer when
// the server's last reading of its work queue found none.
func (s *Server) waiting(_, queue string) *api.Waiting {
	since, ok := s.consumers.NoneSince(queue)
	if !ok {
		return nil
	}
	return &api.Waiting{Reason: api.WaitingNoConsumer, Queue: queue, Since: since}
}
