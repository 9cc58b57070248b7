package broker_test

import (
	"context"
	"errors"
	"testing"

	amqp "github.com/rabbitmq/amqp091-go"
	"github.com/stretchr/testify/require"

	"github.com/warrenhq/warren/internal/broker"
	"github.com/warrenhq/warren/internal/broker/amqptest"
)

func TestParseNodesChecksEveryURL(t *testing.T) {
	t.Parallel()
	n, err := broker.ParseNodes("amqp://guest:guest@127.0.0.1:5672/")
	require.NoError(t, err)
	require.Equal(t, 1, n.Len())
	n, err = broker.ParseNodes(" amqp://u:s3cret@rabbit-1:5672/prod , amqps://u:s3cret@rabbit-2/prod,amqp://u:pa,ss@rabbit-3/prod")
	require.NoError(t, err)
	require.Equal(t, 3, n.Len())
	require.Equal(t, "amqp://u:xxxxx@rabbit-1:5672/prod,amqps://u:xxxxx@rabbit-2/prod,amqp://u:xxxxx@rabbit-3/prod", n.String())

	for list, want := range map[string]string{
		"":                                        "no RabbitMQ URL given",
		"http://u:s3cret@a/":                      "the URL, http://u:xxxxx@a/, is not an AMQP URL: AMQP scheme must be either 'amqp://' or 'amqps://'",
		"amqp://u:s3cret@a/,http://u:s3cret@b":    "URL 2 of 2, http://u:xxxxx@b, is not an AMQP URL",
		"amqp://u:s3cret@a:bad/,amqp://b/":        "URL 1 of 2, (unparsable URL), is not an AMQP URL",
		"amqp://u:s3cret@a/,":                     "the URL, amqp://u:xxxxx@a/, ends with a comma",
		"amqp://u:s3cret@a/,,amqp://b/":           "URL 1 of 2, amqp://u:xxxxx@a/, ends with a comma",
		",amqp://u:s3cret@a/":                     "URL 1 of 2 is empty",
		"amqp://u:s3cret@a,b/":                    "the URL, amqp://u:xxxxx@a,b/, has a comma in its host: give each node a whole URL",
		"amqp://u:s3cret@a/x,amqp://u:s3cret@b/y": `URL 2 of 2, amqp://u:xxxxx@b/y, names the virtual host "y" but URL 1 names "x"`,
		"amqp://u:s3cret@a/,amqp://u:s3cret@b/x":  `URL 2 of 2, amqp://u:xxxxx@b/x, names the virtual host "x" but URL 1 names "/"`,
	} {
		_, err := broker.ParseNodes(list)
		require.ErrorContains(t, err, want, "%q", list)
		require.NotContains(t, err.Error(), "s3cret", "%q", list)
		require.NotContains(t, err.Error(), "\n", "%q", list)
	}
}

func TestRedactHidesEveryPasswordOfAList(t *testing.T) {
	t.Parallel()
	for raw, want := range map[string]string{
		"amqp://guest:s3cret@127.0.0.1:5672/":                  "amqp://guest:xxxxx@127.0.0.1:5672/",
		"amqp://a:s3cret@h1/,amqp://b:s3cret@h2/, amqps://h3/": "amqp://a:xxxxx@h1/,amqp://b:xxxxx@h2/,amqps://h3/",
		"amqp://a:s3c,ret@h1/,amqp://b:s3cret,@h2/":            "amqp://a:xxxxx@h1/,amqp://b:xxxxx@h2/",
		"postgres://u:s3cret@db:5432/test?options=-c%20a=1,2":  "postgres://u:xxxxx@db:5432/test?options=-c%20a=1,2",
		"u:s3cret@h1,amqp://b:s3cret@h2/":                      "(unparsable URL),amqp://b:xxxxx@h2/",
		"amqp://a:s3cret@h1:bad/,amqp://b:s3cret@h2/":          "(unparsable URL),amqp://b:xxxxx@h2/",
		"amqp://user,name:s3cret@h1/":                          "amqp://user,name:xxxxx@h1/",
		"not a url":                                            "(unparsable URL)",
	} {
		require.Equal(t, want, broker.Redact(raw), "%q", raw)
	}
}

// A list whose first node is down connects to the next, whichever node
// it starts at; a list of dead nodes is one line naming each.
func TestDialSkipsADeadNode(t *testing.T) {
	t.Parallel()
	list := "amqp://guest:s3cret@127.0.0.1:1/," + amqptest.URL()
	for range 4 { // it starts at a random node: both orders come up
		conn, err := broker.Dial(context.Background(), list, "warren-test "+t.Name())
		require.NoError(t, err)
		require.False(t, conn.IsClosed())
		require.NoError(t, conn.Close())
	}

	nodes, err := broker.ParseNodes(list)
	require.NoError(t, err)
	for range 4 {
		conn, err := nodes.Dial(context.Background(), "warren-test "+t.Name())
		require.NoError(t, err)
		require.NoError(t, conn.Close())
		nodes.Failover() // the live node was "lost": the dead one is tried first, then it
	}

	_, err = broker.Dial(context.Background(), "amqp://guest:s3cret@127.0.0.1:1/,amqp://guest:s3cret@127.0.0.1:2/", "x")
	require.ErrorContains(t, err, "cannot connect to RabbitMQ at any of its 2 nodes: ")
	require.ErrorContains(t, err, "amqp://guest:xxxxx@127.0.0.1:1/: dial tcp 127.0.0.1:1: connect: connection refused")
	require.ErrorContains(t, err, "amqp://guest:xxxxx@127.0.0.1:2/: dial tcp 127.0.0.1:2: connect: connection refused")
	require.NotContains(t, err.Error(), "s3cret")
	require.NotContains(t, err.Error(), "\n")

	_, err = broker.Dial(context.Background(), "amqp://guest:s3cret@127.0.0.1:1/,http://x/", "x")
	require.ErrorContains(t, err, "cannot connect to RabbitMQ: URL 2 of 2, http://x/, is not an AMQP URL")
}

// An AMQP refusal on one node stays visible to errors.As through the
// error of a failed Dial.
func TestDialErrorKeepsTheBrokersRefusal(t *testing.T) {
	t.Parallel()
	uri, err := amqp.ParseURI(amqptest.URL())
	require.NoError(t, err)
	uri.Username, uri.Password = "nobody", "wrong"
	u := uri.String()
	_, err = broker.Dial(context.Background(), "amqp://127.0.0.1:1/,"+u, "x")
	require.Error(t, err)
	var ae *amqp.Error
	require.True(t, errors.As(err, &ae), "%v", err)
	require.Equal(t, amqp.AccessRefused, ae.Code)
	require.NotContains(t, err.Error(), "wrong")
}
