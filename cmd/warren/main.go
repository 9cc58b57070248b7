// Command warren runs warren's processes: the server (outbox relay and
// aggregator), workers with the built-in handlers, and store migrations.
//
// Usage:
//
//	warren <command> [flags]
//
// Run "warren help" for the commands and "warren <command> --help" for
// their flags. Every flag has an environment fallback (WARREN_AMQP_URL,
// WARREN_DATABASE_URL, WARREN_PREFIX).
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"runtime/debug"
	"sync"
	"syscall"
)

// command is one subcommand.
type command struct {
	name, summary string
	run           func(ctx context.Context, args []string, env *environment) error
}

var commands = []command{
	{"server", "run the HTTP API, the outbox relay, the aggregator and the reconciler", runServer},
	{"worker", "run workers with the built-in handlers (echo, wordcount, sleep, flaky)", runWorker},
	{"demo", "run a word-count job end to end in one process (embedded store, local RabbitMQ)", runDemo},
	{"bench", "measure the broker's per-message ceiling and warren end to end in one process (local RabbitMQ)", runBench},
	{"submit", "submit a JSON or NDJSON job spec; prints the job id", runSubmit},
	{"status", "show a job's status", runStatus},
	{"watch", "show a job's progress until it closes", runWatch},
	{"redrive", "requeue the failed tasks of a job and reopen it", runRedrive},
	{"delete", "delete a closed job with its tasks, results and idempotency key", runDelete},
	{"dlq", "list, replay or purge dead letters", runDLQ},
	{"migrate", "apply the job store's schema migrations and exit", runMigrate},
}

// environment is what a command may touch, so tests can run commands in
// process.
type environment struct {
	stdout, stderr io.Writer
	getenv         func(string) string
	// logger is the command's logger; the command's goroutine reads it,
	// and sets it with setLogger (its flags choose it).
	logger *slog.Logger
	// mu guards logger against other goroutines, which read it with log.
	mu sync.Mutex
}

// setLogger sets the command's logger.
func (e *environment) setLogger(l *slog.Logger) {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.logger = l
}

// log returns the command's logger, for goroutines other than the
// command's.
func (e *environment) log() *slog.Logger {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.logger
}

// errUsage marks an error whose message the flag package already printed.
var errUsage = errors.New("usage")

// defaultGCPercent is the garbage collector's target the warren command
// runs with unless GOGC says otherwise: its live heap is a few MB, so Go's
// default of 100 collects very often. 400 costs about 15 MB of RSS and
// saves about 8% of CPU per task (docs/performance.md).
const defaultGCPercent = 400

func main() {
	if os.Getenv("GOGC") == "" {
		debug.SetGCPercent(defaultGCPercent)
	}
	env := &environment{stdout: os.Stdout, stderr: os.Stderr, getenv: os.Getenv,
		logger: slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelInfo}))}
	ctx, cancel := context.WithCancel(context.Background())
	sigs := make(chan os.Signal, 2)
	signal.Notify(sigs, os.Interrupt, syscall.SIGTERM)
	go func() {
		<-sigs
		env.log().Info("shutting down: finishing in-flight work; a second signal exits at once")
		cancel()
		<-sigs
		// Nothing is lost: whatever was not acknowledged goes back to its
		// queue when the connections drop, and the store commits or not.
		fmt.Fprintln(os.Stderr, "warren: second signal: exiting now; unacknowledged messages return to their queues")
		os.Exit(130)
	}()
	code := run(ctx, os.Args[1:], env)
	cancel()
	os.Exit(code)
}

// run executes one command line and returns the process exit code.
func run(ctx context.Context, args []string, env *environment) int {
	if len(args) == 0 || args[0] == "help" || args[0] == "-h" || args[0] == "--help" {
		usage(env.stdout)
		if len(args) == 0 {
			return 2
		}
		return 0
	}
	for _, c := range commands {
		if c.name != args[0] {
			continue
		}
		err := c.run(ctx, args[1:], env)
		switch {
		case err == nil:
			return 0
		case errors.Is(err, flag.ErrHelp):
			return 0
		case errors.Is(err, errUsage):
			return 2
		default:
			fmt.Fprintf(env.stderr, "warren %s: %v\n", c.name, err)
			return 1
		}
	}
	fmt.Fprintf(env.stderr, "warren: unknown command %q (run \"warren help\")\n", args[0])
	return 2
}

func usage(w io.Writer) {
	fmt.Fprintln(w, "warren splits jobs into tasks, runs them on workers through RabbitMQ and closes each job exactly once.")
	fmt.Fprintln(w, "\nUsage: warren <command> [flags]\n\nCommands:")
	for _, c := range commands {
		fmt.Fprintf(w, "  %-8s %s\n", c.name, c.summary)
	}
	fmt.Fprintln(w, "\nRun \"warren <command> --help\" for its flags.")
}
