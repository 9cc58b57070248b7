package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"strconv"
	"text/tabwriter"
	"time"
)

func runRedrive(ctx context.Context, args []string, env *environment) error {
	var cf clientFlags
	fs := newFlagSet("redrive", "Requeue the failed tasks of a failed (or completed-with-failures) job and reopen it: warren redrive ID.", env)
	cf.register(fs, env)
	id, err := parseWithID(fs, args, env)
	if err != nil {
		return err
	}
	job, err := cf.client().Redrive(ctx, id)
	if err != nil {
		return err
	}
	fmt.Fprintf(env.stdout, "job %s is %s again: %d of %d tasks to run\n", job.ID, job.State, job.PendingTasks, job.ExpectedTasks)
	return nil
}

func runDLQ(ctx context.Context, args []string, env *environment) error {
	if len(args) == 0 || (args[0] != "list" && args[0] != "replay" && args[0] != "purge") {
		if len(args) > 0 && (args[0] == "-h" || args[0] == "--help" || args[0] == "help") {
			fmt.Fprintln(env.stderr, dlqUsage)
			return flag.ErrHelp
		}
		fmt.Fprintln(env.stderr, dlqUsage)
		return errUsage
	}
	var cf clientFlags
	sub := args[0]
	fs := newFlagSet("dlq "+sub, dlqUsage, env)
	cf.register(fs, env)
	job := fs.String("job", "", "only the dead letters of this job")
	var limit *int
	var asJSON *bool
	switch sub {
	case "list":
		limit = fs.Int("limit", 0, "at most this many (0: all)")
		asJSON = fs.Bool("json", false, "print a JSON array")
	case "replay":
		limit = fs.Int("limit", 0, "replay at most this many (0: all)")
	}
	if err := parse(fs, args[1:], env); err != nil {
		return err
	}
	if limit != nil && *limit < 0 {
		return fmt.Errorf("--limit must be >= 0, got %d", *limit)
	}
	c := cf.client()
	switch sub {
	case "list":
		msgs, err := c.DeadLetters(ctx, *job, *limit)
		if err != nil {
			return err
		}
		if *asJSON {
			if msgs == nil {
				msgs = msgs[:0:0]
			}
			out, err := json.Marshal(msgs)
			if err != nil {
				return err
			}
			fmt.Fprintln(env.stdout, string(out))
			return nil
		}
		tw := tabwriter.NewWriter(env.stdout, 0, 4, 2, ' ', 0)
		fmt.Fprintln(tw, "JOB\tTASK\tROUTING KEY\tREASON\tATTEMPTS\tTIME\tERROR")
		for _, m := range msgs {
			at := ""
			if !m.Time.IsZero() {
				at = m.Time.UTC().Format(time.RFC3339)
			}
			task := strconv.FormatInt(m.TaskID, 10)
			if len(m.TaskIDs) > 1 {
				task += fmt.Sprintf(" (batch of %d)", len(m.TaskIDs))
			}
			fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%d\t%s\t%s\n", m.JobID, task, m.RoutingKey, m.Reason, m.Attempts, at, m.Error)
		}
		return tw.Flush()
	case "replay":
		replayed, skipped, err := c.ReplayDeadLetters(ctx, *job, *limit)
		if err != nil {
			return err
		}
		fmt.Fprintf(env.stdout, "replayed %d, skipped %d (their tasks are no longer failed; they stay in the queue)\n", replayed, skipped)
		return nil
	case "purge":
		n, err := c.PurgeDeadLetters(ctx, *job)
		if err != nil {
			return err
		}
		fmt.Fprintf(env.stdout, "purged %d\n", n)
		return nil
	}
	return errors.New("unreachable")
}

const dlqUsage = `Usage: warren dlq list|replay|purge [flags]

Inspect and act on the dead-letter queue (tasks.dlq), through the server:
  list    show each dead letter: job, task, routing key, reason, attempts, time, error
  replay  republish dead letters (retries reset); each is removed only after its republish is confirmed
  purge   delete dead letters

Flags: --job ID (all: only that job's), --limit N (list, replay), --json (list),
--server URL (default from env WARREN_LISTEN), --token (env WARREN_TOKEN).`
