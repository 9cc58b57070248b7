// Command scale runs one large warren job the way a user runs warren:
// separate `warren server` and `warren worker` processes on the local
// RabbitMQ, the job submitted as NDJSON with `warren submit`, and its
// status polled over the HTTP API until it closes. It reports the submit
// time, the job's throughput, and every process's peak RSS and CPU time.
//
//	go run ./bench/scale --tasks 1000000
//	go run ./bench/scale --tasks 20000 --batch-size 32 --json
//
// Everything it creates (a temporary directory with the warren binary, the
// SQLite store, the job spec and the processes' logs; exchanges and queues
// under a random prefix; a PostgreSQL schema with --database postgres://)
// is removed when it ends, also on error and on Ctrl-C. See README.md.
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/warrenhq/warren"
	"github.com/warrenhq/warren/internal/broker"
)

// config is the command line.
type config struct {
	tasks       int
	servers     int
	batchSize   int
	workers     int
	concurrency int
	database    string
	warren      string
	amqpURL     string
	json        bool
	keep        bool
	timeout     time.Duration
}

// main parses the flags, runs the scale run and prints its report; the
// exit code is 0 for a completed run, 1 for a failed one and 2 for bad
// flags.
func main() {
	cfg, err := parseFlags(os.Args[1:], os.Stderr)
	if err != nil {
		if errors.Is(err, flag.ErrHelp) {
			os.Exit(0)
		}
		os.Exit(2)
	}
	ctx := interruptible(os.Stderr)
	rep, err := execute(ctx, cfg, os.Stderr)
	if err != nil {
		fmt.Fprintf(os.Stderr, "scale: FAILED: %v\n", err)
		os.Exit(1)
	}
	if err := printReport(os.Stdout, rep, cfg.json); err != nil {
		fmt.Fprintf(os.Stderr, "scale: %v\n", err)
		os.Exit(1)
	}
}

// parseFlags parses and checks the command line; usage errors are printed
// to stderr.
func parseFlags(args []string, stderr io.Writer) (config, error) {
	var c config
	fs := flag.NewFlagSet("scale", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() {
		fmt.Fprint(fs.Output(), "Usage: go run ./bench/scale [flags]\n\n"+
			"Run one echo job of --tasks tasks through separate warren server and worker processes, submitted\n"+
			"as NDJSON with `warren submit`, and report the submit time, tasks/s (job created_at to finished_at),\n"+
			"and each process's peak RSS (VmHWM) and CPU time. Everything created is removed afterwards.\n\nFlags:\n")
		fs.PrintDefaults()
	}
	amqpDefault := os.Getenv("WARREN_AMQP_URL")
	if amqpDefault == "" {
		amqpDefault = broker.DefaultURL
	}
	fs.IntVar(&c.tasks, "tasks", 1_000_000, "tasks in the job")
	fs.IntVar(&c.batchSize, "batch-size", 0, fmt.Sprintf("the job's batch_size: tasks per task message (1 to %d); 0 submits none, leaving it to warren", warren.MaxBatchSize))
	fs.IntVar(&c.workers, "workers", 2, "`warren worker` processes")
	fs.IntVar(&c.servers, "servers", 1, "`warren server` processes, on one store (more than one needs a postgres:// --database); the job is submitted to the first")
	fs.IntVar(&c.concurrency, "concurrency", 16, "--concurrency of each worker")
	fs.StringVar(&c.database, "database", "", "job store: sqlite://PATH is used as is; postgres://... gets a fresh schema, dropped afterwards\n(default: a SQLite file in the temporary directory)")
	fs.StringVar(&c.warren, "warren", "", "the warren binary to run (default: build ./cmd/warren of this module into the temporary directory)")
	fs.StringVar(&c.amqpURL, "amqp-url", amqpDefault, "RabbitMQ URL, or the URLs of the nodes of one cluster separated by commas (env WARREN_AMQP_URL)")
	fs.BoolVar(&c.json, "json", false, "print one JSON object on stdout instead of the table (progress still goes to stderr)")
	fs.BoolVar(&c.keep, "keep", false, "keep the temporary directory (logs, store, spec) and a PostgreSQL schema for inspection")
	fs.DurationVar(&c.timeout, "timeout", 30*time.Minute, "give up (and clean up) after this long")
	if err := fs.Parse(args); err != nil {
		return c, err
	}
	var problem string
	switch {
	case fs.NArg() > 0:
		problem = fmt.Sprintf("unexpected argument %q", fs.Arg(0))
	case c.tasks < 1:
		problem = fmt.Sprintf("--tasks must be >= 1, got %d", c.tasks)
	case c.batchSize < 0 || c.batchSize > warren.MaxBatchSize:
		problem = fmt.Sprintf("--batch-size must be between 0 (automatic) and %d, got %d", warren.MaxBatchSize, c.batchSize)
	case c.servers < 1:
		problem = fmt.Sprintf("--servers must be >= 1, got %d", c.servers)
	case c.servers > 1 && !strings.HasPrefix(c.database, "postgres://") && !strings.HasPrefix(c.database, "postgresql://"):
		problem = "--servers above 1 needs a postgres:// --database: a SQLite store has one server"
	case c.workers < 1:
		problem = fmt.Sprintf("--workers must be >= 1, got %d", c.workers)
	case c.concurrency < 1:
		problem = fmt.Sprintf("--concurrency must be >= 1, got %d", c.concurrency)
	case c.timeout <= 0:
		problem = fmt.Sprintf("--timeout must be > 0, got %s", c.timeout)
	}
	if _, err := broker.ParseNodes(c.amqpURL); problem == "" && err != nil {
		problem = fmt.Sprintf("--amqp-url (env WARREN_AMQP_URL): %v", err)
	}
	if problem != "" {
		fmt.Fprintf(stderr, "scale: %s\n", problem)
		return c, errors.New(problem)
	}
	return c, nil
}

// interruptible returns a context cancelled by the first SIGINT or
// SIGTERM, so the run stops and cleans up; a second signal exits at once
// (the children then die with this process, see sysProcAttr, but the
// temporary directory and the exchanges and queues are left behind).
func interruptible(stderr io.Writer) context.Context {
	ctx, cancel := context.WithCancelCause(context.Background())
	sigs := make(chan os.Signal, 2)
	signal.Notify(sigs, os.Interrupt, syscall.SIGTERM)
	go func() {
		s := <-sigs
		fmt.Fprintf(stderr, "scale: %v: stopping and cleaning up (send it again to exit at once)\n", s)
		cancel(fmt.Errorf("interrupted (%v)", s))
		<-sigs
		fmt.Fprintln(stderr, "scale: exiting without cleaning up")
		os.Exit(130)
	}()
	return ctx
}

// printReport writes the report as a table, or as one JSON object.
func printReport(w io.Writer, rep report, asJSON bool) error {
	if !asJSON {
		printTable(w, rep)
		return nil
	}
	out, err := json.Marshal(rep)
	if err != nil {
		return err
	}
	_, err = fmt.Fprintln(w, string(out))
	return err
}
