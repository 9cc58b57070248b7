package main

import (
	"errors"
	"flag"
	"fmt"
	"strings"
	"time"

	"github.com/warrenhq/warren/internal/broker"
	"github.com/warrenhq/warren/store/open"
)

// common are the settings every command shares, each a flag with an
// environment fallback.
type common struct {
	amqpURL     string
	databaseURL string
	prefix      string
	retryTiers  string
	// envErr is the first environment variable whose value does not
	// parse; the command reports it.
	envErr error
}

func (c *common) register(fs *flag.FlagSet, env *environment) {
	fs.StringVar(&c.amqpURL, "amqp-url", orDefault(env.getenv("WARREN_AMQP_URL"), broker.DefaultURL), amqpURLUsage)
	fs.StringVar(&c.databaseURL, "database", orDefault(env.getenv("WARREN_DATABASE_URL"), open.DefaultURL), "job store: sqlite://PATH or postgres://... (env WARREN_DATABASE_URL)")
	fs.StringVar(&c.prefix, "prefix", env.getenv("WARREN_PREFIX"), "prefix of every exchange and queue name (env WARREN_PREFIX)")
	fs.StringVar(&c.retryTiers, "retry-tiers", env.getenv("WARREN_RETRY_TIERS"),
		"retry delay tiers, comma-separated durations (env WARREN_RETRY_TIERS; default 1s,5s,30s,2m,10m); servers and workers must agree")
}

// amqpURLUsage is the help of every command's --amqp-url.
const amqpURLUsage = "RabbitMQ URL, or the URLs of the nodes of one cluster separated by commas (env WARREN_AMQP_URL)"

// checkAMQPURL checks every URL of --amqp-url; its error names the flag,
// and the URL by position, without its password.
func checkAMQPURL(raw string) error {
	if _, err := broker.ParseNodes(raw); err != nil {
		return fmt.Errorf("--amqp-url (env WARREN_AMQP_URL): %v", err)
	}
	return nil
}

// quorumReplicasUsage is the help of --quorum-replicas.
const quorumReplicasUsage = "replicas of each quorum queue when it is created (x-quorum-initial-group-size); 0 leaves it to RabbitMQ " +
	"(quorum_cluster_size, 3 by default); servers and workers must agree (env WARREN_QUORUM_REPLICAS)"

// tiers parses --retry-tiers; nil means the defaults.
func (c *common) tiers() ([]time.Duration, error) {
	if strings.TrimSpace(c.retryTiers) == "" {
		return nil, nil
	}
	var out []time.Duration
	for _, part := range strings.Split(c.retryTiers, ",") {
		d, err := time.ParseDuration(strings.TrimSpace(part))
		if err != nil {
			return nil, fmt.Errorf("--retry-tiers: %q is not a duration (like 500ms, 5s, 2m)", strings.TrimSpace(part))
		}
		out = append(out, d)
	}
	if err := broker.CheckRetryTiers(out); err != nil {
		return nil, fmt.Errorf("--retry-tiers: %v", err)
	}
	return out, nil
}

func orDefault(v, def string) string {
	if v == "" {
		return def
	}
	return v
}

// parse parses args into fs, which prints its own usage on errors; a
// stray positional argument is an error too.
func parse(fs *flag.FlagSet, args []string, env *environment) error {
	fs.SetOutput(env.stderr)
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return err
		}
		return errUsage
	}
	if fs.NArg() > 0 {
		fmt.Fprintf(env.stderr, "warren %s: unexpected argument %q\n", fs.Name(), strings.Join(fs.Args(), " "))
		return errUsage
	}
	return nil
}

func newFlagSet(name, summary string, env *environment) *flag.FlagSet {
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	fs.Usage = func() {
		fmt.Fprintf(fs.Output(), "Usage: warren %s [flags]\n\n%s\n\nFlags:\n", name, summary)
		fs.PrintDefaults()
	}
	return fs
}

// redactDB hides a password in a database URL for logs.
func redactDB(raw string) string {
	if strings.HasPrefix(raw, "sqlite://") {
		return raw
	}
	return broker.Redact(raw)
}
