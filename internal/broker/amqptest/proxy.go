package amqptest

import (
	"io"
	"net"
	"strconv"
	"sync"
	"testing"

	amqp "github.com/rabbitmq/amqp091-go"
)

// Node is a TCP proxy in front of the test broker: one node of a pretend
// cluster, with its own address, that a test can kill the way a node
// crashes (its port closes, its connections drop) while the broker behind
// it serves the other nodes on. It is closed when the test ends.
type Node struct {
	ln     net.Listener
	url    string
	target string

	mu    sync.Mutex
	dead  bool
	hung  bool
	conns map[net.Conn]bool // both ends of every proxied connection
	open  int               // client connections proxied and still open
	wg    sync.WaitGroup
}

// NewNode starts a proxy to the test broker on a free loopback port.
func NewNode(t testing.TB) *Node {
	t.Helper()
	uri, err := amqp.ParseURI(URL())
	if err != nil {
		t.Fatal(err)
	}
	target := net.JoinHostPort(uri.Host, strconv.Itoa(uri.Port))
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	uri.Host = "127.0.0.1"
	uri.Port = ln.Addr().(*net.TCPAddr).Port
	n := &Node{ln: ln, url: uri.String(), target: target, conns: map[net.Conn]bool{}}
	n.wg.Add(1)
	go n.accept()
	t.Cleanup(n.Kill)
	return n
}

// URL is the node's AMQP URL: the test broker's, at the node's address.
func (n *Node) URL() string { return n.url }

// Addr is the node's address, host:port.
func (n *Node) Addr() string { return n.ln.Addr().String() }

// Connections is the number of client connections open through the node.
func (n *Node) Connections() int {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.open
}

// Hang makes the node a black hole: every connection through it is cut,
// and new ones are accepted but never answered, as when a node's host
// drops off the network: a client that tries it waits for its own
// timeout.
func (n *Node) Hang() {
	n.mu.Lock()
	defer n.mu.Unlock()
	n.hung = true
	for c := range n.conns {
		_ = c.Close()
	}
}

// Kill stops the node for good: its port refuses connections from now on
// and every connection through it is cut at once, as when a node's
// process is killed. It returns once the proxy's goroutines have ended.
func (n *Node) Kill() {
	n.mu.Lock()
	n.dead = true
	for c := range n.conns {
		_ = c.Close()
	}
	n.mu.Unlock()
	_ = n.ln.Close()
	n.wg.Wait()
}

func (n *Node) accept() {
	defer n.wg.Done()
	for {
		client, err := n.ln.Accept()
		if err != nil {
			return // killed
		}
		if n.holdIfHung(client) {
			continue
		}
		server, err := net.Dial("tcp", n.target)
		if err != nil {
			_ = client.Close()
			continue
		}
		if !n.track(client, server) {
			return
		}
		n.wg.Add(2)
		go n.pipe(client, server, true)
		go n.pipe(server, client, false)
	}
}

// holdIfHung keeps client open and unanswered, until Kill, when the node
// hangs.
func (n *Node) holdIfHung(client net.Conn) bool {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.hung {
		n.conns[client] = true
	}
	return n.hung
}

// track records a proxied connection, or closes it when the node was
// killed meanwhile.
func (n *Node) track(client, server net.Conn) bool {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.dead {
		_ = client.Close()
		_ = server.Close()
		return false
	}
	n.conns[client], n.conns[server] = true, true
	n.open++
	return true
}

// pipe copies from src to dst until either end closes, then closes both;
// the client-to-broker half counts the connection closed.
func (n *Node) pipe(src, dst net.Conn, clientSide bool) {
	defer n.wg.Done()
	_, _ = io.Copy(dst, src) // a cut connection is how a pipe ends
	_ = src.Close()
	_ = dst.Close()
	n.mu.Lock()
	defer n.mu.Unlock()
	delete(n.conns, src)
	delete(n.conns, dst)
	if clientSide {
		n.open--
	}
}
