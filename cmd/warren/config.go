package main

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/url"
	"os"
	"regexp"
	"strings"
	"time"

	"github.com/warrenhq/warren/internal/broker"
	"github.com/warrenhq/warren/internal/envconfig"
	"github.com/warrenhq/warren/server"
	"github.com/warrenhq/warren/store/open"
	"github.com/warrenhq/warren/worker"
)

// common are the settings every command shares, each a flag with an
// environment fallback.
type common struct {
	amqpURL     string
	databaseURL string
	prefix      string
	retryTiers  string
	// fs is the flag set the settings are registered in: it says where
	// each value came from.
	fs *flagSet
}

func (c *common) register(fs *flagSet, env *environment) {
	c.fs = fs
	fs.StringVar(&c.amqpURL, "amqp-url", broker.DefaultURL, amqpURLUsage)
	fs.StringVar(&c.databaseURL, "database", open.DefaultURL, "job store: sqlite://PATH or postgres://...")
	fs.envVar("database", "WARREN_DATABASE_URL")
	fs.secretFlags("amqp-url", "database")
	fs.StringVar(&c.prefix, "prefix", "", "prefix of every exchange and queue name")
	fs.StringVar(&c.retryTiers, "retry-tiers", "",
		"retry delay tiers, comma-separated increasing durations (default 1s,5s,30s,2m,10m); servers and workers must agree")
}

// amqpURLUsage is the help of every command's --amqp-url.
const amqpURLUsage = "RabbitMQ URL (amqp:// or amqps://), or the URLs of the nodes of one cluster separated by commas"

// checkAMQPURL checks every URL of --amqp-url; its error names the flag
// or variable the URL came from, and the URL by position, without its
// password.
func checkAMQPURL(fs *flagSet, raw string) error {
	if _, err := broker.ParseNodes(raw); err != nil {
		return usageErrorf("%s: %v", fs.from("amqp-url"), err)
	}
	return nil
}

// checkDatabaseURL checks --database's scheme; its error names the flag
// or variable the URL came from, and shows the scheme only.
func checkDatabaseURL(fs *flagSet, raw string) error {
	if strings.HasPrefix(raw, "sqlite://") || strings.HasPrefix(raw, "postgres://") || strings.HasPrefix(raw, "postgresql://") {
		return nil
	}
	scheme, _, ok := strings.Cut(raw, "://")
	if !ok || strings.ContainsAny(scheme, "@:/") {
		return usageErrorf("%s: not a URL (want sqlite://PATH or postgres://...)", fs.from("database"))
	}
	return usageErrorf("%s: unsupported scheme %q (want sqlite://PATH or postgres://...)", fs.from("database"), scheme)
}

// quorumReplicasUsage is the help of --quorum-replicas.
const quorumReplicasUsage = "replicas of each quorum queue when it is created (x-quorum-initial-group-size); 0 leaves it to RabbitMQ " +
	"(quorum_cluster_size, 3 by default); servers and workers must agree"

// tiers parses --retry-tiers; nil means the defaults. server.Config and
// worker.Config check the tiers' values.
func (c *common) tiers() ([]time.Duration, error) {
	out, err := envconfig.ParseDurations(c.retryTiers)
	if err != nil {
		return nil, usageErrorf("%s: %v", c.fs.from("retry-tiers"), err)
	}
	return out, nil
}

// settings returns the getenv of a package's ConfigFromLookup (worker,
// server) for fs: each variable's value is its flag's, once fs is parsed
// (the command line, the variable, the config file or the default, in that
// order), so that the command and ConfigFromEnv share one mapping of
// settings onto Config.
func (fs *flagSet) settings(vars map[string]string) func(name string) string {
	return func(name string) string {
		if f := fs.Lookup(vars[name]); f != nil {
			return f.Value.String()
		}
		return ""
	}
}

// settingError returns the first error of a ConfigFromLookup as a usage
// error that names where its value came from.
func (fs *flagSet) settingError(err error) error {
	if e, ok := errors.AsType[*envconfig.Error](err); ok {
		return usageErrorf("%s: %v", fs.from(e.Flag), e.Err)
	}
	return &usageError{msg: err.Error()}
}

// configField is how server.ConfigError and worker.ConfigError name a
// field in their message.
var configField = regexp.MustCompile(`Config\.[A-Z][A-Za-z]*`)

// configError returns err, an error of server.New or worker.New, as a
// usage error in which each Config field is named as the user set it:
// the flag, variable or config file line its value came from, or its flag
// when it was not set. fields maps a field onto its flag's name, or onto
// words for a field without a flag. Config checks every value; the
// command only puts its own names in.
func (fs *flagSet) configError(err error, fields map[string]string) error {
	var msg string
	var se *server.ConfigError
	var we *worker.ConfigError
	switch {
	case errors.As(err, &se):
		msg = se.Message
	case errors.As(err, &we):
		msg = we.Message
	default:
		return &usageError{msg: err.Error()}
	}
	msg = configField.ReplaceAllStringFunc(msg, func(m string) string {
		flag, ok := fields[strings.TrimPrefix(m, "Config.")]
		switch {
		case !ok:
			return m
		case fs.Lookup(flag) == nil:
			return flag
		default:
			return fs.from(flag)
		}
	})
	return &usageError{msg: msg}
}

func orDefault(v, def string) string {
	if v == "" {
		return def
	}
	return v
}

// parse parses args into fs (see flagSet.parseAll); a positional
// argument is an error.
func parse(fs *flagSet, args []string, env *environment) error {
	positional, err := fs.parseAll(args)
	if err != nil {
		return err
	}
	if len(positional) > 0 {
		fmt.Fprintf(env.stderr, "warren %s: unexpected argument %q (see \"warren %s --help\")\n", fs.Name(), strings.Join(positional, " "), fs.Name())
		return errUsage
	}
	return applyLogFlags(fs, env)
}

// parseWithID parses flags that may come before or after one positional
// job id, and returns the id.
func parseWithID(fs *flagSet, args []string, env *environment) (string, error) {
	fs.positional = "ID"
	positional, err := fs.parseAll(args)
	if err != nil {
		return "", err
	}
	if len(positional) != 1 {
		fmt.Fprintf(env.stderr, "warren %s: want exactly one job id, got %d arguments (usage: warren %s ID [flags])\n", fs.Name(), len(positional), fs.Name())
		return "", errUsage
	}
	return positional[0], applyLogFlags(fs, env)
}

// applyLogFlags sets env.logger from fs's --log-format and --log-level,
// once fs is parsed; a bad value is a usage error that names the flag or
// variable it came from.
func applyLogFlags(fs *flagSet, env *environment) error {
	level := fs.Lookup("log-level").Value.String()
	var lv slog.Level
	if err := lv.UnmarshalText([]byte(level)); err != nil {
		fmt.Fprintf(env.stderr, "warren %s: %s must be debug, info, warn or error, got %q\n", fs.Name(), fs.from("log-level"), level)
		return errUsage
	}
	logger, err := newLogger(fs, env, lv)
	if err != nil {
		return err
	}
	env.setLogger(logger)
	warnReadableFiles(fs, env)
	return nil
}

// newLogger returns a logger to env.stderr in fs's --log-format at level.
func newLogger(fs *flagSet, env *environment, level slog.Level) (*slog.Logger, error) {
	opts := &slog.HandlerOptions{Level: level}
	switch format := fs.Lookup("log-format").Value.String(); format {
	case "text":
		return slog.New(slog.NewTextHandler(env.stderr, opts)), nil
	case "json":
		return slog.New(slog.NewJSONHandler(env.stderr, opts)), nil
	default:
		fmt.Fprintf(env.stderr, "warren %s: %s must be text or json, got %q\n", fs.Name(), fs.from("log-format"), format)
		return nil, errUsage
	}
}

// quietLogger is the logger of commands whose own output is the point
// (bench, demo): env.logger when --log-level or WARREN_LOG_LEVEL chose a
// level, else warnings and errors only, in --log-format. fs is parsed.
func quietLogger(fs *flagSet, env *environment) *slog.Logger {
	if _, chosen := fs.source["log-level"]; chosen {
		return env.logger
	}
	if logger, err := newLogger(fs, env, slog.LevelWarn); err == nil {
		return logger
	}
	return env.logger
}

// redactDB hides a password in a database URL, in its user information
// or a password parameter, for logs and messages.
func redactDB(raw string) string {
	if strings.HasPrefix(raw, "sqlite://") {
		return raw
	}
	return redactURL(raw)
}

// redactURL returns raw without its password, in its user information or
// in a password (or sslpassword) query parameter; a URL that does not
// parse is not shown at all.
func redactURL(raw string) string {
	u, err := url.Parse(strings.TrimSpace(raw))
	if err != nil || u.Scheme == "" || u.Opaque != "" {
		return "(unparsable URL)"
	}
	if u.RawQuery != "" {
		q := u.Query()
		for k := range q {
			if strings.Contains(strings.ToLower(k), "password") || strings.EqualFold(k, "token") {
				q.Set(k, "xxxxx")
			}
		}
		u.RawQuery = q.Encode()
	}
	return u.Redacted()
}

// parseConfigLines reads a config file as ff.PlainParser does (one
// "name value" a line, a lone name meaning true, # comments, blank lines
// skipped), and gives set each setting with its line number, so that an
// error can name the line instead of showing it.
func parseConfigLines(r io.Reader, set func(line int, name, value string) error) error {
	s := bufio.NewScanner(r)
	for n := 1; s.Scan(); n++ {
		line := strings.TrimSpace(s.Text())
		if line == "" || line[0] == '#' {
			continue
		}
		name, value, ok := strings.Cut(line, " ")
		if !ok {
			value = "true"
		}
		value = strings.TrimSpace(value)
		if i := strings.Index(value, " #"); i >= 0 {
			value = strings.TrimSpace(value[:i])
		}
		if err := set(n, name, value); err != nil {
			return err
		}
	}
	return s.Err()
}

// warnReadableFiles logs a warning for each secret-bearing file fs was
// given (the config file, the TLS key) that users other than its owner
// and group may read: the file is not refused, since a deployment may
// mean it, but whoever can read it has the tokens, passwords or key.
func warnReadableFiles(fs *flagSet, env *environment) {
	for _, name := range []string{"config", "tls-key"} {
		f := fs.Lookup(name)
		if f == nil || f.Value.String() == "" {
			continue
		}
		info, err := os.Stat(f.Value.String())
		if err != nil || info.Mode().Perm()&0o004 == 0 {
			continue // a missing file is reported where it is read
		}
		env.logger.Warn(fmt.Sprintf("%s is readable by every user of this machine; make it readable by its owner only (chmod 600)", fs.from(name)),
			"file", f.Value.String(), "mode", info.Mode().Perm().String())
	}
}
