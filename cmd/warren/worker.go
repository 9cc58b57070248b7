package main

import (
	"context"
	"fmt"
	"sort"
	"strings"

	"github.com/warrenhq/warren/worker"
)

func runWorker(ctx context.Context, args []string, env *environment) error {
	var c common
	fs := newFlagSet("worker", "Run a worker with the built-in handlers: echo, wordcount, sleep, flaky.", env)
	c.register(fs, env)
	concurrency := fs.Int("concurrency", 8, "handlers running at once")
	types := fs.String("types", "", "comma-separated handlers to serve (default: all built-ins)")
	shutdown := fs.Duration("shutdown-timeout", 0, "how long to let in-flight tasks finish on SIGTERM (default 30s)")
	if err := parse(fs, args, env); err != nil {
		return err
	}
	if *concurrency < 1 {
		return fmt.Errorf("--concurrency must be >= 1, got %d", *concurrency)
	}
	serve, err := selectBuiltins(*types)
	if err != nil {
		return err
	}
	tiers, err := c.tiers()
	if err != nil {
		return err
	}
	w, err := worker.New(worker.Config{
		AMQPURL: c.amqpURL, Prefix: c.prefix, Concurrency: *concurrency,
		ShutdownTimeout: *shutdown, Logger: env.logger, RetryTiers: tiers,
	})
	if err != nil {
		return err
	}
	for _, name := range serve {
		w.Handle(name, builtins[name])
	}
	env.logger.Info("warren worker running", "types", strings.Join(serve, ","), "concurrency", *concurrency, "prefix", c.prefix)
	return w.Run(ctx)
}

// selectBuiltins parses --types; empty means every built-in.
func selectBuiltins(list string) ([]string, error) {
	var out []string
	if strings.TrimSpace(list) == "" {
		for name := range builtins {
			out = append(out, name)
		}
		sort.Strings(out)
		return out, nil
	}
	seen := map[string]bool{}
	for _, name := range strings.Split(list, ",") {
		name = strings.TrimSpace(name)
		if _, ok := builtins[name]; !ok {
			return nil, fmt.Errorf("--types: unknown handler %q (built-ins: echo, flaky, sleep, wordcount)", name)
		}
		if !seen[name] {
			seen[name] = true
			out = append(out, name)
		}
	}
	return out, nil
}
