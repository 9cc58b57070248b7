package main

import (
	"context"
	"errors"
	"fmt"
	"time"

	"golang.org/x/sync/errgroup"

	"github.com/warrenhq/warren/aggregator"
	"github.com/warrenhq/warren/broker"
	"github.com/warrenhq/warren/relay"
	"github.com/warrenhq/warren/store/open"
)

func runServer(ctx context.Context, args []string, env *environment) error {
	var c common
	fs := newFlagSet("server", "Run the outbox relay (publishes submitted tasks) and the aggregator (records results, closes jobs).", env)
	c.register(fs, env)
	batch := fs.Int("aggregator-batch", aggregator.DefaultBatchSize, "results recorded per store transaction")
	linger := fs.Duration("aggregator-linger", aggregator.DefaultLinger, "how long a result batch waits to fill")
	relayBatch := fs.Int("relay-batch", relay.DefaultBatchSize, "tasks published per outbox round trip")
	if err := parse(fs, args, env); err != nil {
		return err
	}
	if *batch < 1 || *relayBatch < 1 || *linger < 0 {
		return errors.New("--aggregator-batch and --relay-batch must be >= 1 and --aggregator-linger >= 0")
	}
	log := env.logger
	names := c.names()

	st, err := open.Open(ctx, c.databaseURL)
	if err != nil {
		return err
	}
	defer st.Close()
	// Publishing and consuming use separate connections: a publisher
	// throttled by the broker must not stop the aggregator's acks.
	pubConn, err := broker.Dial(ctx, c.amqpURL, "warren server (relay)")
	if err != nil {
		return err
	}
	defer pubConn.Close()
	conConn, err := broker.Dial(ctx, c.amqpURL, "warren server (aggregator)")
	if err != nil {
		return err
	}
	defer conConn.Close()
	if err := broker.DeclareTopology(conConn, names, nil); err != nil {
		return err
	}
	pub, err := broker.NewPublisher(pubConn, nil)
	if err != nil {
		return err
	}
	defer pub.Close()

	r, err := relay.New(relay.Config{Store: st, Publisher: pub, Names: names, BatchSize: *relayBatch, Logger: log})
	if err != nil {
		return err
	}
	a, err := aggregator.New(aggregator.Config{Store: st, Conn: conConn, Names: names, BatchSize: *batch, Linger: *linger, Logger: log})
	if err != nil {
		return err
	}
	log.Info("warren server running", "amqp", broker.Redact(c.amqpURL), "database", redactDB(c.databaseURL), "prefix", c.prefix)
	g, gctx := errgroup.WithContext(ctx)
	g.Go(func() error { return stopOthers(gctx, "relay", r.Run(gctx)) })
	g.Go(func() error { return stopOthers(gctx, "aggregator", a.Run(gctx)) })
	start := time.Now()
	err = g.Wait()
	log.Info("warren server stopped", "uptime", time.Since(start).Round(time.Second))
	return err
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
