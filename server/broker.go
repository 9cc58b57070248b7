package server

import (
	"context"
	"errors"
	"fmt"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"
	"golang.org/x/sync/errgroup"

	"github.com/warrenhq/warren/internal/aggregator"
	"github.com/warrenhq/warren/internal/backoff"
	"github.com/warrenhq/warren/internal/broker"
	"github.com/warrenhq/warren/internal/deadletters"
	"github.com/warrenhq/warren/internal/heartbeats"
	"github.com/warrenhq/warren/internal/outcomes"
	"github.com/warrenhq/warren/internal/relay"
	"github.com/warrenhq/warren/protocol"
)

// brokerSet is everything that lives on one pair of broker connections;
// the server rebuilds it whenever a connection is lost.
type brokerSet struct {
	pubConn *amqp.Connection
	conConn *amqp.Connection
	pub     *broker.Publisher
	relay   *relay.Relay
	agg     *aggregator.Aggregator
	dlq     *deadletters.Queue
	hb      *heartbeats.Consumer
	outs    *outcomes.Responder
}

// connect dials both broker connections, declares the topology and builds
// the broker-side components on them.
func (s *Server) connect(ctx context.Context) (_ *brokerSet, err error) {
	bs := &brokerSet{}
	defer func() {
		if err != nil {
			bs.close()
		}
	}()
	// Publishing and consuming use separate connections: a publisher
	// throttled by the broker must not stop the aggregator's acks. The
	// prefix in their names tells installations apart on one broker.
	suffix := ""
	if s.names.Prefix != "" {
		suffix = " " + s.names.Prefix
	}
	// Both connections go to one node: Dial starts at the node it last
	// connected to.
	if bs.pubConn, err = s.nodes.Dial(ctx, "warren server (relay)"+suffix); err != nil {
		return nil, err
	}
	if bs.conConn, err = s.nodes.Dial(ctx, "warren server (aggregator)"+suffix); err != nil {
		return nil, err
	}
	if err = broker.DeclareTopology(bs.conConn, s.names, s.topology()); err != nil {
		return nil, err
	}
	if err = broker.BindAttempts(bs.conConn, s.names); err != nil {
		return nil, err
	}
	if bs.pub, err = broker.NewPublisher(bs.pubConn, &broker.PublisherOptions{Logger: s.log}); err != nil {
		return nil, err
	}
	onPublished := s.cfg.Hooks.OnPublished
	var depth func(q string) (broker.QueueDepth, error)
	if s.cfg.RelayWindow >= 0 {
		// On the consumer connection: a publisher's connection that the
		// broker blocks (a resource alarm) would not answer.
		prober := broker.NewProber(bs.conConn)
		depth = func(q string) (broker.QueueDepth, error) {
			d, err := prober.Depth(s.names.WorkQueue(q))
			if err == nil {
				s.consumers.Observe(q, d.Consumers, time.Now())
			}
			return d, err
		}
	}
	declare := func(q string) error { return s.declareWorkQueue(bs.conConn, q) }
	if bs.relay, err = relay.New(relay.Config{Store: s.store, Publisher: bs.pub, Names: s.names, Window: s.cfg.RelayWindow, Depth: depth, Declare: declare, Sizer: s.sizer,
		BatchSize: s.cfg.RelayBatchSize, MaxRoundBytes: s.relayRoundBytes(), PollInterval: s.cfg.RelayPollInterval, MaxMessageBytes: s.cfg.MaxMessageBytes,
		Logger: s.log, OnFailed: func(n int) { s.failed.Add(float64(n)) }, OnReadyToClose: s.requestClose,
		TracerProvider: s.cfg.TracerProvider,
		OnMessages: func(tasks []int) {
			for _, n := range tasks {
				s.batches.Observe(float64(n))
			}
		},
		OnPublished: func(n int) {
			s.published.Add(float64(n))
			if onPublished != nil {
				onPublished(n)
			}
		}}); err != nil {
		return nil, err
	}
	// A job closed failed (fail-fast) is not broadcast as cancelled: it
	// may be redriven, and workers would then skip its redriven tasks. Its
	// unpublished tasks are never sent; queued ones run and their results
	// are ignored.
	if bs.agg, err = aggregator.New(aggregator.Config{Store: s.store, Conn: bs.conConn, Names: s.names,
		BatchSize: s.cfg.AggregatorBatchSize, Linger: s.cfg.AggregatorLinger, ScanInterval: s.cfg.CloseScanInterval,
		Reducers: s.reducers, MaxResultBytes: s.cfg.MaxResultBytes, MaxMessageBytes: s.cfg.MaxMessageBytes,
		MaxJobTasks: s.cfg.MaxJobTasks, MaxTaskBytes: s.cfg.MaxTaskBytes, KeepAttempts: s.cfg.KeepAttempts,
		MaxInflightBytes: s.cfg.MaxInflightBytes, Logger: s.log, Hooks: s.aggHooks, TracerProvider: s.cfg.TracerProvider}); err != nil {
		return nil, err
	}
	if bs.dlq, err = deadletters.New(deadletters.Config{Conn: bs.conConn, Publisher: bs.pub, Names: s.names, Store: s.store, Logger: s.log}); err != nil {
		return nil, err
	}
	var onBeat func(protocol.Heartbeat)
	if h := s.cfg.Hooks.OnWorkerHeartbeat; h != nil {
		onBeat = func(b protocol.Heartbeat) { h(b.ID, b.State) }
	}
	if bs.hb, err = heartbeats.NewConsumer(heartbeats.Config{Conn: bs.conConn, Exchange: s.names.HeartbeatExchange,
		Registry: s.workers, Logger: s.log, OnApplied: onBeat, OnNew: func(protocol.Heartbeat) { s.nudgePauses() }}); err != nil {
		return nil, err
	}
	if bs.outs, err = outcomes.New(outcomes.Config{Conn: bs.conConn, Queue: s.names.OutcomesQueue, Store: s.store,
		MaxMessageBytes: s.cfg.MaxMessageBytes, Logger: s.log}); err != nil {
		return nil, err
	}
	return bs, nil
}

// run runs the relay and the aggregator until ctx is done (nil) or one of
// them fails, which is a lost connection or channel.
func (bs *brokerSet) run(ctx context.Context) error {
	g, gctx := errgroup.WithContext(ctx)
	g.Go(func() error { return stopOthers(gctx, "relay", bs.relay.Run(gctx)) })
	g.Go(func() error { return stopOthers(gctx, "aggregator", bs.agg.Run(gctx)) })
	g.Go(func() error { return stopOthers(gctx, "heartbeat consumer", bs.hb.Run(gctx)) })
	g.Go(func() error { return stopOthers(gctx, "outcomes responder", bs.outs.Run(gctx)) })
	return g.Wait()
}

// node is the address of the node the consumer connection went to, for
// logs.
func (bs *brokerSet) node() string {
	if bs.conConn == nil {
		return ""
	}
	return bs.conConn.RemoteAddr().String()
}

func (bs *brokerSet) close() {
	if bs.pub != nil {
		_ = bs.pub.Close()
	}
	for _, c := range []*amqp.Connection{bs.pubConn, bs.conConn} {
		if c != nil {
			_ = c.Close()
		}
	}
}

// stopOthers turns a component that returned early, without error, while
// the server is still meant to run, into an error so the group stops.
func stopOthers(ctx context.Context, name string, err error) error {
	if err != nil {
		return fmt.Errorf("%s: %w", name, err)
	}
	if ctx.Err() == nil {
		return fmt.Errorf("%s stopped unexpectedly", name)
	}
	return nil
}

func (s *Server) setBroker(bs *brokerSet) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.broker = bs
}

func (s *Server) current() *brokerSet {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.broker
}

// consumerConn is the current consumer connection, for the queue-depth
// metric and the reconciler's look at the queues; nil while
// disconnected.
func (s *Server) consumerConn() *amqp.Connection {
	if bs := s.current(); bs != nil {
		return bs.conConn
	}
	return nil
}

// busyCheckTimeout bounds the reconciler's look at the queues; a broker
// that does not answer in time counts as busy.
const busyCheckTimeout = 10 * time.Second

// queuesBusy reports, on the current consumer connection, whether a
// message waits in the results queue, the dead-letter intake, a retry
// tier or the work queue: an outcome not yet recorded, or a task not yet
// delivered, either of which the reconciler takes as a sign of life
// (reconciler.Config.Busy). The work queue comes last, so that a retry
// that leaves its tier for it during the check is still seen.
// Disconnected is an error.
func (s *Server) queuesBusy(ctx context.Context) (bool, error) {
	conn := s.consumerConn()
	if conn == nil {
		return false, errDisconnected
	}
	ctx, cancel := context.WithTimeout(ctx, busyCheckTimeout)
	defer cancel()
	// The open jobs' work queues too (the relay declares each before it
	// publishes to it; one that cannot be read counts as busy).
	open, err := s.store.OpenQueues(ctx)
	if err != nil {
		return false, err
	}
	work := []string{s.names.TasksQueue}
	queues := append([]string{s.names.ResultsQueue, s.names.DeadQueue}, s.tierQueues(protocol.DefaultQueue)...)
	for _, q := range open {
		if q != protocol.DefaultQueue {
			queues = append(queues, s.tierQueues(q)...)
			work = append(work, s.names.WorkQueue(q))
		}
	}
	return broker.Waiting(ctx, conn, append(queues, work...)...)
}

// tierQueues are the queues of the server's retry tiers of work queue q.
func (s *Server) tierQueues(q string) []string {
	queues := make([]string, len(s.tiers))
	for i, d := range s.tiers {
		queues[i] = s.names.QueueRetryQueue(q, protocol.RetryTierName(d))
	}
	return queues
}

// reconnectPolicy is the backoff between attempts to reconnect to the
// broker: jittered, so that servers that lost one broker do not return in
// step. An attempt tries every node of the list (broker.Nodes.Dial), so
// a live node is reached on the first attempt after a loss; the backoff
// grows while no node lets the server set up, or while connections are
// lost soon after they are made.
var reconnectPolicy = backoff.Policy{Min: 100 * time.Millisecond, Max: 10 * time.Second, Jitter: 0.5}

// superviseBroker runs the broker side and rebuilds it, with backoff,
// whenever a connection or channel is lost: the API keeps serving
// meanwhile (/readyz answers 503), tasks not yet confirmed stay in the
// outbox and results not yet acknowledged stay in their queue, so nothing
// is lost. After a loss, or an attempt that failed on the node it
// reached, the next attempt starts at another node of the cluster. It
// returns nil once ctx is done.
func (s *Server) superviseBroker(ctx context.Context) error {
	retry := backoff.New(reconnectPolicy)
	connectedAt := time.Now()
	for {
		if bs := s.current(); bs != nil {
			err := bs.run(ctx)
			s.setBroker(nil)
			bs.close()
			if ctx.Err() != nil {
				return nil
			}
			// A connection that held resets the backoff, so a lost node
			// is left at once; one lost soon after it was made (a node
			// still electing its queues' leaders, a broker that keeps
			// refusing our messages) does not, so reconnects do not spin.
			if time.Since(connectedAt) >= reconnectPolicy.Max {
				retry.Reset()
			}
			s.nodes.Failover()
			s.log.Warn("broker connection lost; reconnecting", "node", bs.node(), "error", err)
		}
		wait := retry.Next()
		if !backoff.Sleep(ctx, wait) {
			return nil
		}
		bs, err := s.connect(ctx)
		if err != nil {
			if ctx.Err() != nil {
				return nil
			}
			s.nodes.Failover()
			s.log.Warn("reconnecting to the broker failed; retrying", "error", err, "backoff", wait)
			continue
		}
		connectedAt = time.Now()
		s.setBroker(bs)
		s.log.Info("broker connection restored", "node", bs.node())
	}
}

var errDisconnected = errors.New("not connected to the broker; reconnecting")

// deadLetters serves the API's dead-letter operations on the current
// broker connection.
type deadLetters struct{ s *Server }

func (d deadLetters) List(ctx context.Context, f deadletters.Filter) ([]deadletters.Message, error) {
	if bs := d.s.current(); bs != nil {
		return bs.dlq.List(ctx, f)
	}
	return nil, errDisconnected
}

func (d deadLetters) Replay(ctx context.Context, f deadletters.Filter) (deadletters.Report, error) {
	if bs := d.s.current(); bs != nil {
		return bs.dlq.Replay(ctx, f)
	}
	return deadletters.Report{}, errDisconnected
}

func (d deadLetters) Purge(ctx context.Context, f deadletters.Filter) (int, error) {
	if bs := d.s.current(); bs != nil {
		return bs.dlq.Purge(ctx, f)
	}
	return 0, errDisconnected
}

// broadcastCancel tells every worker, in the background, to skip the
// job's remaining tasks. A missed broadcast costs only wasted work: the
// aggregator ignores results of closed jobs.
func (s *Server) broadcastCancel(jobID string) {
	bs := s.current()
	if bs == nil {
		s.log.Warn("cancel not broadcast (broker disconnected); workers will run the job's queued tasks and their results will be ignored", "job_id", jobID)
		return
	}
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if err := broker.PublishCancel(ctx, bs.pub, s.names, jobID); err != nil {
			s.log.Warn("cancel broadcast failed; workers will run the job's queued tasks and their results will be ignored",
				"job_id", jobID, "error", err)
		}
	}()
}

// brokerReady reports whether the broker side is connected, for /readyz.
func (s *Server) brokerReady(context.Context) error {
	bs := s.current()
	if bs == nil {
		return errDisconnected
	}
	if bs.pubConn.IsClosed() || bs.conConn.IsClosed() {
		return errors.New("broker connection lost")
	}
	select {
	case <-bs.pub.Done():
		return errors.New("broker publisher channel closed")
	default:
	}
	return nil
}

// relayRoundBytes is the most payload bytes one relay round claims: half
// of MaxInflightBytes (the round holds them, and their messages).
func (s *Server) relayRoundBytes() int64 { return s.cfg.MaxInflightBytes / 2 }
