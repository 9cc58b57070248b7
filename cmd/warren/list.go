package main

import (
	"context"
	"fmt"
	"io"
	"text/tabwriter"
	"time"

	"github.com/warrenhq/warren/client"
)

// listPage is the largest page list and tasks ask for.
const listPage = 500

func runList(ctx context.Context, args []string, env *environment) error {
	var cf clientFlags
	fs := newFlagSet("list", "List jobs, newest first: id, type, state, tasks done of expected, failed, created.\n"+
		"--limit pages through the server's list until it has that many, or --cursor goes on from a page's next_cursor.", env)
	cf.register(fs)
	state := fs.String("state", "", "only jobs in this state: pending, running, completed, failed or cancelled")
	typ := fs.String("type", "", "only jobs of this type")
	limit := fs.Int("limit", 20, "at most this many jobs (0: all)")
	cursor := fs.String("cursor", "", "start after this cursor, the next_cursor of an earlier page (--json prints it)")
	asJSON := fs.Bool("json", false, `print {"jobs": [...], "next_cursor": ...} as the API does`)
	fs.localFlags("state", "type", "limit", "cursor", "json")
	if err := parse(fs, args, env); err != nil {
		return err
	}
	if *limit < 0 {
		return usageErrorf("--limit must be >= 0, got %d", *limit)
	}
	if *state != "" && !client.JobState(*state).Valid() {
		return usageErrorf("--state: %q is not a job state (pending, running, completed, failed, cancelled)", *state)
	}
	c, err := cf.client()
	if err != nil {
		return err
	}
	var out client.JobList
	out.Jobs, out.NextCursor, err = allPages(*limit, *cursor, func(limit int, cursor string) ([]client.Job, *string, error) {
		page, err := c.List(ctx, &client.ListOpts{State: *state, Type: *typ, Limit: limit, Cursor: cursor})
		return page.Jobs, page.NextCursor, err
	})
	if err != nil {
		return err
	}
	if *asJSON {
		return printJSON(env.stdout, out)
	}
	tw := tabwriter.NewWriter(env.stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "ID\tTYPE\tSTATE\tDONE\tFAILED\tCREATED")
	for _, j := range out.Jobs {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%d/%d\t%d\t%s\n", j.ID, j.Type, j.State, j.CompletedTasks+j.FailedTasks, j.ExpectedTasks, j.FailedTasks, when(j.CreatedAt))
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	if out.NextCursor != nil {
		fmt.Fprintf(env.stderr, "more: warren list --cursor %s\n", *out.NextCursor)
	}
	return nil
}

// allPages pages through a list from cursor, asking for at most listPage
// items at a time, until it has limit items (0: all of them). It returns
// them (never nil) and the cursor of the page after, nil at the end.
func allPages[T any](limit int, cursor string, page func(limit int, cursor string) ([]T, *string, error)) ([]T, *string, error) {
	items := []T{}
	for {
		want := listPage
		if limit > 0 {
			want = min(listPage, limit-len(items))
		}
		got, next, err := page(want, cursor)
		if err != nil {
			return nil, nil, err
		}
		items = append(items, got...)
		if next == nil || (limit > 0 && len(items) >= limit) {
			return items, next, nil
		}
		cursor = *next
	}
}

// when formats an optional time for a table.
func when(t *time.Time) string {
	if t == nil {
		return "-"
	}
	return t.UTC().Format(time.RFC3339)
}

func runTasks(ctx context.Context, args []string, env *environment) error {
	var (
		state  *string
		limit  *int
		asJSON *bool
	)
	id, c, err := jobCommand("tasks", "List a job's tasks in task id order: id, state, attempts, worker, finished, error.", args, env, func(fs *flagSet) {
		state = fs.String("state", "", "only tasks in this state: pending, queued, completed, failed or cancelled")
		limit = fs.Int("limit", 0, "at most this many tasks (0: all)")
		asJSON = jsonFlag(fs, `print {"tasks": [...], "next_cursor": ...}, results included`)
		fs.localFlags("state", "limit")
	})
	if err != nil {
		return err
	}
	if *limit < 0 {
		return usageErrorf("--limit must be >= 0, got %d", *limit)
	}
	if *state != "" && !client.TaskState(*state).Valid() {
		return usageErrorf("--state: %q is not a task state (pending, queued, completed, failed, cancelled)", *state)
	}
	var out client.TaskList
	out.Tasks, out.NextCursor, err = allPages(*limit, "", func(limit int, cursor string) ([]client.Task, *string, error) {
		page, err := c.Tasks(ctx, id, &client.ListOpts{State: *state, Limit: limit, Cursor: cursor})
		return page.Tasks, page.NextCursor, err
	})
	if err != nil {
		return err
	}
	if *asJSON {
		return printJSON(env.stdout, out)
	}
	printTasks(env.stdout, out.Tasks)
	return nil
}

func printTasks(w io.Writer, tasks []client.Task) {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "TASK\tSTATE\tATTEMPTS\tWORKER\tFINISHED\tERROR")
	for _, t := range tasks {
		worker := t.Worker
		if worker == "" {
			worker = "-"
		}
		fmt.Fprintf(tw, "%d\t%s\t%d\t%s\t%s\t%s\n", t.TaskID, t.State, t.Attempts, worker, when(t.FinishedAt), t.Error)
	}
	_ = tw.Flush()
}

func runResult(ctx context.Context, args []string, env *environment) error {
	id, c, err := jobCommand("result", "Print a completed job's reduced result, as JSON. A job that is not completed is an error (exit status 3).", args, env, func(fs *flagSet) {
		// The result is JSON already: --json is accepted for scripts that
		// give it to every command.
		fs.Bool("json", true, "print the result as JSON (always)")
		fs.localFlags("json")
	})
	if err != nil {
		return err
	}
	raw, err := c.Result(ctx, id)
	if err != nil {
		return err
	}
	return printRawJSON(env.stdout, raw)
}

func runCancel(ctx context.Context, args []string, env *environment) error {
	var asJSON *bool
	id, c, err := jobCommand("cancel", "Cancel an open job: its tasks not yet run are dropped, running ones are told to stop.", args, env, func(fs *flagSet) {
		asJSON = jsonFlag(fs, "print the cancelled job as JSON")
	})
	if err != nil {
		return err
	}
	job, err := c.Cancel(ctx, id)
	if err != nil {
		return err
	}
	if *asJSON {
		return printJSON(env.stdout, job)
	}
	fmt.Fprintf(env.stdout, "job %s is %s\n", job.ID, job.State)
	return nil
}
