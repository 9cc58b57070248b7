package main

import (
	"fmt"
	"os"
	"time"
)

// origWatermark is the broker's memory watermark, read once before the
// scenarios (reading it takes a second or two).
var origWatermark = "0.4"

// progressWait bounds the wait for the job to reach the fault's trigger.
const progressWait = 3 * time.Minute

// scenarios lists the scenarios in the order they run; each starts from
// a fresh prefix and store.
func scenarios() []scenario {
	return []scenario{
		{name: "baseline", store: "sqlite"},
		{name: "worker-kill9-x3", store: "sqlite", fault: workerKill9x3},
		// One message per task: the workers' coalesced acks and results.
		{name: "worker-kill9-x3-single", store: "sqlite", fault: workerKill9x3, batchSize: 1},
		{name: "close-connections-single", store: "sqlite", fault: closeAllConnections, batchSize: 1},
		{name: "worker-sigterm", store: "sqlite", fault: workerSigterm},
		{name: "server-kill9", store: "sqlite", fault: serverKill9},
		{name: "close-connections", store: "sqlite", fault: closeAllConnections},
		{name: "rabbitmq-restart", store: "sqlite", fault: rabbitRestart},
		{name: "memory-alarm", store: "sqlite", fault: memoryAlarm},
		{name: "postgres-restart", store: "postgres", fault: postgresRestart},
		{name: "two-servers-kill9", store: "postgres", servers: 2, fault: twoServersKill9},
		// Tasks that add tasks: every node of a tree spawns its children
		// with its result; expected_tasks grows to the tree's size, and
		// no child is lost or doubled whatever dies.
		{name: "tree-worker-kill9-x3", store: "sqlite", job: jobTree, fault: workerKill9x3},
		{name: "tree-server-kill9", store: "postgres", job: jobTree, fault: serverKill9},
		// A capped job: its recorded runs never overlap more than its
		// max_concurrency, across workers killed and connections closed.
		{name: "capped-worker-kill9-x3", store: "sqlite", job: jobCapped, fault: workerKill9x3},
		{name: "capped-close-connections", store: "postgres", job: jobCapped, fault: closeAllConnections},
		// A worker that serves another type on the same queue: it gets
		// its share of the job's tasks and sends each back for a worker
		// that serves it, without failing one.
		{name: "other-type-worker", store: "sqlite", prepare: startOtherTypeWorker, fault: workerKill9x3},
		// Many small jobs at once instead of one big one: 8 clients each
		// submit jobs of 10 flaky tasks with an idempotency key and watch
		// each to its close (smalljobs.go); every job, task, result and
		// key is checked.
		{name: "small-jobs-worker-kill9-x3", store: "sqlite", job: jobSmall, fault: workerKill9x3},
		{name: "small-jobs-server-kill9", store: "postgres", job: jobSmall, fault: smallServerKill9},
		// Only the scenario's own connections: others share the broker.
		{name: "small-jobs-close-connections", store: "sqlite", job: jobSmall, prepare: armCloseOwnConnections, fault: closeOwnConnections},
	}
}

// startOtherTypeWorker starts a fourth worker on the job's queue that
// serves only echo, not the job's flaky tasks; it stays up to the end
// (liveWorker picks the oldest: the kills take the flaky workers).
func startOtherTypeWorker(r *runner) error {
	r.seq++
	p, err := startProc(r.bin, r.dir, fmt.Sprintf("echo-worker-%d", r.seq), r.env, "worker", "--types", "echo")
	if err != nil {
		return err
	}
	track(p)
	r.others = append(r.others, p)
	r.addFault("a worker serving only echo on the same queue")
	return nil
}

func workerKill9x3(r *runner) error {
	for i, frac := range []float64{0.2, 0.35, 0.5} {
		if err := r.waitProgress(frac, progressWait); err != nil {
			return err
		}
		w := r.liveWorker()
		if w == nil {
			return fmt.Errorf("no live worker")
		}
		w.kill9()
		if _, err := r.startWorker(); err != nil {
			return err
		}
		r.addFault("kill -9 %s + replacement (%d/3, at %.0f%%)", w.name, i+1, frac*100)
	}
	return nil
}

func workerSigterm(r *runner) error {
	if err := r.waitProgress(0.25, progressWait); err != nil {
		return err
	}
	w := r.liveWorker()
	if w == nil {
		return fmt.Errorf("no live worker")
	}
	code, ok := w.term(60 * time.Second)
	if !ok {
		return fmt.Errorf("%s did not exit within 60s of SIGTERM:\n%s", w.name, w.tail(20))
	}
	if _, err := r.startWorker(); err != nil {
		return err
	}
	r.addFault("SIGTERM %s (exit %d) + replacement", w.name, code)
	if code != 0 {
		return fmt.Errorf("%s exited %d on SIGTERM, want 0:\n%s", w.name, code, w.tail(20))
	}
	return nil
}

func serverKill9(r *runner) error {
	if err := r.waitProgress(0.25, progressWait); err != nil {
		return err
	}
	s := r.servers[0]
	r.kill9Server(s)
	r.addFault("kill -9 server")
	time.Sleep(time.Second)
	// Same store, same prefix; a new address (the old port may linger).
	if _, err := r.startServer(); err != nil {
		return err
	}
	r.addFault("server restarted")
	return nil
}

func closeAllConnections(r *runner) error {
	if err := r.waitProgress(0.25, progressWait); err != nil {
		return err
	}
	if _, err := run(60*time.Second, "rabbitmqctl", "-q", "close_all_connections", "chaos"); err != nil {
		return err
	}
	r.addFault("rabbitmqctl close_all_connections")
	return nil
}

func rabbitRestart(r *runner) error {
	if err := r.waitProgress(0.25, progressWait); err != nil {
		return err
	}
	addCleanup("rabbit", func() { _ = ensureBroker() })
	defer removeCleanup("rabbit")
	if _, err := run(120*time.Second, "rabbitmqctl", "-q", "stop_app"); err != nil {
		return err
	}
	r.addFault("rabbitmqctl stop_app")
	time.Sleep(3 * time.Second)
	if _, err := run(120*time.Second, "rabbitmqctl", "-q", "start_app"); err != nil {
		return err
	}
	if _, err := run(120*time.Second, "rabbitmqctl", "-q", "await_startup"); err != nil {
		return err
	}
	r.addFault("start_app after 3s")
	return nil
}

func memoryAlarm(r *runner) error {
	orig := origWatermark
	if err := r.waitProgress(0.25, progressWait); err != nil {
		return err
	}
	restore := func() {
		if err := setWatermark(orig); err != nil {
			fmt.Fprintf(os.Stderr, "chaos: RESTORE THE MEMORY WATERMARK BY HAND: rabbitmqctl set_vm_memory_high_watermark %s: %v\n", orig, err)
		}
	}
	addCleanup("watermark", restore)
	if err := setWatermark("0"); err != nil {
		removeCleanup("watermark")
		restore()
		return err
	}
	r.addFault("vm_memory_high_watermark 0 for 3s")
	time.Sleep(3 * time.Second)
	removeCleanup("watermark")
	restore()
	r.addFault("restored to %s", orig)
	return nil
}

func postgresRestart(r *runner) error {
	if err := r.waitProgress(0.25, progressWait); err != nil {
		return err
	}
	addCleanup("postgres", func() { _ = ensurePostgres() })
	defer removeCleanup("postgres")
	if _, err := run(120*time.Second, "pg_ctlcluster", "--skip-systemctl-redirect", pgCluster(), "main", "restart"); err != nil {
		return err
	}
	r.addFault("pg_ctlcluster restart")
	return nil
}

func twoServersKill9(r *runner) error {
	if err := r.waitProgress(0.25, progressWait); err != nil {
		return err
	}
	// The job was submitted to the last started server (api() picks it);
	// kill the first, the other finishes the job.
	s := r.servers[0]
	r.kill9Server(s)
	r.addFault("kill -9 one of two servers")
	return nil
}
