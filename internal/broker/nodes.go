package broker

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"net/url"
	"regexp"
	"slices"
	"strings"
	"sync"

	amqp "github.com/rabbitmq/amqp091-go"
)

// Nodes is the RabbitMQ nodes one process connects to: the URLs of the
// nodes of one cluster (or the one URL of a single broker), checked by
// ParseNodes. A process keeps one Nodes for its whole life, so that its
// connections follow one order:
//
//   - It starts at a node picked at random, so that the processes of an
//     installation spread over the cluster without a load balancer, and
//     stays on it while it answers: Dial tries the node it last
//     connected to first, so a process's connections share one node.
//   - Dial tries every node once, each within DialTimeout, until one
//     accepts: first the nodes that have not failed this process, round
//     the list from that node, then those that have, the one that failed
//     longest ago first.
//   - After a lost connection, or a set-up that failed on its node, the
//     process calls Failover: that node counts as failed, and the next
//     Dial starts at another node picked at random. A dead node's
//     clients spread over the survivors instead of all landing on its
//     neighbour, and none tries it, or any node that failed it, before
//     the others: a dead node that lets connections time out costs
//     DialTimeout only once it is the last hope.
//
// A node that accepts a connection no longer counts as failed. A Nodes
// is safe for concurrent use.
type Nodes struct {
	urls []string
	rand func(n int) int // in [0, n)

	mu     sync.Mutex
	cur    int      // the node Dial tries first, unless it failed
	failed []uint64 // per node: when it last failed, in failures counted (0: it has not)
	fails  uint64   // failures counted
}

// schemeStart matches the start of a URL: a scheme and "://".
var schemeStart = regexp.MustCompile(`^[A-Za-z][A-Za-z0-9+.-]*://`)

// splitList cuts a comma-separated list of URLs into its URLs, trimmed.
// A comma not followed by a scheme and "://" (one in a password, say)
// stays in its URL; so does a doubled or trailing comma, which
// ParseNodes refuses.
func splitList(list string) []string {
	var out []string
	for i, piece := range strings.Split(list, ",") {
		if i > 0 && !schemeStart.MatchString(strings.TrimSpace(piece)) {
			out[len(out)-1] += "," + piece
			continue
		}
		out = append(out, piece)
	}
	for i := range out {
		out[i] = strings.TrimSpace(out[i])
	}
	return out
}

// ParseNodes parses a comma-separated list of AMQP URLs, one per node of
// one RabbitMQ cluster, such as
// "amqp://u:p@rabbit-1:5672/,amqp://u:p@rabbit-2:5672/"; one URL is a list
// of one. Every URL is checked before any is used: each must be an
// amqp:// or amqps:// URL of its own (a comma inside a URL, in a
// password, stays part of it), and all must name the same virtual host,
// since they are meant to reach the same queues. Its errors name the URL
// that is wrong, by position and with its password redacted.
func ParseNodes(list string) (*Nodes, error) {
	urls := splitList(list)
	if len(urls) == 1 && urls[0] == "" {
		return nil, errors.New("no RabbitMQ URL given")
	}
	vhost := ""
	for i, u := range urls {
		which := fmt.Sprintf("URL %d of %d", i+1, len(urls))
		if len(urls) == 1 {
			which = "the URL"
		}
		switch {
		case u == "":
			return nil, fmt.Errorf("%s is empty: URLs are separated by single commas", which)
		case strings.HasSuffix(u, ","):
			return nil, fmt.Errorf("%s, %s, ends with a comma: URLs are separated by single commas", which, Redact(strings.TrimRight(u, ", ")))
		}
		uri, err := amqp.ParseURI(u)
		if err != nil {
			// A *url.Error quotes the whole URL, password included.
			var ue *url.Error
			if errors.As(err, &ue) {
				err = ue.Err
			}
			return nil, fmt.Errorf("%s, %s, is not an AMQP URL: %v", which, Redact(u), err)
		}
		if strings.Contains(uri.Host, ",") {
			return nil, fmt.Errorf("%s, %s, has a comma in its host: give each node a whole URL, such as amqp://host-1/,amqp://host-2/", which, Redact(u))
		}
		if i == 0 {
			vhost = uri.Vhost
		} else if uri.Vhost != vhost {
			return nil, fmt.Errorf("%s, %s, names the virtual host %q but URL 1 names %q: every node of the list must serve the same virtual host",
				which, Redact(u), uri.Vhost, vhost)
		}
	}
	return newNodes(urls, rand.IntN), nil
}

// newNodes returns the nodes of urls, starting at a node picked by
// random (which returns a number in [0, n)).
func newNodes(urls []string, random func(n int) int) *Nodes {
	return &Nodes{urls: urls, rand: random, cur: random(len(urls)), failed: make([]uint64, len(urls))}
}

// Len is the number of nodes.
func (n *Nodes) Len() int { return len(n.urls) }

// String is the list with every password redacted, for logs.
func (n *Nodes) String() string { return Redact(strings.Join(n.urls, ",")) }

// Dial opens an AMQP connection named name (shown in the management UI)
// to the first node that accepts one, in the order the type's comment
// gives; each node gets DialTimeout for its TCP connect and handshake,
// and ctx bounds the whole. Its error is one line that names each node
// tried, without passwords, and why it failed.
func (n *Nodes) Dial(ctx context.Context, name string) (*amqp.Connection, error) {
	order := n.order()
	var errs []error
	for _, i := range order {
		conn, err := dialNode(ctx, n.urls[i], name)
		if err == nil {
			n.connected(i)
			return conn, nil
		}
		n.fail(i)
		errs = append(errs, err)
		if ctx.Err() != nil {
			break
		}
	}
	tried := make([]string, len(errs))
	for k := range errs {
		tried[k] = Redact(n.urls[order[k]])
	}
	return nil, &dialError{nodes: tried, errs: errs, total: len(n.urls)}
}

// Failover tells n that the connection to the node it last connected to
// was lost, or that the process could not set up on it: that node counts
// as failed, and the next Dial starts at another node, picked at random.
// With one node it does nothing.
func (n *Nodes) Failover() {
	if len(n.urls) < 2 {
		return
	}
	n.mu.Lock()
	defer n.mu.Unlock()
	n.failLocked(n.cur)
	n.cur = (n.cur + 1 + n.rand(len(n.urls)-1)) % len(n.urls)
}

// order is the sequence in which Dial tries the nodes: those that have
// not failed round the list from the current one, then those that have,
// the one that failed longest ago first.
func (n *Nodes) order() []int {
	n.mu.Lock()
	defer n.mu.Unlock()
	out := make([]int, len(n.urls))
	for k := range out {
		out[k] = (n.cur + k) % len(n.urls)
	}
	slices.SortStableFunc(out, func(a, b int) int { return cmp.Compare(n.failed[a], n.failed[b]) })
	return out
}

// connected makes node i, which accepted a connection, the one Dial
// tries first.
func (n *Nodes) connected(i int) {
	n.mu.Lock()
	defer n.mu.Unlock()
	n.cur, n.failed[i] = i, 0
}

// fail counts node i as failed now.
func (n *Nodes) fail(i int) {
	n.mu.Lock()
	defer n.mu.Unlock()
	n.failLocked(i)
}

func (n *Nodes) failLocked(i int) {
	n.fails++
	n.failed[i] = n.fails
}

// dialError is a failed Dial: why each node it tried failed.
type dialError struct {
	nodes []string // redacted
	errs  []error
	total int
}

func (e *dialError) Error() string {
	if e.total == 1 {
		return oneLine(fmt.Sprintf("cannot connect to RabbitMQ at %s: %v", e.nodes[0], e.errs[0]))
	}
	parts := make([]string, len(e.errs))
	for i, err := range e.errs {
		parts[i] = fmt.Sprintf("%s: %v", e.nodes[i], err)
	}
	what := fmt.Sprintf("at any of its %d nodes", e.total)
	if len(e.errs) < e.total {
		what = fmt.Sprintf("(%d of its %d nodes tried before the deadline)", len(e.errs), e.total)
	}
	return oneLine(fmt.Sprintf("cannot connect to RabbitMQ %s: %s", what, strings.Join(parts, "; ")))
}

// Unwrap gives each node's error, so that errors.As finds an AMQP
// refusal among them.
func (e *dialError) Unwrap() []error { return e.errs }

func oneLine(s string) string { return strings.ReplaceAll(s, "\n", " ") }
