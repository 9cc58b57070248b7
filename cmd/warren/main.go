// Command warren runs warren's processes: the server (outbox relay and
// aggregator), workers with the built-in handlers, and store migrations.
//
// Usage:
//
//	warren [flags] <command> [flags]
//
// Run "warren help" for the commands and "warren help <command>" for
// their flags. Every setting is a flag, an environment variable
// (WARREN_AMQP_URL, WARREN_DATABASE_URL, WARREN_SERVER, ...) and a line
// of an optional config file (--config, WARREN_CONFIG), in that order of
// precedence. Exit statuses: 0 success (a watched job completed), 1 a
// watched job failed or was cancelled, 2 a usage error, 3 any other
// error (such as a server that cannot be reached).
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
	"slices"
	"strings"
	"sync"
	"syscall"
	"time"
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
	{"submit", "submit a JSON or NDJSON job spec from a file or standard input; prints the job id", runSubmit},
	{"list", "list jobs, newest first, by state, type, queue, time or search text", runList},
	{"status", "show a job's status", runStatus},
	{"tasks", "list a job's tasks", runTasks},
	{"task", "show one task whole: payload, result, every attempt with its error and traceback, dead letter", runTask},
	{"watch", "show a job's progress until it closes; exit 0 if it completed, 1 if not", runWatch},
	{"result", "print a completed job's result", runResult},
	{"cancel", "cancel an open job", runCancel},
	{"redrive", "requeue the failed tasks of a job and reopen it", runRedrive},
	{"pause", "pause a job (or a work queue, --queue): no new task of it starts until resume", runPause},
	{"resume", "resume a paused job (or work queue, --queue)", runResume},
	{"delete", "delete a closed job with its tasks, results and idempotency key", runDelete},
	{"dlq", "list, replay or purge dead letters", runDLQ},
	{"migrate", "apply the job store's schema migrations and exit", runMigrate},
	{"topology", "delete every queue and exchange of one installation (topology delete --prefix P)", runTopology},
	{"version", "print the version, the commit and the Go version", runVersion},
}

func init() {
	// completion reads the other commands' flags: added here, not in the
	// literal, so that commands does not refer to itself.
	commands = append(commands, command{"completion", "print a bash or zsh completion script", runCompletion})
}

// Exit statuses, documented in the README.
const (
	exitOK        = 0 // the command succeeded (a watched job completed)
	exitJobFailed = 1 // a watched job failed or was cancelled
	exitUsage     = 2 // a bad command line, variable or config file
	exitError     = 3 // anything else: a server that cannot be reached, an API error, ...
	// exitInterrupted is a client command stopped by SIGINT or SIGTERM:
	// 128 + SIGINT, what shells report for a command stopped by Ctrl-C.
	exitInterrupted = 130
	// exitTerminated is a client command stopped by SIGTERM: 128 + 15.
	exitTerminated = 143
)

// longRunning are the commands that finish in-flight work when signalled
// (and log that they do); every other command exits at once, quietly.
var longRunning = map[string]bool{"server": true, "worker": true, "demo": true, "bench": true}

// environment is what a command may touch, so tests can run commands in
// process.
type environment struct {
	stdin          io.Reader
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
	env := &environment{stdin: os.Stdin, stdout: os.Stdout, stderr: os.Stderr, getenv: os.Getenv,
		logger: slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelInfo}))}
	ctx, cancel := context.WithCancel(context.Background())
	sigs := make(chan os.Signal, 4)
	signal.Notify(sigs, os.Interrupt, syscall.SIGTERM)
	args := hoistGlobalFlags(os.Args[1:])
	go func() {
		sig := <-sigs
		if len(args) > 0 && !longRunning[args[0]] {
			// A client command holds nothing that needs finishing: a
			// request cut short is the server's to complete or drop
			// whole. Exit as a shell expects of Ctrl-C, without a word.
			if sig == syscall.SIGTERM {
				os.Exit(exitTerminated)
			}
			os.Exit(exitInterrupted)
		}
		first := time.Now()
		env.log().Info("shutting down: finishing in-flight work; another signal, a second or more later, exits at once")
		cancel()
		for range sigs {
			if !isExitSignal(first, time.Now()) {
				// Supervisors such as timeout signal the process and its
				// group at once: that is one request to stop, not two.
				continue
			}
			// Nothing is lost: whatever was not acknowledged goes back
			// to its queue when the connections drop, and the store
			// commits or not.
			fmt.Fprintln(os.Stderr, "warren: second signal: exiting now; unacknowledged messages return to their queues")
			os.Exit(exitInterrupted)
		}
	}()
	code := run(ctx, args, env)
	cancel()
	os.Exit(code)
}

// signalGrace is how long after the first signal further signals are
// taken for copies of it.
const signalGrace = time.Second

// isExitSignal reports whether a signal at now, after a first one at
// first, asks to exit at once.
func isExitSignal(first, now time.Time) bool { return now.Sub(first) >= signalGrace }

// run executes one command line and returns the process exit code.
func run(ctx context.Context, args []string, env *environment) int {
	if env.stdin == nil {
		env.stdin = strings.NewReader("")
	}
	args = hoistGlobalFlags(args)
	if len(args) == 0 {
		usage(env.stderr)
		return exitUsage
	}
	if strings.HasPrefix(args[0], "-") && !helpOrVersion[args[0]] {
		fmt.Fprintf(env.stderr, "warren: flags but no command (usage: warren [flags] <command> [arguments] [flags]; run \"warren help\")\n")
		return exitUsage
	}
	switch args[0] {
	case "-h", "--help", "-help":
		usage(env.stdout)
		return exitOK
	case "--version", "-version":
		args = append([]string{"version"}, args[1:]...)
	case "help":
		if len(args) == 1 {
			usage(env.stdout)
			return exitOK
		}
		if len(args) > 2 {
			fmt.Fprintln(env.stderr, "warren help: want one command (usage: warren help COMMAND)")
			return exitUsage
		}
		args = []string{args[1], "--help"}
	}
	for _, c := range commands {
		if c.name != args[0] {
			continue
		}
		return exitCode(c.name, c.run(ctx, args[1:], env), env)
	}
	if near := nearestCommand(args[0]); near != "" {
		fmt.Fprintf(env.stderr, "warren: unknown command %q: did you mean %q? (run \"warren help\")\n", args[0], near)
		return exitUsage
	}
	fmt.Fprintf(env.stderr, "warren: unknown command %q (run \"warren help\")\n", args[0])
	return exitUsage
}

// helpOrVersion are the flags that stand for a command of their own.
var helpOrVersion = map[string]bool{"-h": true, "--help": true, "-help": true, "--version": true, "-version": true}

// boolFlags are the value-less flags a command line may give before its
// command; any other flag there takes the next word as its value, unless
// that word is a command's name.
var boolFlags = map[string]bool{"json": true, "q": true, "quiet": true}

// hoistGlobalFlags moves the flags given before the command to the end of
// its arguments, where every command reads them: "warren --server URL
// watch ID" is "warren watch ID --server URL". The end, not right after
// the command, because dlq reads its subcommand first.
func hoistGlobalFlags(args []string) []string {
	var flags []string
	i := 0
	for i < len(args) && strings.HasPrefix(args[i], "-") && args[i] != "-" && args[i] != "--" && !helpOrVersion[args[i]] {
		name, _, hasValue := strings.Cut(strings.TrimLeft(args[i], "-"), "=")
		flags = append(flags, args[i])
		i++
		if hasValue || boolFlags[name] || i == len(args) || isCommand(args[i]) {
			continue
		}
		flags = append(flags, args[i])
		i++
	}
	if len(flags) == 0 {
		return args
	}
	if i == len(args) {
		return flags // no command: run says so
	}
	rest := args[i:]
	out := make([]string, 0, len(args))
	if end := slices.Index(rest, "--"); end >= 0 {
		// After "--" every word is positional: the flags go before it.
		out = append(append(append(out, rest[:end]...), flags...), rest[end:]...)
		return out
	}
	return append(append(out, rest...), flags...)
}

// isCommand reports whether name is a command's (help included).
func isCommand(name string) bool { return slices.Contains(commandNames(), name) }

// nearestCommand returns the command whose name is closest to name, if
// it is close enough to be a typo of it (at most a third of its letters
// off, and at least one), else "".
func nearestCommand(name string) string {
	best, bestDist := "", 0
	for _, c := range commandNames() {
		d := editDistance(name, c)
		if d <= max(1, len(c)/3) && (best == "" || d < bestDist) {
			best, bestDist = c, d
		}
	}
	return best
}

// editDistance is the Damerau-Levenshtein distance (with adjacent
// transpositions, the commonest typo) between a and b, in bytes.
func editDistance(a, b string) int {
	prev2 := make([]int, len(b)+1)
	prev := make([]int, len(b)+1)
	cur := make([]int, len(b)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(a); i++ {
		cur[0] = i
		for j := 1; j <= len(b); j++ {
			cost := 1
			if a[i-1] == b[j-1] {
				cost = 0
			}
			cur[j] = min(prev[j]+1, cur[j-1]+1, prev[j-1]+cost)
			if i > 1 && j > 1 && a[i-1] == b[j-2] && a[i-2] == b[j-1] {
				cur[j] = min(cur[j], prev2[j-2]+1)
			}
		}
		prev2, prev, cur = prev, cur, prev2
	}
	return prev[len(b)]
}

// exitCode reports err of command name, unless it was reported already,
// and returns the exit status it means.
func exitCode(name string, err error, env *environment) int {
	var usage *usageError
	var failed *jobFailed
	switch {
	case err == nil, errors.Is(err, flag.ErrHelp):
		return exitOK
	case errors.Is(err, errUsage):
		return exitUsage
	case errors.As(err, &usage):
		fmt.Fprintf(env.stderr, "warren %s: %v\n", name, err)
		return exitUsage
	case errors.As(err, &failed):
		fmt.Fprintf(env.stderr, "warren %s: %v\n", name, err)
		return exitJobFailed
	default:
		fmt.Fprintf(env.stderr, "warren %s: %v\n", name, err)
		return exitError
	}
}

func usage(w io.Writer) {
	fmt.Fprintln(w, "warren splits jobs into tasks, runs them on workers through RabbitMQ and closes each job exactly once.")
	fmt.Fprintln(w, "\nUsage: warren <command> [arguments] [flags]   (flags may come before the command too)\n\nCommands:")
	for _, c := range commands {
		fmt.Fprintf(w, "  %-10s %s\n", c.name, c.summary)
	}
	fmt.Fprintln(w, "\nRun \"warren help <command>\" (or \"warren <command> --help\") for its arguments and flags.")
	fmt.Fprintln(w, "Exit status: 0 success (a watched job completed), 1 a watched job failed or was cancelled,")
	fmt.Fprintln(w, "2 a usage error, 3 any other error (such as a server that cannot be reached).")
}
