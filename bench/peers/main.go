// Command peers runs the same no-op fan-out/fan-in job as `warren bench` on
// two peer systems, River (PostgreSQL) and asynq (Redis), so their
// throughput can be compared with warren's on the same machine.
//
//	peers river [--tuned] [--tasks N] [--workers W] [--concurrency C] [--json]
//	peers asynq [--tuned] [--tasks N] [--workers W] [--concurrency C] [--json]
//	peers river-small [--tuned] [--clients C] [--jobs J] [--job-tasks T] [--workers W] [--concurrency N] [--json]
//
// N tasks with payload {"i":n} are submitted as fast as the library allows,
// W worker clients (each with concurrency C) run a handler that returns the
// payload unchanged, and the run ends when all N tasks are completed. It is a
// separate Go module so that the warren module does not depend on either
// library. river-small is the many-small-jobs benchmark of `warren bench
// --small-jobs` on River: jobs of T tasks fanned in by a callback job. See
// README.md.
package main

import (
	"bufio"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"math"
	"os"
	"os/signal"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// report is what `peers SYSTEM --json` prints: one JSON object.
type report struct {
	System      string  `json:"system"`
	Config      string  `json:"config"`
	Tasks       int     `json:"tasks"`
	Workers     int     `json:"workers"`
	Concurrency int     `json:"concurrency"`
	SubmitS     float64 `json:"submit_s"`
	TotalS      float64 `json:"total_s"`
	TasksPerS   float64 `json:"tasks_per_s"`
	PeakRSSMB   float64 `json:"peak_rss_mb"`
}

// common are the flags both subcommands share.
type common struct {
	tasks       int
	workers     int
	concurrency int
	json        bool
	timeout     time.Duration
}

func (c *common) register(fs *flag.FlagSet) {
	fs.IntVar(&c.tasks, "tasks", 20000, "number of no-op tasks")
	fs.IntVar(&c.workers, "workers", 4, "number of worker clients/servers, each with its own concurrency")
	fs.IntVar(&c.concurrency, "concurrency", 16, "handler concurrency of each worker")
	fs.BoolVar(&c.json, "json", false, "print one JSON object on stdout (progress goes to stderr)")
	fs.DurationVar(&c.timeout, "timeout", 10*time.Minute, "give up if the run has not finished after this long")
}

func (c *common) validate() error {
	switch {
	case c.tasks < 1:
		return fmt.Errorf("--tasks must be >= 1, got %d", c.tasks)
	case c.workers < 1:
		return fmt.Errorf("--workers must be >= 1, got %d", c.workers)
	case c.concurrency < 1:
		return fmt.Errorf("--concurrency must be >= 1, got %d", c.concurrency)
	case c.timeout <= 0:
		return fmt.Errorf("--timeout must be > 0, got %s", c.timeout)
	}
	return nil
}

// errInterrupted is returned when the run was stopped by SIGINT or SIGTERM.
var errInterrupted = errors.New("interrupted")

// errUsage marks a command-line error; the flag set has already been told.
type errUsage struct{ err error }

func (e errUsage) Error() string { return e.err.Error() }

const usage = `usage: peers river|asynq|river-small [flags]

river, asynq: runs N no-op tasks ({"i":n} in, the same out) through River
(PostgreSQL) or asynq (Redis) and reports the time to submit them and the
time until all are completed.

river-small: many small jobs on River: C clients each submit a job of T
no-op tasks with a fan-in callback and wait for the callback to complete;
reports jobs/s, tasks/s and submit-to-callback latency percentiles.

"peers SUBCOMMAND -h" lists a subcommand's flags.
`

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	err := run(ctx, os.Args[1:], os.Stdout, os.Stderr)
	interrupted := ctx.Err() != nil
	stop()
	switch {
	case err == nil:
	case errors.Is(err, flag.ErrHelp):
	case interrupted:
		fmt.Fprintln(os.Stderr, "peers: interrupted")
		os.Exit(130)
	default:
		fmt.Fprintln(os.Stderr, "peers: "+oneLine(err.Error()))
		var u errUsage
		if errors.As(err, &u) {
			os.Exit(2)
		}
		os.Exit(1)
	}
}

func run(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	if len(args) == 0 {
		fmt.Fprint(stderr, usage)
		return errUsage{errors.New("missing subcommand: river, asynq or river-small")}
	}
	switch args[0] {
	case "river":
		return runRiver(ctx, args[1:], stdout, stderr)
	case "river-small":
		return runRiverSmall(ctx, args[1:], stdout, stderr)
	case "asynq":
		return runAsynq(ctx, args[1:], stdout, stderr)
	case "-h", "-help", "--help", "help":
		fmt.Fprint(stdout, usage)
		return nil
	default:
		return errUsage{fmt.Errorf("unknown subcommand %q: want river, asynq or river-small", args[0])}
	}
}

// flags is a flag set that reports errors as values (so that main prints
// them on one line) and prints its help on stdout only for -h.
type flags struct {
	*flag.FlagSet
	help func()
}

func newFlagSet(name, about string, stdout io.Writer) flags {
	fs := flag.NewFlagSet("peers "+name, flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	fs.Usage = func() {} // parse prints the help itself, and only for -h
	return flags{fs, func() {
		fmt.Fprintf(stdout, "usage: peers %s [flags]\n\n%s\n\nflags:\n", name, about)
		fs.SetOutput(stdout)
		fs.PrintDefaults()
		fs.SetOutput(io.Discard)
	}}
}

func parse(fs flags, args []string) error {
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			fs.help()
			return err
		}
		return errUsage{err}
	}
	if fs.NArg() > 0 {
		return errUsage{fmt.Errorf("unexpected argument %q", fs.Arg(0))}
	}
	return nil
}

// flagSet reports whether the named flag was given on the command line.
func flagSet(fs flags, name string) bool {
	found := false
	fs.Visit(func(f *flag.Flag) {
		if f.Name == name {
			found = true
		}
	})
	return found
}

// configLabel names the configuration in the report: base ("defaults" or
// "tuned"), then name=value for every flag given that changes what is
// measured, in name order (the ones listed in ignore do not, or are reported
// on their own).
func configLabel(fs flags, base string, ignore ...string) string {
	parts := []string{base}
	fs.Visit(func(fl *flag.Flag) {
		if !slices.Contains(ignore, fl.Name) {
			parts = append(parts, fl.Name+"="+fl.Value.String())
		}
	})
	return strings.Join(parts, ",")
}

// reportedFlags are the flags that do not go into configLabel.
var reportedFlags = []string{"tasks", "workers", "concurrency", "json", "timeout", "tuned", "verbose", "database", "redis", "redis-db"}

// progress writes "peers SYSTEM: ..." lines to stderr.
type progress struct {
	w      io.Writer
	system string
}

func (p progress) printf(format string, a ...any) {
	fmt.Fprintf(p.w, "peers %s: "+format+"\n", append([]any{p.system}, a...)...)
}

// finish fills in the derived numbers and prints the report.
func finish(rep report, submit, total time.Duration, asJSON bool, stdout io.Writer) error {
	rep.SubmitS = round(submit.Seconds(), 3)
	rep.TotalS = round(total.Seconds(), 3)
	if total > 0 {
		rep.TasksPerS = round(float64(rep.Tasks)/total.Seconds(), 1)
	}
	rep.PeakRSSMB = round(peakRSSMB(), 1)
	if asJSON {
		enc := json.NewEncoder(stdout)
		return enc.Encode(rep)
	}
	_, err := fmt.Fprintf(stdout, "%s (%s): %d tasks, %d workers x concurrency %d\n"+
		"  submit   %.3f s\n  total    %.3f s\n  rate     %.1f tasks/s\n  peak RSS %.1f MB\n",
		rep.System, rep.Config, rep.Tasks, rep.Workers, rep.Concurrency,
		rep.SubmitS, rep.TotalS, rep.TasksPerS, rep.PeakRSSMB)
	return err
}

func round(v float64, places int) float64 {
	p := math.Pow(10, float64(places))
	return math.Round(v*p) / p
}

// peakRSSMB is the process's peak resident set size (VmHWM) in MB (KiB/1024,
// as `warren bench` reports it), or 0 where /proc is not available.
func peakRSSMB() float64 {
	fh, err := os.Open("/proc/self/status")
	if err != nil {
		return 0
	}
	defer fh.Close()
	sc := bufio.NewScanner(fh)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), "VmHWM:"); ok {
			kb, err := strconv.ParseFloat(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(v), "kB")), 64)
			if err != nil {
				return 0
			}
			return kb / 1024
		}
	}
	return 0
}

// randomTag is a short random hex string naming this run's schema or queue.
func randomTag() string {
	var b [4]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

// payload is the task's tiny JSON body, {"i":n}.
func payload(n int) []byte {
	b := make([]byte, 0, 16)
	b = append(b, `{"i":`...)
	b = strconv.AppendInt(b, int64(n), 10)
	return append(b, '}')
}

// jsonEqual reports whether a and b are the same JSON value.
func jsonEqual(a, b []byte) bool {
	var va, vb any
	if json.Unmarshal(a, &va) != nil || json.Unmarshal(b, &vb) != nil {
		return false
	}
	return reflect.DeepEqual(va, vb)
}

func oneLine(s string) string {
	return strings.Join(strings.Fields(s), " ")
}

// ctxErr turns a cancelled run context into errInterrupted (when the parent
// was cancelled by a signal) or a timeout error.
func ctxErr(parent, run context.Context, timeout time.Duration) error {
	if parent.Err() != nil {
		return errInterrupted
	}
	if run.Err() != nil {
		return fmt.Errorf("not finished after --timeout %s", timeout)
	}
	return nil
}
