package main

import (
	"bufio"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"
)

// holdStall is how long a cluster job may make no progress after its
// node kill before the target reports a hold: the queues' elections take
// a few seconds, a dead-letter worker held by RabbitMQ 3.10 about 30 s
// (the watchdog), and the reconciler needs the task timeout plus its
// grace.
const holdStall = 20 * time.Second

// maxHoldTasks bounds the held tasks whose log lines a hold report shows.
const maxHoldTasks = 20

// watchHold follows the job after a node was killed at killed: once its
// completed count stays the same for holdStall while it is open, it
// prints what holds the tasks that are not done (their records, the
// queues and their Raft state on the nodes left, and every log line of
// the warren processes about each of them), once, then returns. It ends
// when the job closes or the scenario is over.
func (r *runner) watchHold(killed time.Time) {
	var (
		last      int64 = -1
		lastMoved       = time.Now()
	)
	tick := time.NewTicker(2 * time.Second)
	defer tick.Stop()
	for {
		select {
		case <-tick.C:
		case <-r.ended:
			return
		}
		s, err := r.status()
		if err != nil {
			continue
		}
		if terminal(s.State) {
			return
		}
		if s.CompletedTasks != last {
			last, lastMoved = s.CompletedTasks, time.Now()
			continue
		}
		if time.Since(lastMoved) < holdStall {
			continue
		}
		r.reportHold(killed, s)
		return
	}
}

// heldTask is a task record of a held job, as the API lists it.
type heldTask struct {
	TaskID   int64      `json:"task_id"`
	State    string     `json:"state"`
	Attempts int        `json:"attempts"`
	Worker   string     `json:"worker"`
	QueuedAt *time.Time `json:"queued_at"`
}

// reportHold prints the hold report of watchHold to stderr and to
// hold.txt in the scenario's directory (kept with CHAOS_KEEP).
func (r *runner) reportHold(killed time.Time, s jobStatus) {
	stalled := time.Since(killed)
	var b strings.Builder
	fmt.Fprintf(&b, "HOLD: job %s open %s after the kill with %d/%d completed, no progress for %s\n",
		r.jobID, stalled.Round(100*time.Millisecond), s.CompletedTasks, s.ExpectedTasks, holdStall)
	fmt.Fprintf(&b, "  killed at %s\n", killed.UTC().Format("15:04:05.000"))
	held, err := r.openTasks()
	if err != nil {
		fmt.Fprintf(&b, "  list tasks: %v\n", err)
	}
	fmt.Fprintf(&b, "  %d tasks not completed:\n", len(held))
	for _, t := range held {
		q := "-"
		if t.QueuedAt != nil {
			q = t.QueuedAt.UTC().Format("15:04:05.000")
		}
		fmt.Fprintf(&b, "    task %d: %s, attempts %d, worker %q, queued_at %s\n", t.TaskID, t.State, t.Attempts, t.Worker, q)
	}
	if c := r.tg.cluster; c != nil {
		b.WriteString(c.queueReport(r.prefix))
	}
	b.WriteString(r.taskLines(held))
	report := b.String()
	fmt.Fprint(os.Stderr, report)
	_ = os.WriteFile(filepath.Join(r.dir, "hold.txt"), []byte(report), 0o644)
	r.holdMu.Lock()
	r.hold = fmt.Sprintf("a hold: %d tasks not completed %s after the kill (report in %s)", len(held),
		stalled.Round(time.Second), filepath.Join(r.dir, "hold.txt"))
	r.holdMu.Unlock()
}

// holdNote is what watchHold found, for the faults column: "" when the
// job never stalled.
func (r *runner) holdNote() string {
	r.holdMu.Lock()
	defer r.holdMu.Unlock()
	return r.hold
}

// openTasks lists the job's tasks that are not completed.
func (r *runner) openTasks() ([]heldTask, error) {
	var open []heldTask
	cursor := ""
	for pages := 0; pages <= r.n/1000+1; pages++ {
		url := r.api() + "/v1/jobs/" + r.jobID + "/tasks?limit=1000"
		if cursor != "" {
			url += "&cursor=" + cursor
		}
		var page struct {
			Tasks      []heldTask `json:"tasks"`
			NextCursor *string    `json:"next_cursor"`
		}
		if err := getJSON(url, &page); err != nil {
			return open, err
		}
		for _, t := range page.Tasks {
			if t.State != "completed" {
				open = append(open, t)
			}
		}
		if page.NextCursor == nil || *page.NextCursor == "" {
			break
		}
		cursor = *page.NextCursor
	}
	return open, nil
}

// taskLines is every line of the scenario's warren logs that names one of
// the first maxHoldTasks held tasks, per task, and the lines of the
// workers and servers about connections.
func (r *runner) taskLines(held []heldTask) string {
	logs, _ := filepath.Glob(filepath.Join(r.dir, "*.log"))
	slices.Sort(logs)
	var b strings.Builder
	ids := map[string]bool{}
	for i, t := range held {
		if i == maxHoldTasks {
			break
		}
		ids[strconv.FormatInt(t.TaskID, 10)] = true
	}
	conn := regexp.MustCompile(`connect|lost|closed|nack|not confirmed|reconnect`)
	perTask := map[string][]string{}
	for _, path := range logs {
		f, err := os.Open(path)
		if err != nil {
			continue
		}
		name := strings.TrimSuffix(filepath.Base(path), ".log")
		sc := bufio.NewScanner(f)
		sc.Buffer(make([]byte, 1<<20), 1<<20)
		var conns []string
		for sc.Scan() {
			l := sc.Text()
			if id, ok := namedTask(l, ids); ok && strings.Contains(l, r.jobID) {
				perTask[id] = append(perTask[id], name+": "+l)
			} else if conn.MatchString(l) {
				conns = append(conns, l)
			}
		}
		f.Close()
		if len(conns) > 0 {
			fmt.Fprintf(&b, "  --- %s, lines about connections (%d, last 30):\n", name, len(conns))
			for _, l := range conns[max(0, len(conns)-30):] {
				b.WriteString("    " + l + "\n")
			}
		}
	}
	keys := make([]string, 0, len(ids))
	for id := range ids {
		keys = append(keys, id)
	}
	slices.SortFunc(keys, func(a, b string) int { x, _ := strconv.Atoi(a); y, _ := strconv.Atoi(b); return x - y })
	for _, id := range keys {
		fmt.Fprintf(&b, "  --- task %s: %d log lines\n", id, len(perTask[id]))
		for _, l := range perTask[id] {
			b.WriteString("    " + l + "\n")
		}
	}
	return b.String()
}

// queueReport lists the prefix's queues as a live node sees them (leader,
// members, counts, dead letters held) and each one's Raft machine
// overview, with the dead-letter workers of the live nodes.
func (c *cluster) queueReport(prefix string) string {
	var b strings.Builder
	n := c.live()
	out, err := n.ctl(30*time.Second, "list_queues", "name", "leader", "online", "messages", "messages_ready",
		"messages_unacknowledged", "consumers")
	b.WriteString("  queues (name leader online messages ready unacked consumers), from " + n.name + ":\n")
	if err != nil {
		b.WriteString("    " + err.Error() + "\n")
	}
	for _, l := range strings.Split(out, "\n") {
		if strings.HasPrefix(l, prefix) {
			b.WriteString("    " + l + "\n")
		}
	}
	// The Raft overview of each queue of the prefix on every live node,
	// and the state of every dead-letter worker there.
	expr := queueReportExpr(prefix)
	for _, node := range c.nodes {
		c.mu.Lock()
		down := c.down[node]
		c.mu.Unlock()
		if down {
			continue
		}
		out, err := node.ctl(60*time.Second, "eval", expr)
		fmt.Fprintf(&b, "  --- Raft overviews and dead-letter workers on %s:\n", node.name)
		if err != nil {
			b.WriteString("    " + err.Error() + "\n")
		}
		b.WriteString(indent(strings.TrimSpace(out)) + "\n")
	}
	return b.String()
}

// queueReportExpr is the Erlang expression, for rabbitmqctl eval, that
// prints the Raft machine overview of each quorum queue whose name starts
// with prefix, as the node it runs on sees it, and the state of each
// dead-letter worker of that node. Like deploy/rabbitmq's watchdog it
// holds no dollar sign or backquote (the Debian rabbitmqctl wrapper
// passes its arguments through a shell).
func queueReportExpr(prefix string) string {
	return fmt.Sprintf(`Pre = <<%q>>,
[begin
   {Name, _} = amqqueue:get_pid(Q),
   QN = element(4, amqqueue:get_name(Q)),
   Keys = [num_messages, num_ready_messages, num_checked_out, num_consumers, num_enqueuers, num_discarded, num_discard_checked_out],
   Ov = (catch ra:local_query({Name, node()}, fun(S) -> maps:with(Keys, rabbit_fifo:overview(S)) end, 5000)),
   Who = (catch ra:local_query({Name, node()}, fun(S) ->
       {[{Cid, element(3, C), map_size(element(5, C))} || {Cid, C} <- maps:to_list(element(10, S))],
        [{P, element(2, E), element(4, E)} || {P, E} <- maps:to_list(element(7, S))]}
     end, 5000)),
   io:format("~ts on ~s: ~w~n  consumers (id, status, checked out) and enqueuers (pid, next seqno, status): ~w~n", [QN, node(), Ov, Who])
 end || Q <- rabbit_amqqueue:list(), amqqueue:get_type(Q) =:= rabbit_quorum_queue,
        binary:longest_common_prefix([element(4, amqqueue:get_name(Q)), Pre]) =:= byte_size(Pre)],
Names = fun(L) -> [element(4, R) || R <- L] end,
[case catch sys:get_state(P, 5000) of
   S when is_tuple(S), element(1, S) =:= state ->
     Pend = lists:sublist(lists:sort(maps:to_list(element(8, S))), 5),
     io:format("dlx worker ~p on ~s of ~ts: client ~p, next_out_seq ~p, ~p pending, first: ~p~n",
       [P, node(), element(4, element(2, S)), element(6, S), element(10, S), map_size(element(8, S)),
        [{Seq, element(2, D), Names(element(5, D)), Names(element(6, D)), Names(element(7, D)), element(8, D), element(9, D)}
         || {Seq, D} <- Pend]]);
   Other -> io:format("dlx worker ~p on ~s: ~p~n", [P, node(), Other])
 end
 || {_, P, _, _} <- supervisor:which_children(rabbit_fifo_dlx_sup), is_pid(P)],
ok.`, prefix)
}

var (
	taskIDRE   = regexp.MustCompile(`\btask_id=(\d+)`)
	lastTaskRE = regexp.MustCompile(`\blast_task=(\d+)`)
)

// namedTask returns the one of ids (task ids) that log line l is about:
// its task_id, or one from task_id to last_task (a batch).
func namedTask(l string, ids map[string]bool) (string, bool) {
	m := taskIDRE.FindStringSubmatch(l)
	if m == nil {
		return "", false
	}
	if ids[m[1]] {
		return m[1], true
	}
	last := lastTaskRE.FindStringSubmatch(l)
	if last == nil {
		return "", false
	}
	lo, _ := strconv.Atoi(m[1])
	hi, _ := strconv.Atoi(last[1])
	for id := range ids {
		if n, _ := strconv.Atoi(id); n >= lo && n <= hi {
			return id, true
		}
	}
	return "", false
}
