package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"os/signal"
	"os/user"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/warrenhq/warren/deploy"
	"github.com/warrenhq/warren/internal/broker"
)

// The cluster target (go run ./chaos -cluster) runs its scenarios on three
// RabbitMQ nodes it starts for the run, from the installed RabbitMQ, on
// this host: r1, r2 and r3@localhost, each with its own ports, data and
// log directories, configuration and (empty) plugins file under one
// temporary directory, clustered with r1. It kills nodes with SIGKILL
// and starts them again, and stops all three at the end, also when it
// fails or is interrupted. Every rabbitmqctl call names its node: the
// main node (rabbit@..., port 5672) is never addressed.

// clusterNode is one of the nodes the cluster target starts.
type clusterNode struct {
	name     string // r1@localhost
	amqpPort int
	distPort int
	dir      string
}

func (n *clusterNode) url() string {
	return fmt.Sprintf("amqp://guest:guest@127.0.0.1:%d/", n.amqpPort)
}

func (n *clusterNode) pidFile() string { return filepath.Join(n.dir, "pid") }

// env is the node's environment for rabbitmq-server: everything that
// would otherwise come from the main node's files (/etc/rabbitmq) is its
// own, so that it shares no port, directory or plugin with the main node.
func (n *clusterNode) env() []string {
	return []string{
		"RABBITMQ_NODENAME=" + n.name,
		"RABBITMQ_NODE_IP_ADDRESS=127.0.0.1",
		"RABBITMQ_NODE_PORT=" + strconv.Itoa(n.amqpPort),
		"RABBITMQ_DIST_PORT=" + strconv.Itoa(n.distPort),
		"RABBITMQ_MNESIA_BASE=" + filepath.Join(n.dir, "mnesia"),
		"RABBITMQ_LOG_BASE=" + filepath.Join(n.dir, "log"),
		"RABBITMQ_ENABLED_PLUGINS_FILE=" + filepath.Join(n.dir, "enabled_plugins"),
		"RABBITMQ_CONFIG_FILE=" + filepath.Join(n.dir, "rabbitmq.conf"),
		"RABBITMQ_ADVANCED_CONFIG_FILE=" + filepath.Join(n.dir, "advanced.config"),
		"RABBITMQ_CONF_ENV_FILE=" + filepath.Join(n.dir, "rabbitmq-env.conf"),
		"RABBITMQ_PID_FILE=" + n.pidFile(),
		"ERL_EPMD_ADDRESS=127.0.0.1",
		"RABBITMQ_SERVER_ADDITIONAL_ERL_ARGS=-kernel inet_dist_use_interface {127,0,0,1}",
	}
}

// ctl runs rabbitmqctl against the node, bounded by d.
func (n *clusterNode) ctl(d time.Duration, args ...string) (string, error) {
	return run(d, "rabbitmqctl", append([]string{"-q", "-n", n.name}, args...)...)
}

// queues runs rabbitmq-queues against the node, bounded by d.
func (n *clusterNode) queues(d time.Duration, args ...string) (string, error) {
	return run(d, "rabbitmq-queues", append([]string{"-q", "-n", n.name}, args...)...)
}

// logTail is the end of the node's log, for errors.
func (n *clusterNode) logTail(lines int) string {
	b, err := os.ReadFile(filepath.Join(n.dir, "log", n.name+".log"))
	if err != nil {
		return err.Error()
	}
	all := strings.Split(strings.TrimRight(string(b), "\n"), "\n")
	return strings.Join(all[max(0, len(all)-lines):], "\n")
}

// cluster is the three nodes and which of them are down.
type cluster struct {
	dir   string
	nodes []*clusterNode

	mu      sync.Mutex
	down    map[*clusterNode]bool
	started map[*clusterNode]bool // started by this run (to stop at the end)
	// restarted lists the dead-letter workers the watchdog restarted since
	// the last takeRestarts, as "queue on node".
	restarted []string
}

func newCluster() *cluster {
	c := &cluster{down: map[*clusterNode]bool{}, started: map[*clusterNode]bool{}}
	for i := 1; i <= 3; i++ {
		c.nodes = append(c.nodes, &clusterNode{name: fmt.Sprintf("r%d@localhost", i), amqpPort: 5680 + i, distPort: 25680 + i})
	}
	return c
}

// urls is WARREN_AMQP_URL for the cluster: every node.
func (c *cluster) urls() string {
	urls := make([]string, len(c.nodes))
	for i, n := range c.nodes {
		urls[i] = n.url()
	}
	return strings.Join(urls, ",")
}

func (c *cluster) byName(name string) *clusterNode {
	for _, n := range c.nodes {
		if n.name == name {
			return n
		}
	}
	return nil
}

func (c *cluster) byPort(port int) *clusterNode {
	for _, n := range c.nodes {
		if n.amqpPort == port {
			return n
		}
	}
	return nil
}

// live returns a node that is up, to ask about the cluster.
func (c *cluster) live() *clusterNode {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, n := range c.nodes {
		if !c.down[n] {
			return n
		}
	}
	return c.nodes[0]
}

// up starts the three nodes, clusters r2 and r3 with r1, and checks that
// all three run. It refuses to start when one of their ports or names
// is taken (another run of the cluster target, say): it stops only
// nodes it started itself.
func (c *cluster) up() error {
	if err := c.checkFree(); err != nil {
		return err
	}
	rabbitUID, rabbitGID, err := rabbitmqUser()
	if err != nil {
		return err
	}
	if c.dir, err = os.MkdirTemp("", "warren-chaos-cluster-"); err != nil {
		return err
	}
	// The nodes run as the rabbitmq user (rabbitmq-server switches to it).
	if err := os.Chmod(c.dir, 0o755); err != nil {
		return err
	}
	for _, n := range c.nodes {
		n.dir = filepath.Join(c.dir, strings.TrimSuffix(n.name, "@localhost"))
		if err := writeNodeFiles(n, rabbitUID, rabbitGID); err != nil {
			return err
		}
	}
	logf("cluster: starting %s, %s and %s (AMQP ports %d-%d) in %s", c.nodes[0].name, c.nodes[1].name, c.nodes[2].name,
		c.nodes[0].amqpPort, c.nodes[2].amqpPort, c.dir)
	start := time.Now()
	errs := make([]error, len(c.nodes))
	var wg sync.WaitGroup
	for i, n := range c.nodes {
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs[i] = c.start(n)
		}()
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		return err
	}
	logf("cluster: three nodes up in %s; clustering", time.Since(start).Round(time.Second))
	seed := c.nodes[0]
	for _, n := range c.nodes[1:] {
		for _, step := range [][]string{{"stop_app"}, {"join_cluster", seed.name}, {"start_app"}} {
			if _, err := n.ctl(2*time.Minute, step...); err != nil {
				return fmt.Errorf("%s: %v", n.name, err)
			}
		}
	}
	if err := c.awaitRunning(2 * time.Minute); err != nil {
		return err
	}
	logf("cluster: %s clustered, up in %s", broker.Redact(c.urls()), time.Since(start).Round(time.Second))
	return nil
}

// checkFree fails when a port or a node name of the cluster is taken.
func (c *cluster) checkFree() error {
	names, _ := run(10*time.Second, "epmd", "-names")
	for _, n := range c.nodes {
		short := strings.TrimSuffix(n.name, "@localhost")
		if strings.Contains(names, "name "+short+" at port") {
			return fmt.Errorf("a node named %s already runs (another run of the cluster target, or one that was killed): "+
				"stop it with `rabbitmqctl -n %s stop` if it is a leftover, then run again", n.name, n.name)
		}
		for _, port := range []int{n.amqpPort, n.distPort} {
			l, err := net.Listen("tcp", "127.0.0.1:"+strconv.Itoa(port))
			if err != nil {
				return fmt.Errorf("port %d, which %s needs, is taken: %v", port, n.name, err)
			}
			_ = l.Close()
		}
	}
	return nil
}

// rabbitmqUser is the uid and gid the nodes run as, to give them their
// directories; -1 when this process is not root (then it must be the
// rabbitmq user itself, which rabbitmq-server requires).
func rabbitmqUser() (int, int, error) {
	if os.Geteuid() != 0 {
		return -1, -1, nil
	}
	u, err := user.Lookup("rabbitmq")
	if err != nil {
		return 0, 0, fmt.Errorf("the cluster target runs RabbitMQ nodes as the rabbitmq user, as rabbitmq-server does: %v", err)
	}
	uid, _ := strconv.Atoi(u.Uid)
	gid, _ := strconv.Atoi(u.Gid)
	return uid, gid, nil
}

// writeNodeFiles makes the node's directories, configuration and empty
// plugins file (the main node's plugins would bind the same ports).
func writeNodeFiles(n *clusterNode, uid, gid int) error {
	files := map[string]string{
		"rabbitmq.conf":     fmt.Sprintf("listeners.tcp.1 = 127.0.0.1:%d\n", n.amqpPort) + extraConf(),
		"enabled_plugins":   "[].\n",
		"rabbitmq-env.conf": "",
	}
	// advanced.config carries what rabbitmq.conf cannot say on 3.10 (the
	// dead-letter worker's settings, see nodeAdvancedConfig).
	if adv := nodeAdvancedConfig(); adv != "" {
		files["advanced.config"] = adv
	}
	for _, d := range []string{n.dir, filepath.Join(n.dir, "mnesia"), filepath.Join(n.dir, "log")} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			return err
		}
	}
	for name, content := range files {
		if err := os.WriteFile(filepath.Join(n.dir, name), []byte(content), 0o644); err != nil {
			return err
		}
	}
	if uid < 0 {
		return nil
	}
	return filepath.Walk(n.dir, func(path string, _ os.FileInfo, err error) error {
		if err != nil {
			return err
		}
		return os.Chown(path, uid, gid)
	})
}

// start starts the node (again) from its directory and waits until it
// has booted.
func (c *cluster) start(n *clusterNode) error {
	out, err := os.OpenFile(filepath.Join(n.dir, "start.log"), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return err
	}
	defer out.Close()
	cmd := exec.Command("rabbitmq-server", "-detached")
	cmd.Env = append(os.Environ(), n.env()...)
	cmd.Stdout, cmd.Stderr = out, out
	cmd.WaitDelay = 2 * time.Second
	c.mu.Lock()
	c.started[n] = true
	c.mu.Unlock()
	done := make(chan error, 1)
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("%s: rabbitmq-server: %v", n.name, err)
	}
	go func() { done <- cmd.Wait() }()
	select {
	case err := <-done:
		if err != nil {
			return fmt.Errorf("%s: rabbitmq-server -detached: %v (see %s)", n.name, err, out.Name())
		}
	case <-time.After(time.Minute):
		_ = cmd.Process.Kill()
		return fmt.Errorf("%s: rabbitmq-server -detached did not return within 1m", n.name)
	}
	if err := c.await(n, 2*time.Minute); err != nil {
		return err
	}
	c.mu.Lock()
	c.down[n] = false
	c.mu.Unlock()
	return nil
}

// await waits until the node has booted: await_startup answers at once
// while the node is not yet registered, so it is asked again.
func (c *cluster) await(n *clusterNode, d time.Duration) error {
	deadline := time.Now().Add(d)
	for {
		_, err := n.ctl(time.Minute, "await_startup")
		if err == nil {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%s did not start within %s: %v\nlast lines of its log:\n%s", n.name, d, err, indent(n.logTail(15)))
		}
		time.Sleep(time.Second)
	}
}

// awaitRunning waits until every node runs in the cluster.
func (c *cluster) awaitRunning(d time.Duration) error {
	deadline := time.Now().Add(d)
	for {
		out, err := c.live().ctl(time.Minute, "cluster_status", "--formatter", "json")
		var st struct {
			Running []string `json:"running_nodes"`
		}
		if err == nil {
			err = json.Unmarshal([]byte(out), &st)
		}
		if err == nil && len(st.Running) == len(c.nodes) {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("the cluster does not run all of %d nodes after %s (running: %v; %v)", len(c.nodes), d, st.Running, err)
		}
		time.Sleep(time.Second)
	}
}

// pid is the node's OS process id, read from its pid file and checked
// against the process's environment: it is the node's, never another's.
func (n *clusterNode) pid() (int, error) {
	b, err := os.ReadFile(n.pidFile())
	if err != nil {
		return 0, err
	}
	pid, err := strconv.Atoi(strings.TrimSpace(string(b)))
	if err != nil || pid <= 1 {
		return 0, fmt.Errorf("%s: no pid in %s", n.name, n.pidFile())
	}
	env, err := os.ReadFile(fmt.Sprintf("/proc/%d/environ", pid))
	if err != nil {
		return 0, fmt.Errorf("%s: process %d: %v", n.name, pid, err)
	}
	vars := strings.Split(string(env), "\x00")
	if !contains(vars, "RABBITMQ_NODENAME="+n.name) || !contains(vars, "RABBITMQ_PID_FILE="+n.pidFile()) {
		return 0, fmt.Errorf("%s: process %d is not this node", n.name, pid)
	}
	return pid, nil
}

func contains(list []string, s string) bool {
	for _, v := range list {
		if v == s {
			return true
		}
	}
	return false
}

// kill9 kills the node with SIGKILL and waits until its AMQP port is
// closed. It stays down until restoreDown starts it again.
func (c *cluster) kill9(n *clusterNode) error {
	pid, err := n.pid()
	if err != nil {
		return err
	}
	c.mu.Lock()
	c.down[n] = true
	c.mu.Unlock()
	if err := syscall.Kill(pid, syscall.SIGKILL); err != nil {
		return fmt.Errorf("kill -9 %s (pid %d): %v", n.name, pid, err)
	}
	deadline := time.Now().Add(15 * time.Second)
	for portOpen(n.amqpPort) {
		if time.Now().After(deadline) {
			return fmt.Errorf("%s (pid %d) still listens 15s after kill -9", n.name, pid)
		}
		time.Sleep(50 * time.Millisecond)
	}
	return nil
}

func portOpen(port int) bool {
	conn, err := net.DialTimeout("tcp", "127.0.0.1:"+strconv.Itoa(port), time.Second)
	if err != nil {
		return false
	}
	_ = conn.Close()
	return true
}

// restoreDown starts every node that is down again and waits until the
// three run in the cluster.
func (c *cluster) restoreDown() error {
	c.mu.Lock()
	var down []*clusterNode
	for _, n := range c.nodes {
		if c.down[n] {
			down = append(down, n)
		}
	}
	c.mu.Unlock()
	for _, n := range down {
		start := time.Now()
		if err := c.start(n); err != nil {
			return err
		}
		logf("cluster: %s started again in %s", n.name, time.Since(start).Round(100*time.Millisecond))
	}
	return c.awaitRunning(2 * time.Minute)
}

// stop stops the nodes this run started (rabbitmqctl stop, then SIGKILL
// if one is still there) and removes their directory.
func (c *cluster) stop() {
	c.mu.Lock()
	var nodes []*clusterNode
	for _, n := range c.nodes {
		if c.started[n] {
			nodes = append(nodes, n)
		}
	}
	c.started = map[*clusterNode]bool{}
	c.mu.Unlock()
	var wg sync.WaitGroup
	for _, n := range nodes {
		wg.Add(1)
		go func() {
			defer wg.Done()
			c.stopNode(n)
		}()
	}
	wg.Wait()
	if c.dir != "" && os.Getenv("CHAOS_KEEP") == "" {
		_ = os.RemoveAll(c.dir)
	}
	if len(nodes) > 0 {
		logf("cluster: nodes stopped")
	}
}

func (c *cluster) stopNode(n *clusterNode) {
	pid, pidErr := n.pid()
	if pidErr != nil && !portOpen(n.amqpPort) {
		return // not running
	}
	if _, err := n.ctl(time.Minute, "stop"); err != nil {
		logf("cluster: rabbitmqctl -n %s stop: %v", n.name, err)
	}
	deadline := time.Now().Add(30 * time.Second)
	for pidErr == nil && processAlive(pid) && time.Now().Before(deadline) {
		time.Sleep(200 * time.Millisecond)
	}
	if pidErr == nil && processAlive(pid) {
		if _, err := n.pid(); err == nil { // still this node's process
			logf("cluster: %s did not stop; kill -9 %d", n.name, pid)
			_ = syscall.Kill(pid, syscall.SIGKILL)
		}
	}
}

// processAlive reports whether pid runs and is not a zombie.
func processAlive(pid int) bool {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return false
	}
	// The state follows the command name in parentheses.
	s := string(b)
	i := strings.LastIndex(s, ")")
	return i >= 0 && i+2 < len(s) && s[i+2] != 'Z'
}

// connection is one client connection of the cluster.
type connection struct {
	name string // the client-provided connection name
	node *clusterNode
}

// connections lists the cluster's client connections and the node each
// is on.
func (c *cluster) connections() ([]connection, error) {
	out, err := c.live().ctl(time.Minute, "list_connections", "port", "client_properties", "--formatter", "json")
	if err != nil {
		return nil, err
	}
	var rows []struct {
		Port  int     `json:"port"`
		Props [][]any `json:"client_properties"` // [name, type, value]
	}
	if err := json.Unmarshal([]byte(out), &rows); err != nil {
		return nil, fmt.Errorf("list_connections: %v", err)
	}
	var conns []connection
	for _, r := range rows {
		cn := connection{node: c.byPort(r.Port)}
		for _, p := range r.Props {
			if len(p) == 3 && p[0] == "connection_name" {
				cn.name, _ = p[2].(string)
			}
		}
		conns = append(conns, cn)
	}
	return conns, nil
}

// serverNode is the node a scenario's server is connected to (its
// aggregator's connection, which declares the topology). It waits up to
// a minute for that connection to be listed: right after a restart the
// server may be ready before the broker lists its connection, and on a
// loaded machine list_connections lags.
func (c *cluster) serverNode(r *runner) (*clusterNode, error) {
	want := "warren server (aggregator) " + r.prefix
	deadline := time.Now().Add(time.Minute)
	for {
		conns, err := c.connections()
		if err == nil {
			for _, cn := range conns {
				if cn.name == want && cn.node != nil {
					return cn.node, nil
				}
			}
			err = fmt.Errorf("no connection named %q in the cluster", want)
		}
		if time.Now().After(deadline) {
			return nil, fmt.Errorf("%v a minute after the scenario asked", err)
		}
		time.Sleep(500 * time.Millisecond)
	}
}

// workersOn counts the scenario's live workers whose task consumer is
// connected to node.
func (c *cluster) workersOn(r *runner, node *clusterNode) (on, of int, err error) {
	conns, err := c.connections()
	if err != nil {
		return 0, 0, err
	}
	for _, w := range r.workers {
		if w.exited() {
			continue
		}
		of++
		if consumerOn(conns, w, node) {
			on++
		}
	}
	return on, of, nil
}

// consumerOn reports whether worker w's consumer connection is among
// conns and on node (any node, when node is nil).
func consumerOn(conns []connection, w *proc, node *clusterNode) bool {
	suffix := fmt.Sprintf(":%d (consumer)", w.cmd.Process.Pid)
	for _, cn := range conns {
		if strings.HasPrefix(cn.name, "warren worker ") && strings.HasSuffix(cn.name, suffix) && (node == nil || cn.node == node) {
			return true
		}
	}
	return false
}

// awaitConsumer waits up to a minute until worker w's consumer
// connection is listed by the cluster.
func (c *cluster) awaitConsumer(w *proc) error {
	deadline := time.Now().Add(time.Minute)
	for {
		conns, err := c.connections()
		if err == nil && consumerOn(conns, w, nil) {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%s has no consumer connection a minute after its start (%v)", w.name, err)
		}
		time.Sleep(500 * time.Millisecond)
	}
}

// leader is the node that leads queue.
func (c *cluster) leader(queue string) (*clusterNode, error) {
	l, _, err := c.quorum(queue)
	return l, err
}

// quorum is the node that leads queue and the nodes it has members on.
func (c *cluster) quorum(queue string) (*clusterNode, []*clusterNode, error) {
	out, err := c.live().ctl(time.Minute, "list_queues", "name", "leader", "members", "--formatter", "json")
	if err != nil {
		return nil, nil, err
	}
	var rows []struct {
		Name   string `json:"name"`
		Leader string `json:"leader"`
		// A string on RabbitMQ 3.10 ("[r1@localhost,...]"), a list on
		// others: read as raw text and searched for each node's name.
		Members json.RawMessage `json:"members"`
	}
	if err := json.Unmarshal([]byte(out), &rows); err != nil {
		return nil, nil, fmt.Errorf("list_queues: %v", err)
	}
	for _, q := range rows {
		if q.Name != queue {
			continue
		}
		var members []*clusterNode
		for _, n := range c.nodes {
			if strings.Contains(string(q.Members), n.name) {
				members = append(members, n)
			}
		}
		if n := c.byName(q.Leader); n != nil {
			return n, members, nil
		}
		return nil, members, fmt.Errorf("queue %s has no leader among the cluster's nodes (%q)", queue, q.Leader)
	}
	return nil, nil, fmt.Errorf("no queue %s in the cluster", queue)
}

// moveLeaderOff makes another node lead queue: it removes node's replica
// (its leadership passes to another member) and adds it back, so the
// queue keeps its three members (with two, killing one loses the
// quorum). Under load a rabbitmq-queues call can outlast its bound while
// the change still happens, so each step is checked against the queue's
// actual state and retried, up to three times, from another live node.
func (c *cluster) moveLeaderOff(queue string, node *clusterNode) error {
	var others []*clusterNode
	for _, n := range c.nodes {
		if n != node {
			others = append(others, n)
		}
	}
	var errs []string
	for attempt := 0; attempt < 3; attempt++ {
		via := others[attempt%len(others)]
		leader, members, err := c.quorum(queue)
		if err != nil {
			errs = append(errs, err.Error())
			time.Sleep(2 * time.Second)
			continue
		}
		switch {
		case leader == node && slices.Contains(members, node):
			if _, err := via.queues(45*time.Second, "delete_member", queue, node.name); err != nil {
				errs = append(errs, err.Error())
			}
		case !slices.Contains(members, node):
			if _, err := via.queues(45*time.Second, "add_member", queue, node.name); err != nil {
				errs = append(errs, err.Error())
			}
		default:
			return nil // another node leads, and node is a member again
		}
		// The step may have taken effect even when its call failed: look
		// again at once rather than wait for the next attempt.
		if leader, members, err = c.quorum(queue); err == nil && leader != node && !slices.Contains(members, node) {
			if _, err := via.queues(45*time.Second, "add_member", queue, node.name); err != nil {
				errs = append(errs, err.Error())
			}
		}
		if leader, members, err = c.quorum(queue); err == nil && leader != node && slices.Contains(members, node) {
			return nil
		}
	}
	return fmt.Errorf("%s still leads %s or is not a member again after three tries: %s", node.name, queue, strings.Join(errs, "; "))
}

// depths lists the prefix's queues with their message counts.
func (c *cluster) depths(prefix string) string {
	out, err := c.live().ctl(30*time.Second, "list_queues", "name", "messages_ready", "messages_unacknowledged")
	if err != nil {
		return "    " + err.Error() + "\n"
	}
	var b strings.Builder
	for _, l := range strings.Split(out, "\n") {
		if strings.HasPrefix(l, prefix) {
			b.WriteString("    " + l + "\n")
		}
	}
	return b.String()
}

// clusterMain runs the cluster scenarios: it starts the cluster, runs
// each scenario on it, prints the table and stops the cluster, also on a
// failure, a panic or a signal.
func clusterMain() (code int) {
	n, timeout, only, err := settings(20000)
	if err != nil {
		logf("%v", err)
		return 2
	}
	c := newCluster()
	sigs := make(chan os.Signal, 1)
	signal.Notify(sigs, syscall.SIGINT, syscall.SIGTERM)
	go func() {
		s := <-sigs
		logf("%v: cleaning up", s)
		killAll()
		runScenarioCleanup()
		c.stop()
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
		runScenarioCleanup()
		c.stop()
		if d := getBinDir(); d != "" {
			_ = os.RemoveAll(d)
		}
	}()

	start := time.Now()
	if err := c.up(); err != nil {
		logf("cluster: %v", err)
		return 2
	}
	bin, err := buildWarren()
	if err != nil {
		logf("%v", err)
		return 2
	}
	tg := &target{
		amqpURL: c.urls(),
		env:     []string{"WARREN_QUORUM_REPLICAS=3"},
		restore: func(o *outcome) {
			if err := c.restoreDown(); err != nil {
				o.fail("cluster not back: %v", err)
			}
		},
		depths:  c.depths,
		cluster: c,
		// A short task_timeout lets the reconciler republish, within a
		// scenario, tasks whose messages the broker holds (the watchdog,
		// watchDeadLetterWorkers, releases the held retries of RabbitMQ
		// 3.10's dead-letter worker sooner: docs/operations.md, "Held
		// retries"). The -default-timeout scenario submits none.
		taskTimeout: 15,
		// Ten times the main suite's retries: more of them come due while
		// a node's queues elect their leaders.
		failEvery: 50,
	}
	stopWatchdog := make(chan struct{})
	go c.watchDeadLetterWorkers(stopWatchdog)
	results, baseline := runAll(bin, tg, clusterScenarios(), only, n, timeout, "cluster-baseline", ", 3 RabbitMQ nodes")
	close(stopWatchdog)
	ok := report("warren chaos suite, cluster target (3 RabbitMQ nodes, WARREN_QUORUM_REPLICAS=3)", results, n, baseline)
	fmt.Printf("\ncluster target: %s from starting the nodes to the last scenario\n", time.Since(start).Round(time.Second))
	if !ok {
		fmt.Println("\nchaos -cluster: FAILED")
		return 1
	}
	fmt.Println("\nchaos -cluster: all scenarios passed")
	return 0
}

// extraConf is CHAOS_RABBIT_CONF, lines added to every node's
// rabbitmq.conf (such as "log.file.level = debug" to see the dead-letter
// worker's rejections), with a final newline.
func extraConf() string {
	s := os.Getenv("CHAOS_RABBIT_CONF")
	if s == "" {
		return ""
	}
	return strings.ReplaceAll(s, `\n`, "\n") + "\n"
}

// nodeAdvancedConfig is every node's advanced.config: CHAOS_RABBIT_ADVANCED
// (an Erlang term), or "" for none.
func nodeAdvancedConfig() string { return os.Getenv("CHAOS_RABBIT_ADVANCED") }

// dlxWatchdogInterval is how often the cluster target runs the dead-letter
// worker watchdog on each node that is up, as deploy/rabbitmq's script
// does by default.
const dlxWatchdogInterval = 30 * time.Second

// watchDeadLetterWorkers runs deploy.DeadLetterWorkerRestart on every node
// that is up, every dlxWatchdogInterval, until stop is closed, as a
// deployment on RabbitMQ 3.10 runs deploy/rabbitmq/dlx-worker-restart.sh
// (docs/operations.md, "RabbitMQ cluster"): it restarts a dead-letter
// worker that holds retries for as long as a dead node stays down.
// CHAOS_DLX_WATCHDOG=0 turns it off, to see the held retries.
func (c *cluster) watchDeadLetterWorkers(stop <-chan struct{}) {
	if os.Getenv("CHAOS_DLX_WATCHDOG") == "0" {
		logf("cluster: dead-letter worker watchdog off (CHAOS_DLX_WATCHDOG=0)")
		return
	}
	t := time.NewTicker(dlxWatchdogInterval)
	defer t.Stop()
	for {
		select {
		case <-stop:
			return
		case <-t.C:
		}
		for _, n := range c.nodes {
			c.mu.Lock()
			down := c.down[n]
			c.mu.Unlock()
			if down {
				continue
			}
			out, err := n.ctl(20*time.Second, "eval", deploy.DeadLetterWorkerRestart)
			if err != nil {
				continue // the node may be going down; the next round sees
			}
			for _, q := range restartedQueues(out) {
				logf("cluster: dead-letter watchdog restarted the dead-letter worker of %s on %s", q, n.name)
				c.mu.Lock()
				c.restarted = append(c.restarted, q+" on "+n.name)
				c.mu.Unlock()
			}
		}
	}
}

// restartedQueues parses the watchdog's answer, an Erlang list of binaries
// such as [<<"a.q">>,<<"b.q">>], into the queue names.
func restartedQueues(out string) []string {
	var qs []string
	for _, part := range strings.Split(out, "<<\"")[1:] {
		if i := strings.Index(part, "\">>"); i >= 0 {
			qs = append(qs, part[:i])
		}
	}
	return qs
}

// takeRestarts returns the dead-letter workers the watchdog restarted since
// the last call.
func (c *cluster) takeRestarts() []string {
	c.mu.Lock()
	defer c.mu.Unlock()
	r := c.restarted
	c.restarted = nil
	return r
}
