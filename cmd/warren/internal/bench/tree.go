package bench

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/warrenhq/warren"
	"github.com/warrenhq/warren/protocol"
	"github.com/warrenhq/warren/server"
	"github.com/warrenhq/warren/store"
)

// TreeConfig says what RunTree measures: a job of one root task of the
// built-in tree handler that spawns a tree of Levels levels below its
// root, each node spawning Fanout children, next to a flat job of as many
// tasks, both run by Workers worker processes (`warren worker --types
// tree`), Kills of them killed with SIGKILL mid-job and replaced.
type TreeConfig struct {
	// AMQPURL is the RabbitMQ URL; "" means the local broker.
	AMQPURL string
	// DatabaseURL is the job store; "" means a fresh SQLite file,
	// removed afterwards.
	DatabaseURL string
	// Levels and Fanout shape the tree: 1 + F + ... + F^L tasks.
	Levels, Fanout int
	// Workers is the number of worker processes; 0 means 4.
	Workers int
	// Concurrency is each worker's handler concurrency; 0 means 16.
	Concurrency int
	// Kills is how many workers are killed with SIGKILL during the tree
	// run with kills (at even steps of its progress), each replaced by a
	// new process; 0 runs no such run.
	Kills int
	// Worker is the command line of a worker process serving the tree
	// handler, without the flags RunTree adds (--amqp-url, --prefix,
	// --types, --concurrency, --name): the warren binary's "worker".
	Worker []string
	// Progress, when set, receives a line of progress at each step.
	Progress func(format string, a ...any)
}

// TreeReport is what RunTree measured.
type TreeReport struct {
	Levels int `json:"levels"`
	Fanout int `json:"fanout"`
	// Tasks is the tree's size, and the flat job's.
	Tasks   int `json:"tasks"`
	Workers int `json:"workers"`
	// Flat, Tree and Killed are the runs: a flat job, the tree, and the
	// tree with Kills workers killed (absent without kills).
	Flat   TreeRun  `json:"flat"`
	Tree   TreeRun  `json:"tree"`
	Killed *TreeRun `json:"killed,omitempty"`
}

// TreeRun is one job's run: its throughput, and its counters against
// the tree's size.
type TreeRun struct {
	Seconds     float64 `json:"seconds"`
	TasksPerS   float64 `json:"tasks_per_s"`
	Expected    int64   `json:"expected_tasks"`
	Completed   int64   `json:"completed_tasks"`
	Failed      int64   `json:"failed_tasks"`
	Lost        int64   `json:"lost"`
	Double      int64   `json:"double"`
	WorkersKill int     `json:"workers_killed"`
}

// treeSize is 1 + fanout + ... + fanout^levels.
func treeSize(levels, fanout int) int {
	n, level := 0, 1
	for range levels + 1 {
		n += level
		level *= fanout
	}
	return n
}

// RunTree runs the flat job, the tree and, with Kills, the tree again
// while killing workers, each on the same server and store, and returns
// what it measured. An inexact job (a task lost, a spawn counted twice,
// a failure) is an error.
func RunTree(ctx context.Context, cfg TreeConfig) (rep TreeReport, err error) {
	switch {
	case cfg.Levels < 1 || cfg.Fanout < 1:
		return TreeReport{}, fmt.Errorf("the tree needs at least 1 level and a fanout of 1, got %dx%d", cfg.Levels, cfg.Fanout)
	case len(cfg.Worker) == 0:
		return TreeReport{}, fmt.Errorf("TreeConfig.Worker is required")
	}
	if cfg.Workers == 0 {
		cfg.Workers = 4
	}
	if cfg.Concurrency == 0 {
		cfg.Concurrency = 16
	}
	if cfg.Progress == nil {
		cfg.Progress = func(string, ...any) {}
	}
	if cfg.AMQPURL == "" {
		cfg.AMQPURL = "amqp://guest:guest@127.0.0.1:5672/"
	}
	size := treeSize(cfg.Levels, cfg.Fanout)
	if cfg.DatabaseURL == "" {
		dir, err := os.MkdirTemp("", "warren-bench-tree-")
		if err != nil {
			return TreeReport{}, err
		}
		defer os.RemoveAll(dir)
		cfg.DatabaseURL = "sqlite://" + filepath.Join(dir, "warren.db")
	}
	var b [4]byte
	_, _ = rand.Read(b[:])
	names := protocol.NamesFor("warren-bench-" + hex.EncodeToString(b[:]) + "-tree.")
	defer func() {
		if derr := deleteTopology(cfg.AMQPURL, names); derr != nil && err == nil {
			err = derr
		}
	}()

	var completed atomic.Int64
	closed := make(chan string, 4)
	srv, err := server.New(server.Config{AMQPURL: cfg.AMQPURL, DatabaseURL: cfg.DatabaseURL, Prefix: names.Prefix,
		Listen: "127.0.0.1:0", Logger: slog.New(slog.DiscardHandler),
		Hooks: server.Hooks{
			OnBatch:     func(_ int, r store.ApplyReport) { completed.Add(int64(r.Applied - r.AppliedFailed)) },
			OnJobClosed: func(id string, _ warren.JobState) { closed <- id },
		}})
	if err != nil {
		return TreeReport{}, err
	}
	if err := srv.Start(ctx); err != nil {
		return TreeReport{}, err
	}
	defer func() {
		if serr := srv.Stop(); serr != nil && err == nil {
			err = serr
		}
	}()
	pool := &workerPool{cfg: cfg, names: names}
	defer pool.stop()
	for range cfg.Workers {
		if err := pool.start(); err != nil {
			return TreeReport{}, err
		}
	}
	if err := waitConsumers(ctx, cfg.AMQPURL, names, cfg.Workers); err != nil {
		return TreeReport{}, err
	}
	rep = TreeReport{Levels: cfg.Levels, Fanout: cfg.Fanout, Tasks: size, Workers: cfg.Workers}

	one := func(name string, payloads func(yield func(json.RawMessage, error) bool), kills int) (TreeRun, error) {
		cfg.Progress("%s: %d tasks, %d worker processes (concurrency %d), %d killed", name, size, cfg.Workers, cfg.Concurrency, kills)
		completed.Store(0)
		start := time.Now()
		job, _, err := srv.Store().CreateJob(ctx, store.NewJob{Type: "tree", Policy: warren.Policy{Reduce: "none", MaxRetries: 3}}, payloads)
		if err != nil {
			return TreeRun{}, err
		}
		srv.WakeRelay()
		killed := 0
		tick := time.NewTicker(20 * time.Millisecond)
		defer tick.Stop()
	wait:
		for {
			select {
			case id := <-closed:
				if id == job.ID {
					break wait
				}
			case <-tick.C:
				if killed < kills && completed.Load() >= int64(size*(killed+1)/(kills+1)) {
					if err := pool.kill(); err != nil {
						return TreeRun{}, err
					}
					killed++
					cfg.Progress("%s: killed a worker with SIGKILL at %d of %d tasks recorded, started another", name, completed.Load(), size)
				}
			case <-srv.Done():
				return TreeRun{}, fmt.Errorf("the server stopped early: %w", srv.Stop())
			case <-ctx.Done():
				return TreeRun{}, ctx.Err()
			}
		}
		d := time.Since(start)
		got, err := srv.Store().GetJob(ctx, job.ID)
		if err != nil {
			return TreeRun{}, err
		}
		r := TreeRun{Seconds: math.Round(d.Seconds()*1000) / 1000, TasksPerS: round1(float64(size) / d.Seconds()),
			Expected: got.ExpectedTasks, Completed: got.CompletedTasks, Failed: got.FailedTasks,
			Lost: int64(size) - got.CompletedTasks, Double: got.ExpectedTasks - int64(size), WorkersKill: killed}
		cfg.Progress("%s: %.0f tasks/s, expected_tasks %d, completed %d, failed %d", name, r.TasksPerS, r.Expected, r.Completed, r.Failed)
		if got.State != warren.JobCompleted || r.Lost != 0 || r.Double != 0 || r.Failed != 0 {
			return r, fmt.Errorf("%s: job %s closed %s with %d of %d tasks expected, %d completed, %d failed", name, job.ID, got.State, r.Expected, size, r.Completed, r.Failed)
		}
		return r, nil
	}
	leaf := json.RawMessage(`{"depth":0,"fanout":0,"levels":0}`)
	flat := func(yield func(json.RawMessage, error) bool) {
		for range size {
			if !yield(leaf, nil) {
				return
			}
		}
	}
	root := json.RawMessage(fmt.Sprintf(`{"depth":0,"fanout":%d,"levels":%d}`, cfg.Fanout, cfg.Levels))
	tree := func(yield func(json.RawMessage, error) bool) { yield(root, nil) }

	if rep.Flat, err = one("flat", flat, 0); err != nil {
		return rep, err
	}
	if rep.Tree, err = one("tree", tree, 0); err != nil {
		return rep, err
	}
	if cfg.Kills > 0 {
		k, err := one("tree with kills", tree, cfg.Kills)
		rep.Killed = &k
		if err != nil {
			return rep, err
		}
	}
	return rep, nil
}

// workerPool is the worker processes of a tree run.
type workerPool struct {
	cfg   TreeConfig
	names protocol.Names
	procs []*exec.Cmd
	n     int
}

// start starts one more worker process.
func (p *workerPool) start() error {
	p.n++
	args := append(append([]string(nil), p.cfg.Worker[1:]...), "--amqp-url", p.cfg.AMQPURL, "--prefix", p.names.Prefix,
		"--types", "tree", "--concurrency", strconv.Itoa(p.cfg.Concurrency), "--name", fmt.Sprintf("bench-tree-%d", p.n))
	cmd := exec.Command(p.cfg.Worker[0], args...)
	cmd.Stdout, cmd.Stderr = io.Discard, io.Discard
	cmd.Env = append(os.Environ(), "WARREN_LOG_LEVEL=error")
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("start a worker process: %w", err)
	}
	p.procs = append(p.procs, cmd)
	return nil
}

// kill kills the oldest worker process with SIGKILL, then starts another.
func (p *workerPool) kill() error {
	victim := p.procs[0]
	p.procs = p.procs[1:]
	if err := victim.Process.Kill(); err != nil { // SIGKILL: no shutdown, no goodbye
		return fmt.Errorf("kill worker process %d: %w", victim.Process.Pid, err)
	}
	_ = victim.Wait()
	return p.start()
}

// stop stops every worker process: SIGTERM, then SIGKILL after 10 s.
func (p *workerPool) stop() {
	for _, cmd := range p.procs {
		_ = cmd.Process.Signal(syscall.SIGTERM)
	}
	for _, cmd := range p.procs {
		done := make(chan struct{})
		go func() { _ = cmd.Wait(); close(done) }()
		select {
		case <-done:
		case <-time.After(10 * time.Second):
			_ = cmd.Process.Kill()
			<-done
		}
	}
	p.procs = nil
}
