// Command chaos is warren's chaos suite (`make chaos`): it builds the
// warren binary, and for each scenario runs a real server and three
// workers on a fresh prefix and store, submits a job of N flaky tasks
// reduced by "sum", injects a fault while the job runs (killed workers,
// a killed server, broker-side connection closes, a RabbitMQ restart, a
// memory alarm, a PostgreSQL restart, two servers with one killed), waits
// for the job to close and checks that nothing was lost or counted twice
// and that the result equals the fault-free one. The small-jobs scenarios
// instead run many small jobs at once, from 8 clients that each submit a
// job of 10 flaky tasks over the HTTP API and watch it to its close, while
// the fault runs, and check every job (smalljobs.go). It prints a table
// and exits non-zero on any loss, difference or timeout.
//
// Environment: CHAOS_N (tasks per job, default 10000), CHAOS_SMALL_JOBS
// (jobs of a small-jobs scenario, default 360), CHAOS_ONLY
// (comma-separated scenario names), CHAOS_TIMEOUT (per job, default 4m),
// CHAOS_KEEP (keep the logs), CHAOS_WARREN_ENV (NAME=VALUE words added to
// every warren process's environment), WARREN_AMQP_URL, TEST_DATABASE_URL; for
// -cluster also CHAOS_DLX_WATCHDOG=0 (no dead-letter worker watchdog),
// CHAOS_RABBIT_CONF (lines added to the nodes' rabbitmq.conf, "\n" for a
// new line) and CHAOS_RABBIT_ADVANCED (the nodes' advanced.config).
//
// With -cluster it runs the cluster scenarios instead (cluster.go): it
// starts three RabbitMQ nodes of its own on this host (r1, r2 and
// r3@localhost, AMQP ports 5681-5683), clusters them, kills nodes mid-job
// and stops them at the end; it never touches the main RabbitMQ node,
// nor restarts PostgreSQL.
package main

import (
	"crypto/rand"
	"encoding/hex"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"text/tabwriter"
	"time"
)

var retryTiers = []time.Duration{100 * time.Millisecond, 200 * time.Millisecond}

func logf(format string, args ...any) {
	fmt.Fprintf(os.Stderr, "chaos %s  "+format+"\n", append([]any{time.Now().Format("15:04:05.000")}, args...)...)
}

// live holds every process started, so a signal can end them.
var (
	liveMu sync.Mutex
	live   = map[*proc]bool{}
)

func track(p *proc) {
	liveMu.Lock()
	live[p] = true
	liveMu.Unlock()
}

func killAll() {
	liveMu.Lock()
	defer liveMu.Unlock()
	for p := range live {
		p.kill9()
	}
}

func main() {
	os.Exit(mainCode())
}

func mainCode() (code int) {
	clusterMode := flag.Bool("cluster", false, "run the cluster scenarios, on three RabbitMQ nodes of their own (r1-r3@localhost, ports 5681-5683), instead of the main suite")
	flag.Parse()
	if *clusterMode {
		return clusterMain()
	}
	sigs := make(chan os.Signal, 1)
	signal.Notify(sigs, syscall.SIGINT, syscall.SIGTERM)
	go func() {
		s := <-sigs
		logf("%v: cleaning up", s)
		killAll()
		runCleanups()
		_ = ensureBroker()
		_ = ensurePostgres()
		runScenarioCleanup()
		if d := getBinDir(); d != "" {
			_ = os.RemoveAll(d)
		}
		os.Exit(130)
	}()
	defer func() {
		if r := recover(); r != nil {
			logf("panic: %v", r)
			killAll()
			code = 2
		}
		runCleanups()
		runScenarioCleanup()
	}()

	n, timeout, only, err := settings(10000)
	if err != nil {
		logf("%v", err)
		return 2
	}
	if smallJobCount, err = smallJobsSetting(); err != nil {
		logf("%v", err)
		return 2
	}

	if err := ensureBroker(); err != nil {
		logf("RabbitMQ: %v", err)
		return 2
	}
	if err := ensurePostgres(); err != nil {
		logf("PostgreSQL: %v", err)
		return 2
	}

	if len(only) == 0 || only["memory-alarm"] {
		origWatermark = currentWatermark()
	}

	bin, err := buildWarren()
	if err != nil {
		logf("%v", err)
		return 2
	}
	defer os.RemoveAll(getBinDir())

	results, baseline := runAll(bin, mainTarget(), scenarios(), only, n, timeout, "baseline", "")
	if !report("warren chaos suite", results, n, baseline) {
		fmt.Println("\nchaos: FAILED")
		return 1
	}
	fmt.Println("\nchaos: all scenarios passed")
	return 0
}

// runAll runs the scenarios only names (all when empty) against tg, in
// order, logging each one's start (with what, if not empty) and verdict,
// and returns their outcomes and the result of the scenario named
// baselineName, when it passed.
func runAll(bin string, tg *target, all []scenario, only map[string]bool, n int, timeout time.Duration,
	baselineName, what string) (results []*outcome, baseline string) {
	for _, sc := range all {
		if (len(only) > 0 || sc.optIn) && !only[sc.name] {
			continue
		}
		if sc.job == jobSmall {
			logf("=== scenario %s (%s store, %d jobs of %d tasks from %d clients%s)", sc.name, sc.store, smallJobCount, smallJobTasks, smallClients, what)
		} else {
			logf("=== scenario %s (%s store, N=%d%s)", sc.name, sc.store, n, what)
		}
		o := runScenario(bin, tg, sc, n, timeout)
		if sc.name == baselineName && o.ok() {
			baseline = o.result
		}
		results = append(results, o)
		logVerdict(sc.name, o)
	}
	return results, baseline
}

// settings reads CHAOS_N (defaultN when unset), CHAOS_TIMEOUT and
// CHAOS_ONLY.
func settings(defaultN int) (n int, timeout time.Duration, only map[string]bool, err error) {
	n = defaultN
	if s := os.Getenv("CHAOS_N"); s != "" {
		v, err := strconv.Atoi(s)
		if err != nil || v < 1 {
			return 0, 0, nil, fmt.Errorf("CHAOS_N must be a positive integer; got %q", s)
		}
		n = v
	}
	timeout = 4 * time.Minute
	if s := os.Getenv("CHAOS_TIMEOUT"); s != "" {
		d, err := time.ParseDuration(s)
		if err != nil {
			return 0, 0, nil, fmt.Errorf("CHAOS_TIMEOUT: %v", err)
		}
		timeout = d
	}
	only = map[string]bool{}
	for _, s := range strings.Split(os.Getenv("CHAOS_ONLY"), ",") {
		if s = strings.TrimSpace(s); s != "" {
			only[s] = true
		}
	}
	return n, timeout, only, nil
}

// buildWarren builds the warren binary into a temporary directory
// (getBinDir, to remove at the end) and returns its path.
func buildWarren() (string, error) {
	dir, err := os.MkdirTemp("", "warren-chaos-bin-")
	if err != nil {
		return "", err
	}
	setBinDir(dir)
	bin := filepath.Join(dir, "warren")
	logf("building %s", bin)
	if out, err := exec.Command("go", "build", "-o", bin, "./cmd/warren").CombinedOutput(); err != nil {
		_ = os.RemoveAll(dir)
		return "", fmt.Errorf("go build: %v\n%s", err, out)
	}
	return bin, nil
}

func logVerdict(name string, o *outcome) {
	if !o.ok() {
		logf("--- scenario %s FAILED: %s", name, strings.Join(o.problems, "; "))
	} else {
		logf("--- scenario %s ok in %s", name, o.duration.Round(100*time.Millisecond))
	}
}

// report prints the table of results under title; it returns false when
// a scenario failed or its result differs from the expected sum (and
// from baseline, the fault-free run's, if one ran).
func report(title string, results []*outcome, n int, baseline string) bool {
	failed := false
	for _, o := range results {
		if !o.ok() {
			failed = true
		}
	}
	expected := strconv.Itoa(n * (n + 1) / 2)
	if baseline == "" {
		baseline = expected
	}
	fmt.Printf("\n%s: %d tasks per job, retry tiers 100ms,200ms, expected sum %s (baseline run: %s)\n\n", title, n, expected, baseline)
	tw := tabwriter.NewWriter(os.Stdout, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "scenario\tfaults\tduration\ttasks lost\tduplicates absorbed\tresult identical\tverdict")
	for _, o := range results {
		identical := "no"
		switch {
		case o.want != "" && o.result == o.want:
			identical = "yes" // a job of its own kind (a tree): its own result
		case o.want == "" && o.result != "" && o.result == baseline && o.result == expected:
			identical = "yes"
		case o.want != "" && o.ok():
			o.problems = append(o.problems, fmt.Sprintf("result %s differs from %s", o.result, o.want))
			failed = true
		case o.ok():
			o.problems = append(o.problems, fmt.Sprintf("result %s differs from %s", o.result, baseline))
			failed = true
		}
		lost := "?"
		if o.lost >= 0 {
			lost = strconv.Itoa(o.lost)
		}
		dups := strconv.FormatFloat(o.duplicates, 'f', 0, 64)
		if o.dupNote != "" {
			dups += " " + o.dupNote
		}
		verdict := "ok"
		if !o.ok() {
			verdict = "FAIL: " + strings.Join(o.problems, "; ")
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\n", o.name, o.faults, o.duration.Round(100*time.Millisecond), lost, dups, identical, verdict)
	}
	tw.Flush()
	return !failed
}

// binDir is the built binary's directory, removed on a signal too.
var binDir struct {
	sync.Mutex
	path string
}

func setBinDir(d string) {
	binDir.Lock()
	defer binDir.Unlock()
	binDir.path = d
}

func getBinDir() string {
	binDir.Lock()
	defer binDir.Unlock()
	return binDir.path
}

func randHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}
