package main

import (
	"errors"
	"flag"
	"fmt"
	"log/slog"
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
	return applyLogFlags(fs, env)
}

// newFlagSet returns a command's flag set with the flags every command
// has: --log-format and --log-level.
func newFlagSet(name, summary string, env *environment) *flag.FlagSet {
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	fs.Usage = func() {
		fmt.Fprintf(fs.Output(), "Usage: warren %s [flags]\n\n%s\n\nFlags:\n", name, summary)
		fs.PrintDefaults()
	}
	fs.String("log-format", orDefault(env.getenv("WARREN_LOG_FORMAT"), "text"), "log lines as text (key=value) or json (env WARREN_LOG_FORMAT)")
	fs.String("log-level", orDefault(env.getenv("WARREN_LOG_LEVEL"), "info"), "the least level logged: debug, info, warn or error (env WARREN_LOG_LEVEL)")
	return fs
}

// applyLogFlags sets env.logger from fs's --log-format and --log-level,
// once fs is parsed; a bad value is a usage error that names the flag.
func applyLogFlags(fs *flag.FlagSet, env *environment) error {
	level := fs.Lookup("log-level").Value.String()
	var lv slog.Level
	if err := lv.UnmarshalText([]byte(level)); err != nil {
		fmt.Fprintf(env.stderr, "warren %s: --log-level must be debug, info, warn or error, got %q\n", fs.Name(), level)
		return errUsage
	}
	logger, err := newLogger(fs, env, lv)
	if err != nil {
		return err
	}
	env.setLogger(logger)
	return nil
}

// newLogger returns a logger to env.stderr in fs's --log-format at level.
func newLogger(fs *flag.FlagSet, env *environment, level slog.Level) (*slog.Logger, error) {
	opts := &slog.HandlerOptions{Level: level}
	switch format := fs.Lookup("log-format").Value.String(); format {
	case "text":
		return slog.New(slog.NewTextHandler(env.stderr, opts)), nil
	case "json":
		return slog.New(slog.NewJSONHandler(env.stderr, opts)), nil
	default:
		fmt.Fprintf(env.stderr, "warren %s: --log-format must be text or json, got %q\n", fs.Name(), format)
		return nil, errUsage
	}
}

// quietLogger is the logger of commands whose own output is the point
// (bench, demo): env.logger when --log-level or WARREN_LOG_LEVEL chose a
// level, else warnings and errors only, in --log-format. fs is parsed.
func quietLogger(fs *flag.FlagSet, env *environment) *slog.Logger {
	chosen := env.getenv("WARREN_LOG_LEVEL") != ""
	fs.Visit(func(f *flag.Flag) { chosen = chosen || f.Name == "log-level" })
	if chosen {
		return env.logger
	}
	if logger, err := newLogger(fs, env, slog.LevelWarn); err == nil {
		return logger
	}
	return env.logger
}

// redactDB hides a password in a database URL for logs.
func redactDB(raw string) string {
	if strings.HasPrefix(raw, "sqlite://") {
		return raw
	}
	return broker.Redact(raw)
}
