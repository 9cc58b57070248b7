package main

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/warrenhq/warren/client"
	"github.com/warrenhq/warren/internal/broker"
	"github.com/warrenhq/warren/protocol"
)

// Timings of the run's phases.
const (
	// startTimeout bounds the wait for the server's /readyz and for the
	// workers to consume (PostgreSQL migrations run at server start).
	startTimeout = 60 * time.Second
	// pollEvery is how often the job's status is fetched.
	pollEvery = 200 * time.Millisecond
	// sampleEvery is how often each process's memory is read.
	sampleEvery = 500 * time.Millisecond
	// progressEvery is how often a progress line goes to stderr.
	progressEvery = 5 * time.Second
	// pollGiveUp is how long status requests may fail in a row before the
	// run fails.
	pollGiveUp = 30 * time.Second
	// stopGrace is how long the processes get to exit after SIGTERM
	// before they are killed.
	stopGrace = 30 * time.Second
	// cleanupTimeout bounds deleting the topology and dropping a schema.
	cleanupTimeout = 30 * time.Second
)

// runner is one scale run: its settings and everything it has created,
// which cleanup removes again.
type runner struct {
	cfg      config
	progress io.Writer

	dir        string         // temporary directory
	bin        string         // the warren binary
	names      protocol.Names // the run's exchanges and queues
	dbURL      string         // the store the server uses
	storeKind  string         // "sqlite" or "postgres"
	dropSchema func(context.Context) error
	apiURL     string

	procs    []*proc
	exits    chan *proc // processes that exited before being stopped
	sampler  *sampler
	topology bool // the server may have declared the topology
}

// execute runs the whole scale run and returns its report. Whatever it
// created is removed before it returns, whether it succeeded or not.
func execute(ctx context.Context, cfg config, progress io.Writer) (rep report, err error) {
	ctx, cancel := context.WithTimeoutCause(ctx, cfg.timeout, fmt.Errorf("--timeout %s reached", cfg.timeout))
	defer cancel()
	r := &runner{cfg: cfg, progress: progress, exits: make(chan *proc, cfg.workers+cfg.servers)}
	defer func() { r.cleanup(err) }()

	if r.dir, err = os.MkdirTemp("", "warren-scale-"); err != nil {
		return rep, err
	}
	if err := r.prepare(ctx); err != nil {
		return rep, err
	}
	if err := r.start(ctx); err != nil {
		return rep, err
	}
	return r.measure(ctx)
}

// logf writes one progress line to stderr.
func (r *runner) logf(format string, a ...any) {
	fmt.Fprintf(r.progress, "scale: "+format+"\n", a...)
}

// prepare finds or builds the warren binary and picks the run's prefix,
// store and API address.
func (r *runner) prepare(ctx context.Context) error {
	r.bin = r.cfg.warren
	if r.bin == "" {
		r.bin = filepath.Join(r.dir, "warren")
		r.logf("building ./cmd/warren")
		if err := buildWarren(ctx, r.bin); err != nil {
			return err
		}
	} else if abs, err := filepath.Abs(r.bin); err == nil {
		r.bin = abs
	}

	var tag [4]byte
	if _, err := rand.Read(tag[:]); err != nil {
		return err
	}
	r.names = protocol.NamesFor("warren-scale-" + hex.EncodeToString(tag[:]) + ".")

	switch db := r.cfg.database; {
	case db == "":
		r.storeKind, r.dbURL = "sqlite", "sqlite://"+filepath.Join(r.dir, "warren.db")
	case strings.HasPrefix(db, "sqlite://"):
		r.storeKind, r.dbURL = "sqlite", db
	case strings.HasPrefix(db, "postgres://"), strings.HasPrefix(db, "postgresql://"):
		url, drop, err := freshSchema(ctx, db, "warren_scale_"+hex.EncodeToString(tag[:]))
		if err != nil {
			return err
		}
		r.storeKind, r.dbURL, r.dropSchema = "postgres", url, drop
	default:
		return fmt.Errorf("--database %q: want sqlite://PATH or a postgres:// URL", db)
	}

	addr, err := freeAddr()
	if err != nil {
		return err
	}
	r.apiURL = "http://" + addr
	return nil
}

// start starts the server and the workers and waits until the server is
// ready and every worker consumes the task queue.
func (r *runner) start(ctx context.Context) error {
	common := []string{"--amqp-url", r.cfg.amqpURL, "--prefix", r.names.Prefix}
	r.sampler = newSampler(sampleEvery)
	for i := 1; i <= r.cfg.servers; i++ {
		name, url := "server", r.apiURL
		if i > 1 {
			addr, err := freeAddr()
			if err != nil {
				return err
			}
			name, url = "server-"+strconv.Itoa(i), "http://"+addr
		}
		r.logf("starting warren %s (prefix %s, store %s, API %s)", name, r.names.Prefix, redact(r.dbURL), url)
		server, err := r.launch(name, append([]string{"server", "--listen", strings.TrimPrefix(url, "http://"),
			"--database", r.dbURL}, common...))
		if err != nil {
			return err
		}
		r.topology = true
		r.sampler.add(server)
		if err := waitReady(ctx, url, startTimeout, r.exits); err != nil {
			return err
		}
	}
	r.logf("starting %d warren worker(s), concurrency %d", r.cfg.workers, r.cfg.concurrency)
	for i := 1; i <= r.cfg.workers; i++ {
		w, err := r.launch("worker-"+strconv.Itoa(i), append([]string{"worker", "--types", "echo",
			"--concurrency", strconv.Itoa(r.cfg.concurrency)}, common...))
		if err != nil {
			return err
		}
		r.sampler.add(w)
	}
	return waitConsumers(ctx, r.cfg.amqpURL, r.names, r.cfg.workers, startTimeout, r.exits)
}

// launch starts one long-running warren process.
func (r *runner) launch(name string, args []string) (*proc, error) {
	p, err := startProc(name, r.bin, args, r.dir, r.exits)
	if err != nil {
		return nil, err
	}
	r.procs = append(r.procs, p)
	return p, nil
}

// measure submits the job, waits for it to close while sampling the
// processes, checks the outcome, stops the processes and builds the
// report.
func (r *runner) measure(ctx context.Context) (report, error) {
	rep := report{Tasks: r.cfg.tasks, BatchSize: r.cfg.batchSize, Workers: r.cfg.workers, Servers: r.cfg.servers,
		Concurrency: r.cfg.concurrency, Store: r.storeKind, Prefix: r.names.Prefix}

	specPath := filepath.Join(r.dir, "job.ndjson")
	size, err := writeSpec(specPath, r.cfg.tasks, r.cfg.batchSize)
	if err != nil {
		return rep, err
	}
	rep.SpecMB = round(float64(size)/(1<<20), 1)

	go r.sampler.run(ctx)
	r.sampler.markCPU()
	r.logf("submitting %d tasks (%.1f MB of NDJSON) with warren submit", r.cfg.tasks, rep.SpecMB)
	start := time.Now()
	sub, err := r.submit(ctx, specPath)
	if err != nil {
		return rep, err
	}
	rep.JobID, rep.SubmitS = sub.jobID, round(sub.wall.Seconds(), 3)
	r.logf("submitted job %s in %.3f s; waiting for it to close", sub.jobID, sub.wall.Seconds())

	w, err := r.waitClosed(ctx, sub.jobID, start)
	if err != nil {
		return rep, err
	}
	r.sampler.finish()
	job := w.job
	rep.MaxQueueMessages = w.maxReady
	rep.State, rep.CompletedTasks, rep.FailedTasks = string(job.State), job.CompletedTasks, job.FailedTasks
	rep.WallS = round(w.closedSeen.Sub(start).Seconds(), 3)
	if !w.firstResult.IsZero() {
		rep.FirstResultS = round(w.firstResult.Sub(start).Seconds(), 3)
	}
	if job.State != "completed" || job.CompletedTasks != int64(r.cfg.tasks) || job.FailedTasks != 0 {
		return rep, fmt.Errorf("job %s closed %s with %d completed and %d failed tasks, want completed with %d completed and 0 failed",
			job.ID, job.State, job.CompletedTasks, job.FailedTasks, r.cfg.tasks)
	}
	if job.CreatedAt == nil || job.FinishedAt == nil {
		return rep, fmt.Errorf("job %s is completed but has no created_at or finished_at", job.ID)
	}
	total := job.FinishedAt.Sub(*job.CreatedAt)
	rep.TotalS = round(total.Seconds(), 3)
	rep.TasksPerS = round(float64(r.cfg.tasks)/total.Seconds(), 1)
	if job.PublishedAt != nil {
		rep.AllPublishedS = round(job.PublishedAt.Sub(*job.CreatedAt).Seconds(), 3)
	}

	r.logf("job %s completed; stopping the processes", job.ID)
	r.stop()
	for _, p := range r.procs {
		rep.Processes = append(rep.Processes, r.sampler.report(p))
	}
	rep.Processes = append(rep.Processes, sub.report)
	for _, p := range rep.Processes {
		rep.MaxPeakRSSMB = max(rep.MaxPeakRSSMB, p.PeakRSSMB)
	}
	return rep, nil
}

// submitted is the outcome of `warren submit`.
type submitted struct {
	jobID  string
	wall   time.Duration
	report procReport
}

// submit runs `warren submit` on the spec file and times it.
func (r *runner) submit(ctx context.Context, specPath string) (submitted, error) {
	logPath := filepath.Join(r.dir, "submit.log")
	logFile, err := os.Create(logPath)
	if err != nil {
		return submitted{}, err
	}
	defer logFile.Close()
	var stdout bytes.Buffer
	cmd := exec.CommandContext(ctx, r.bin, "submit", "--server", r.apiURL, specPath)
	cmd.Stdout, cmd.Stderr = &stdout, logFile
	cmd.Env, cmd.SysProcAttr = childEnv(), sysProcAttr()
	start := time.Now()
	err = cmd.Run()
	wall := time.Since(start)
	if err != nil {
		if cause := context.Cause(ctx); cause != nil {
			err = cause
		}
		return submitted{}, fmt.Errorf("warren submit: %w; its stderr:\n%s", err, tail(logPath, tailLines))
	}
	id := strings.TrimSpace(stdout.String())
	if i := strings.LastIndexByte(id, '\n'); i >= 0 {
		id = strings.TrimSpace(id[i+1:])
	}
	if id == "" {
		return submitted{}, errors.New("warren submit printed no job id")
	}
	st := cmd.ProcessState
	cpu := (st.UserTime() + st.SystemTime()).Seconds()
	return submitted{jobID: id, wall: wall, report: procReport{
		Name: "submit", PeakRSSMB: round(float64(maxRSSBytes(st))/(1<<20), 1),
		CPUJobS: round(cpu, 2), CPUTotalS: round(cpu, 2), Exit: exitText(st),
	}}, nil
}

// waited is what waitClosed observed.
type waited struct {
	job client.Job
	// maxReady is the most messages seen ready in the work queue; -1 when
	// it could not be read.
	maxReady    int
	firstResult time.Time // first poll that saw a finished task
	closedSeen  time.Time // first poll that saw the job closed
}

// waitClosed polls the job until it is closed, printing progress lines.
// It fails when a process exits, when the status cannot be fetched for
// pollGiveUp, or when ctx ends.
func (r *runner) waitClosed(ctx context.Context, id string, start time.Time) (waited, error) {
	c := client.New(r.apiURL)
	var w waited
	conn, err := broker.Dial(ctx, r.cfg.amqpURL, "warren scale (depth) "+r.names.Prefix)
	if err != nil {
		return w, err
	}
	defer conn.Close()
	prober := broker.NewProber(conn)
	defer prober.Close()
	tick := time.NewTicker(pollEvery)
	defer tick.Stop()
	var (
		lastOK   = time.Now()
		lastLine = time.Now()
		lastDone int64
		lastErr  error
		lastSeen client.Job
	)
	for {
		if ready, err := prober.Ready(r.names.TasksQueue); err != nil {
			w.maxReady = -1
		} else if w.maxReady >= 0 {
			w.maxReady = max(w.maxReady, ready)
		}
		job, err := c.Get(ctx, id)
		now := time.Now()
		switch {
		case err == nil:
			lastOK, lastSeen = now, job
			done := job.CompletedTasks + job.FailedTasks
			if done > 0 && w.firstResult.IsZero() {
				w.firstResult = now
			}
			if job.Terminal() {
				w.job, w.closedSeen = job, now
				return w, nil
			}
			if now.Sub(lastLine) >= progressEvery {
				rate := float64(done-lastDone) / now.Sub(lastLine).Seconds()
				// A job is pending until its last task is published.
				r.logf("%5.0fs  %s: %d/%d done (%d failed), %.0f tasks/s  |  RSS MB %s",
					now.Sub(start).Seconds(), job.State, done, job.ExpectedTasks, job.FailedTasks,
					rate, r.sampler.rssLine())
				lastLine, lastDone = now, done
			}
		case ctx.Err() != nil:
		default:
			lastErr = err
			if now.Sub(lastOK) > pollGiveUp {
				return w, fmt.Errorf("GET /v1/jobs/%s failed for %s: %w", id, pollGiveUp, err)
			}
		}
		select {
		case <-ctx.Done():
			seen := fmt.Sprintf("last seen %s, %d/%d done", lastSeen.State, lastSeen.CompletedTasks+lastSeen.FailedTasks, r.cfg.tasks)
			if lastErr != nil {
				seen += fmt.Sprintf(", last status error: %v", lastErr)
			}
			return w, fmt.Errorf("waiting for job %s (%s): %w", id, seen, context.Cause(ctx))
		case p := <-r.exits:
			return w, p.exitedError()
		case <-tick.C:
		}
	}
}

// stop stops every process: SIGTERM, then SIGKILL after stopGrace.
func (r *runner) stop() {
	for _, name := range stopAll(r.procs, stopGrace) {
		r.logf("%s did not exit within %s of SIGTERM; killed it", name, stopGrace)
	}
}

// cleanup stops the processes, shows their logs' tails when the run
// failed, and removes the topology, a PostgreSQL schema and the
// temporary directory.
func (r *runner) cleanup(runErr error) {
	if r.sampler != nil {
		r.sampler.stop()
	}
	r.stop()
	if runErr != nil {
		for _, p := range r.procs {
			fmt.Fprintf(r.progress, "scale: ---- last lines of %s (%s, %s) ----\n%s", p.name, p.logPath, p.exitText(), tail(p.logPath, tailLines))
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), cleanupTimeout)
	defer cancel()
	if r.topology {
		if err := deleteTopology(ctx, r.cfg.amqpURL, r.names); err != nil {
			r.logf("cleanup: deleting the exchanges and queues %s*: %v", r.names.Prefix, err)
		}
	}
	if r.cfg.keep {
		if r.dir != "" {
			r.logf("kept %s (logs, store, spec)", r.dir)
		}
		if r.dropSchema != nil {
			r.logf("kept the store at %s", redact(r.dbURL))
		}
		return
	}
	if r.dropSchema != nil {
		if err := r.dropSchema(ctx); err != nil {
			r.logf("cleanup: %v", err)
		}
	}
	if r.dir != "" {
		if err := os.RemoveAll(r.dir); err != nil {
			r.logf("cleanup: %v", err)
		}
	}
}
