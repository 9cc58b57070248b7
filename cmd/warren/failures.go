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
	var asJSON *bool
	id, c, err := jobCommand("redrive", "Requeue the failed tasks of a failed (or completed-with-failures) job and reopen it.", args, env, func(fs *flagSet) {
		asJSON = jsonFlag(fs, "print the reopened job as JSON")
	})
	if err != nil {
		return err
	}
	job, err := c.Redrive(ctx, id)
	if err != nil {
		return err
	}
	if *asJSON {
		return printJSON(env.stdout, job)
	}
	fmt.Fprintf(env.stdout, "job %s is %s again: %d of %d tasks to run\n", job.ID, job.State, job.PendingTasks, job.ExpectedTasks)
	return nil
}

// dlqSummaries are the summaries of the dlq subcommands.
var dlqSummaries = map[string]string{
	"list":   "Show each dead letter: job, task, state (pending, or settled and why), routing key, reason, attempts, time, error.",
	"replay": "Republish dead letters (retries reset); each is removed only after its republish is confirmed.",
	"purge":  "Delete dead letters: those of one job (--job ID), the settled ones (--settled, with or without --job), or all of them (--all).",
}

func runDLQ(ctx context.Context, args []string, env *environment) error {
	if len(args) == 0 {
		fmt.Fprintln(env.stderr, "warren dlq: missing subcommand: list, replay or purge (see \"warren dlq --help\")")
		return errUsage
	}
	sub := args[0]
	switch sub {
	case "-h", "--help", "-help", "help":
		fmt.Fprintln(env.stdout, dlqUsage)
		return flag.ErrHelp
	case "list", "replay", "purge":
	default:
		fmt.Fprintf(env.stderr, "warren dlq: unknown subcommand %q: want list, replay or purge (see \"warren dlq --help\")\n", sub)
		return errUsage
	}
	var cf clientFlags
	fs := newFlagSet("dlq "+sub, dlqSummaries[sub]+"\nDead letters are read from the dead-letter queue (tasks.dlq) through the server.", env)
	cf.register(fs)
	job := fs.String("job", "", "only the dead letters of this job")
	fs.localFlags("job")
	var limit *int
	var asJSON, all, pending, settled *bool
	switch sub {
	case "list":
		limit = fs.Int("limit", 0, "at most this many (0: all)")
		asJSON = fs.Bool("json", false, "print a JSON array")
		pending = fs.Bool("pending", false, "only the pending ones: not settled by a redrive, a replay or a delete")
		fs.localFlags("limit", "json", "pending")
	case "replay":
		limit = fs.Int("limit", 0, "replay at most this many (0: all)")
		asJSON = fs.Bool("json", false, `print {"replayed": N, "skipped": N}`)
		fs.localFlags("limit", "json")
	case "purge":
		all = fs.Bool("all", false, "purge the dead letters of every job")
		settled = fs.Bool("settled", false, "purge only the settled ones (their task was redriven or replayed, or their job deleted or cancelled)")
		asJSON = fs.Bool("json", false, `print {"purged": N}`)
		fs.localFlags("all", "settled", "json")
	}
	if err := parse(fs, args[1:], env); err != nil {
		return err
	}
	if limit != nil && *limit < 0 {
		return usageErrorf("--limit must be >= 0, got %d", *limit)
	}
	if all != nil && *all == (*job != "" || *settled) {
		return usageErrorf("dlq purge needs --job ID, --settled or --all (and --all alone)")
	}
	c, err := cf.client()
	if err != nil {
		return err
	}
	switch sub {
	case "list":
		list := c.DeadLetters
		if *pending {
			list = c.PendingDeadLetters
		}
		msgs, err := list(ctx, *job, *limit)
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
		fmt.Fprintln(tw, "JOB\tTASK\tSTATE\tROUTING KEY\tREASON\tATTEMPTS\tTIME\tERROR")
		for _, m := range msgs {
			at := ""
			if !m.Time.IsZero() {
				at = m.Time.UTC().Format(time.RFC3339)
			}
			task := strconv.FormatInt(m.TaskID, 10)
			if len(m.TaskIDs) > 1 {
				task += fmt.Sprintf(" (batch of %d)", len(m.TaskIDs))
			}
			state := "pending"
			if !m.Pending {
				state = "settled:" + m.Settled
			}
			fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%d\t%s\t%s\n", m.JobID, task, state, m.RoutingKey, m.Reason, m.Attempts, at, m.Error)
		}
		return tw.Flush()
	case "replay":
		replayed, skipped, err := c.ReplayDeadLetters(ctx, *job, *limit)
		if err != nil {
			return err
		}
		if *asJSON {
			return printJSON(env.stdout, map[string]int{"replayed": replayed, "skipped": skipped})
		}
		fmt.Fprintf(env.stdout, "replayed %d, skipped %d (their tasks are no longer failed; they stay in the queue)\n", replayed, skipped)
		return nil
	case "purge":
		purge := c.PurgeDeadLetters
		if *settled {
			purge = c.PurgeSettledDeadLetters
		}
		n, err := purge(ctx, *job)
		if err != nil {
			return err
		}
		if *asJSON {
			return printJSON(env.stdout, map[string]int{"purged": n})
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
  purge   delete dead letters: --job ID, or --all

Run "warren dlq SUBCOMMAND --help" for its flags (--server, env WARREN_SERVER; --token, env WARREN_TOKEN; ...).`
