package main

import (
	"context"
	"time"

	"github.com/warrenhq/warren/internal/broker"
)

func runServer(ctx context.Context, args []string, env *environment) error {
	var f stackFlags
	fs := newFlagSet("server", "Run the HTTP API, the outbox relay (publishes submitted tasks) and the aggregator (records results, closes jobs).", env)
	f.register(fs, env)
	if err := parse(fs, args, env); err != nil {
		return err
	}
	tokens, err := f.check()
	if err != nil {
		return err
	}
	s, err := openStack(ctx, &f, tokens, env.logger)
	if err != nil {
		return err
	}
	defer s.close()
	env.logger.Info("warren server running", "api", s.url(), "amqp", broker.Redact(f.amqpURL),
		"database", redactDB(f.databaseURL), "prefix", f.prefix, "auth", len(tokens) > 0)
	start := time.Now()
	err = s.run(ctx)
	env.logger.Info("warren server stopped", "uptime", time.Since(start).Round(time.Second))
	return err
}
