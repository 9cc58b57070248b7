package broker

import (
	"testing"

	"github.com/stretchr/testify/require"
)

// seq returns a random source that answers picks in turn.
func seq(picks ...int) func(int) int {
	return func(n int) int {
		p := picks[0]
		picks = picks[1:]
		if p >= n {
			panic("pick out of range")
		}
		return p
	}
}

func TestSplitListKeepsCommasInsideAURL(t *testing.T) {
	t.Parallel()
	for list, want := range map[string][]string{
		"amqp://a/":                           {"amqp://a/"},
		"amqp://a/,amqp://b/":                 {"amqp://a/", "amqp://b/"},
		" amqp://a/ , amqps://b/ ,amqp://c/ ": {"amqp://a/", "amqps://b/", "amqp://c/"},
		"amqp://u:pa,ss@a/,amqp://u:p,@b/":    {"amqp://u:pa,ss@a/", "amqp://u:p,@b/"},
		"amqp://a/,":                          {"amqp://a/,"},
		"amqp://a/,,amqp://b/":                {"amqp://a/,", "amqp://b/"},
		",amqp://a/":                          {"", "amqp://a/"},
		"":                                    {""},
	} {
		require.Equal(t, want, splitList(list), "%q", list)
	}
}

// A process starts at a random node and stays there; after a loss it
// moves to a random other node, and tries the nodes that failed last,
// the most recent failure at the very end.
func TestNodesOrderStartsAtRandomAndLeavesFailedNodesForLast(t *testing.T) {
	t.Parallel()
	n := newNodes([]string{"amqp://a/", "amqp://b/", "amqp://c/", "amqp://d/"}, seq(2, 0, 1, 0))
	require.Equal(t, []int{2, 3, 0, 1}, n.order(), "starts at the picked node, round the list")
	n.connected(3)
	require.Equal(t, []int{3, 0, 1, 2}, n.order(), "stays on the node it connected to")

	n.Failover() // d (3) lost; picks 0 of the 3 others: a
	require.Equal(t, []int{0, 1, 2, 3}, n.order())
	n.fail(0) // a refused the next Dial, b accepted
	n.connected(1)
	require.Equal(t, []int{1, 2, 3, 0}, n.order(), "d failed before a: a is tried last")

	n.Failover() // b (1) lost; picks 1 of the 3 others: d
	require.Equal(t, []int{2, 3, 0, 1}, n.order(), "c has not failed; then d, a and b, in the order they failed")
	n.connected(3) // d is back
	require.Equal(t, []int{3, 2, 0, 1}, n.order())

	n.Failover() // d (3) lost again; picks 0 of the 3 others: a
	require.Equal(t, []int{2, 0, 1, 3}, n.order())
}

func TestNodesFailoverNeverPicksTheLostNode(t *testing.T) {
	t.Parallel()
	for pick := range 2 {
		n := newNodes([]string{"amqp://a/", "amqp://b/", "amqp://c/"}, seq(1, pick))
		n.Failover()
		order := n.order()
		require.NotEqual(t, 1, order[0], "pick %d", pick)
		require.Equal(t, 1, order[2], "pick %d", pick)
	}
	one := newNodes([]string{"amqp://a/"}, seq(0))
	one.Failover()
	require.Equal(t, []int{0}, one.order(), "one node: nothing to fail over to")
}
