package main

import (
	"context"
	"fmt"
	"time"
)

func runPause(ctx context.Context, args []string, env *environment) error {
	return pauseCommand(ctx, "pause", "Pause a job, or a work queue with --queue: no new task of it starts until `warren resume`; running tasks finish.", args, env)
}

func runResume(ctx context.Context, args []string, env *environment) error {
	return pauseCommand(ctx, "resume", "Resume a paused job, or a paused work queue with --queue.", args, env)
}

// pauseCommand runs `warren pause` or `warren resume` (name): of the job
// ID, or of the work queue --queue.
func pauseCommand(ctx context.Context, name, summary string, args []string, env *environment) error {
	var cf clientFlags
	fs := newFlagSet(name, summary, env)
	cf.register(fs)
	queue := fs.String("queue", "", `the work queue to `+name+` instead of a job ("default": the jobs that name none)`)
	asJSON := fs.Bool("json", false, "print the answer as JSON, as the API gives it")
	fs.localFlags("queue", "json")
	fs.positional = "ID|--queue QUEUE"
	positional, err := fs.parseAll(args)
	if err != nil {
		return err
	}
	if (len(positional) == 1) == (*queue != "") || len(positional) > 1 {
		fmt.Fprintf(env.stderr, "warren %s: want one job id or --queue QUEUE, not both (usage: warren %s ID|--queue QUEUE [flags])\n", name, name)
		return errUsage
	}
	if err := applyLogFlags(fs, env); err != nil {
		return err
	}
	c, err := cf.client()
	if err != nil {
		return err
	}
	if *queue != "" {
		change := c.PauseQueue
		if name == "resume" {
			change = c.ResumeQueue
		}
		q, err := change(ctx, *queue)
		if err != nil {
			return err
		}
		if *asJSON {
			return printJSON(env.stdout, q)
		}
		state := "resumed"
		if q.Paused {
			state = "paused since " + q.PausedAt.Format(time.RFC3339)
		}
		fmt.Fprintf(env.stdout, "queue %s is %s\n", q.Queue, state)
		printWarnings(env, q.Warnings)
		return nil
	}
	change := c.Pause
	if name == "resume" {
		change = c.Resume
	}
	job, err := change(ctx, positional[0])
	if err != nil {
		return err
	}
	if *asJSON {
		return printJSON(env.stdout, job)
	}
	state := "resumed"
	if job.Paused {
		state = "paused since " + job.PausedAt.Format(time.RFC3339)
	}
	fmt.Fprintf(env.stdout, "job %s is %s (%s)\n", job.ID, state, job.State)
	printWarnings(env, job.Warnings)
	return nil
}

// printWarnings writes the answer's warnings to standard error.
func printWarnings(env *environment, warnings []string) {
	for _, w := range warnings {
		fmt.Fprintf(env.stderr, "warning: %s\n", w)
	}
}
