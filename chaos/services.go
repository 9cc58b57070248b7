package main

import (
	"context"
	"fmt"
	"os"
	"regexp"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/warrenhq/warren/internal/broker"
	"github.com/warrenhq/warren/protocol"
)

func amqpURL() string {
	if u := os.Getenv("WARREN_AMQP_URL"); u != "" {
		return u
	}
	return broker.DefaultURL
}

func pgBaseURL() string {
	if u := os.Getenv("TEST_DATABASE_URL"); u != "" {
		return u
	}
	return "postgres://postgres@127.0.0.1:5432/test?sslmode=disable"
}

// brokerUp reports whether an AMQP connection can be opened.
func brokerUp() bool {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	conn, err := broker.Dial(ctx, amqpURL(), "chaos (probe)")
	if err != nil {
		return false
	}
	_ = conn.Close()
	return true
}

// ensureBroker starts RabbitMQ (its app, or the node) when it does not answer.
func ensureBroker() error {
	if brokerUp() {
		return nil
	}
	logf("RabbitMQ does not answer: starting it")
	if _, err := run(60*time.Second, "rabbitmqctl", "-q", "start_app"); err != nil {
		logf("start_app: %v; starting the node", err)
		if _, err := run(60*time.Second, "rabbitmq-server", "-detached"); err != nil {
			return err
		}
	}
	if _, err := run(120*time.Second, "rabbitmqctl", "-q", "await_startup"); err != nil {
		return err
	}
	deadline := time.Now().Add(60 * time.Second)
	for !brokerUp() {
		if time.Now().After(deadline) {
			return fmt.Errorf("RabbitMQ still does not accept connections")
		}
		time.Sleep(500 * time.Millisecond)
	}
	return nil
}

func pgCluster() string {
	entries, err := os.ReadDir("/etc/postgresql")
	if err != nil || len(entries) == 0 {
		return "15"
	}
	return entries[0].Name()
}

func pgExec(sql string) error {
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, pgBaseURL())
	if err != nil {
		return err
	}
	defer func() { _ = conn.Close(context.Background()) }()
	_, err = conn.Exec(ctx, sql)
	return err
}

// ensurePostgres starts the PostgreSQL cluster when it does not answer.
func ensurePostgres() error {
	if pgExec("SELECT 1") == nil {
		return nil
	}
	logf("PostgreSQL does not answer: starting it")
	if _, err := run(60*time.Second, "pg_ctlcluster", "--skip-systemctl-redirect", pgCluster(), "main", "start"); err != nil {
		logf("pg_ctlcluster start: %v", err)
	}
	deadline := time.Now().Add(60 * time.Second)
	for pgExec("SELECT 1") != nil {
		if time.Now().After(deadline) {
			return fmt.Errorf("PostgreSQL still does not answer")
		}
		time.Sleep(500 * time.Millisecond)
	}
	return nil
}

// createSchema creates a fresh schema and returns a store URL using it.
func createSchema(name string) (string, error) {
	ident := pgx.Identifier{name}.Sanitize()
	if err := pgExec("CREATE SCHEMA " + ident); err != nil {
		return "", err
	}
	u := pgBaseURL()
	sep := "?"
	if strings.Contains(u, "?") {
		sep = "&"
	}
	return "postgres" + strings.TrimPrefix(u, "postgres") + sep + "search_path=" + name, nil
}

func dropSchema(name string) error {
	return pgExec("DROP SCHEMA IF EXISTS " + pgx.Identifier{name}.Sanitize() + " CASCADE")
}

// deleteTopology removes the prefix's exchanges and queues, through the
// broker (or one of the nodes) of url.
func deleteTopology(url, prefix string, tiers []time.Duration) error {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	conn, err := broker.Dial(ctx, url, "chaos (cleanup)")
	if err != nil {
		return err
	}
	defer func() { _ = conn.Close() }()
	return broker.DeleteTopology(conn, protocol.NamesFor(prefix), tiers...)
}

var watermarkRE = regexp.MustCompile(`\{vm_memory_high_watermark,([0-9.]+)\}`)

// currentWatermark reads the relative memory high watermark (0.4 when it
// cannot be read or is not relative).
func currentWatermark() string {
	out, err := run(30*time.Second, "rabbitmqctl", "-q", "environment")
	if err == nil {
		if m := watermarkRE.FindStringSubmatch(out); m != nil {
			if m[1] != "0" && m[1] != "0.0" {
				return m[1]
			}
		}
	}
	return "0.4"
}

func setWatermark(v string) error {
	_, err := run(30*time.Second, "rabbitmqctl", "-q", "set_vm_memory_high_watermark", v)
	return err
}

// queueDepths lists the prefix's queues with their message counts.
func queueDepths(prefix string) string {
	out, err := run(30*time.Second, "rabbitmqctl", "-q", "list_queues", "name", "messages_ready", "messages_unacknowledged")
	if err != nil {
		return err.Error()
	}
	var b strings.Builder
	for _, l := range strings.Split(out, "\n") {
		if strings.HasPrefix(l, prefix) {
			b.WriteString("    " + l + "\n")
		}
	}
	return b.String()
}
