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
// moves to a random other node and tries the lost one last.
func TestNodesOrderStartsAtRandomAndLeavesTheLostNodeForLast(t *testing.T) {
	t.Parallel()
	n := newNodes([]string{"amqp://a/", "amqp://b/", "amqp://c/", "amqp://d/"}, seq(2, 0, 2))
	require.Equal(t, []int{2, 3, 0, 1}, n.order(), "starts at the picked node, round the list")
	n.connected(3)
	require.Equal(t, []int{3, 0, 1, 2}, n.order(), "stays on the node it connected to")

	n.Failover() // lost d (3); picks 0 of the 3 others: a
	require.Equal(t, []int{0, 1, 2, 3}, n.order())
	n.connected(1)
	n.Failover() // lost b (1); picks 2 of the 3 others: a
	require.Equal(t, []int{0, 2, 3, 1}, n.order(), "the lost node comes last")
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
