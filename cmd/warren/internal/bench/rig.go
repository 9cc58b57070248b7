package bench

import (
	"context"
	"fmt"
	"sync"

	"github.com/warrenhq/warren/protocol"
	"github.com/warrenhq/warren/server"
	"github.com/warrenhq/warren/worker"
)

// rig is one benchmark part's server and in-process workers, on names of
// its own.
type rig struct {
	srv  *server.Server
	errs chan error // a worker that stopped, with its error (nil: stopped early)
	stop context.CancelFunc
	wg   sync.WaitGroup
}

// startRig starts the server cfg describes (the one `warren server` runs,
// on cfg.DatabaseURL, listening on a free loopback port) with hooks, and
// cfg.Workers workers serving handlers, and waits until every worker
// consumes. close stops them all.
func startRig(ctx context.Context, cfg Config, names protocol.Names, hooks server.Hooks, handlers map[string]worker.HandlerFunc) (*rig, error) {
	srv, err := server.New(server.Config{AMQPURL: cfg.AMQPURL, DatabaseURL: cfg.DatabaseURL, Prefix: names.Prefix,
		Listen: "127.0.0.1:0", RelayBatchSize: cfg.RelayBatch, AggregatorBatchSize: cfg.AggregatorBatch,
		Logger: cfg.Logger, Hooks: hooks})
	if err != nil {
		return nil, err
	}
	if err := srv.Start(ctx); err != nil {
		return nil, err
	}
	runCtx, stop := context.WithCancel(ctx)
	r := &rig{srv: srv, errs: make(chan error, cfg.Workers), stop: stop}
	for i := range cfg.Workers {
		w, err := worker.New(worker.Config{AMQPURL: cfg.AMQPURL, Prefix: names.Prefix, Concurrency: cfg.Concurrency,
			Prefetch: cfg.Prefetch, Name: fmt.Sprintf("bench-%d", i), Logger: cfg.Logger})
		if err != nil {
			_ = r.close()
			return nil, err
		}
		for typ, h := range handlers {
			w.Handle(typ, h)
		}
		r.wg.Add(1)
		go func() { defer r.wg.Done(); r.errs <- w.Run(runCtx) }()
	}
	if err := waitConsumers(ctx, cfg.AMQPURL, names, cfg.Workers); err != nil {
		_ = r.close()
		return nil, err
	}
	return r, nil
}

// close stops the workers, then the server (before the store goes), and
// returns the first error any of them stopped with.
func (r *rig) close() error {
	r.stop()
	r.wg.Wait()
	err := r.srv.Stop()
	close(r.errs)
	for e := range r.errs {
		if e != nil && err == nil {
			err = e
		}
	}
	return err
}
