package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/warrenhq/warren/internal/broker"
	"github.com/warrenhq/warren/protocol"
)

// modulePath is the module whose ./cmd/warren is built.
const modulePath = "github.com/warrenhq/warren"

// buildWarren builds ./cmd/warren of the module the working directory is
// in into bin.
func buildWarren(ctx context.Context, bin string) error {
	out, err := exec.CommandContext(ctx, "go", "env", "GOMOD").Output()
	if err != nil {
		return fmt.Errorf("go env GOMOD: %w (or pass --warren PATH)", err)
	}
	gomod := strings.TrimSpace(string(out))
	if gomod == "" || gomod == os.DevNull {
		return errors.New("not inside the warren module: run from its directory, or pass --warren PATH")
	}
	if mod, err := os.ReadFile(gomod); err != nil || !bytes.Contains(mod, []byte("module "+modulePath+"\n")) {
		return fmt.Errorf("%s is not the module %s: run from warren's directory, or pass --warren PATH", gomod, modulePath)
	}
	build := exec.CommandContext(ctx, "go", "build", "-o", bin, "./cmd/warren")
	build.Dir = filepath.Dir(gomod)
	if out, err := build.CombinedOutput(); err != nil {
		return fmt.Errorf("go build ./cmd/warren: %w\n%s", err, out)
	}
	return nil
}

// freshSchema creates the schema named schema in the PostgreSQL database
// at rawURL and returns a URL whose search_path is that schema, so the
// run starts from an empty store, and the function that drops it again.
func freshSchema(ctx context.Context, rawURL, schema string) (string, func(context.Context) error, error) {
	u, err := url.Parse(rawURL)
	if err != nil {
		return "", nil, fmt.Errorf("--database: %w", err)
	}
	ident := pgx.Identifier{schema}.Sanitize()
	if err := pgExec(ctx, rawURL, "CREATE SCHEMA "+ident); err != nil {
		return "", nil, err
	}
	q := u.Query()
	q.Set("search_path", schema)
	u.RawQuery = q.Encode()
	drop := func(ctx context.Context) error { return pgExec(ctx, rawURL, "DROP SCHEMA IF EXISTS "+ident+" CASCADE") }
	return u.String(), drop, nil
}

// pgExec runs one statement on its own connection to the database at dsn.
func pgExec(ctx context.Context, dsn, sql string) error {
	conn, err := pgx.Connect(ctx, dsn)
	if err != nil {
		return fmt.Errorf("connect to %s: %w", redact(dsn), err)
	}
	defer func() { _ = conn.Close(context.Background()) }()
	if _, err := conn.Exec(ctx, sql); err != nil {
		return fmt.Errorf("%s: %w", sql, err)
	}
	return nil
}

// freeAddr returns a loopback address with a port nobody listens on now.
func freeAddr() (string, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", err
	}
	defer l.Close()
	return l.Addr().String(), nil
}

// waitReady waits until the server at apiURL answers /readyz with 200.
func waitReady(ctx context.Context, apiURL string, timeout time.Duration, exits <-chan *proc) error {
	hc := &http.Client{Timeout: 2 * time.Second}
	deadline := time.Now().Add(timeout)
	last := "no answer"
	for {
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, apiURL+"/readyz", nil)
		if err != nil {
			return err
		}
		if resp, err := hc.Do(req); err == nil {
			_ = resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return nil
			}
			last = resp.Status
		} else {
			last = err.Error()
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("the server is not ready after %s (last: %s)", timeout, last)
		}
		if err := pause(ctx, 100*time.Millisecond, exits); err != nil {
			return err
		}
	}
}

// waitConsumers waits until the task queue of names has at least n
// consumers: every worker is then ready to take tasks.
func waitConsumers(ctx context.Context, amqpURL string, names protocol.Names, n int, timeout time.Duration, exits <-chan *proc) error {
	conn, err := broker.Dial(ctx, amqpURL, "warren scale (probe) "+names.Prefix)
	if err != nil {
		return err
	}
	defer conn.Close()
	deadline := time.Now().Add(timeout)
	for {
		ch, err := conn.Channel()
		if err != nil {
			return err
		}
		// A failed passive declare closes the channel, so each try has
		// its own.
		q, err := ch.QueueDeclarePassive(names.TasksQueue, true, false, false, false, nil)
		_ = ch.Close()
		if err == nil && q.Consumers >= n {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%d of %d workers consume %s after %s (last error: %v)", q.Consumers, n, names.TasksQueue, timeout, err)
		}
		if err := pause(ctx, 100*time.Millisecond, exits); err != nil {
			return err
		}
	}
}

// pause waits d, failing early when ctx ends or a process exits.
func pause(ctx context.Context, d time.Duration, exits <-chan *proc) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return context.Cause(ctx)
	case p := <-exits:
		return p.exitedError()
	case <-t.C:
		return nil
	}
}

// deleteTopology deletes the run's exchanges and queues, with the retry
// queues of the default tiers (the children get no --retry-tiers).
func deleteTopology(ctx context.Context, amqpURL string, names protocol.Names) error {
	conn, err := broker.Dial(ctx, amqpURL, "warren scale (cleanup) "+names.Prefix)
	if err != nil {
		return err
	}
	defer conn.Close()
	return broker.DeleteTopology(conn, names, protocol.DefaultRetryTiers...)
}

// specHead is the first line of the NDJSON job spec.
type specHead struct {
	Type      string `json:"type"`
	Reduce    string `json:"reduce"`
	BatchSize int    `json:"batch_size,omitempty"`
}

// writeSpec writes the NDJSON job spec of tasks echo tasks to path: the
// job on the first line (no reducer: the measurement is the pipeline, not
// reducing a million results), then {"i":N} for N = 1..tasks. It returns
// the file's size.
func writeSpec(path string, tasks, batchSize int) (int64, error) {
	fh, err := os.Create(path)
	if err != nil {
		return 0, err
	}
	defer fh.Close()
	head := specHead{Type: "echo", Reduce: "none"}
	if batchSize > 0 {
		head.BatchSize = batchSize
	}
	line, err := json.Marshal(head)
	if err != nil {
		return 0, err
	}
	w := bufio.NewWriterSize(fh, 1<<20)
	_, _ = w.Write(append(line, '\n'))
	buf := make([]byte, 0, 32)
	for i := 1; i <= tasks; i++ {
		buf = append(strconv.AppendInt(append(buf[:0], `{"i":`...), int64(i), 10), "}\n"...)
		_, _ = w.Write(buf)
	}
	if err := w.Flush(); err != nil {
		return 0, err
	}
	st, err := fh.Stat()
	if err != nil {
		return 0, err
	}
	return st.Size(), fh.Close()
}

// redact hides a password in a database URL.
func redact(raw string) string {
	if strings.HasPrefix(raw, "sqlite://") {
		return raw
	}
	return broker.Redact(raw)
}
