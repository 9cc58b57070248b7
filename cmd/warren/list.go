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
	next := *cursor
	for {
		want := listPage
		if *limit > 0 {
			want = min(listPage, *limit-len(out.Jobs))
		}
		page, err := c.List(ctx, &client.ListOpts{State: *state, Type: *typ, Limit: want, Cursor: next})
		if err != nil {
			return err
		}
		out.Jobs = append(out.Jobs, page.Jobs...)
		out.NextCursor = page.NextCursor
		if page.NextCursor == nil || (*limit > 0 && len(out.Jobs) >= *limit) {
			break
		}
		next = *page.NextCursor
	}
	if *asJSON {
		if out.Jobs == nil {
			out.Jobs = []client.Job{}
		}
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

// when formats an optional time for a table.
func when(t *time.Time) string {
	if t == nil {
		return "-"
	}
	return t.UTC().Format(time.RFC3339)
}

func runTasks(ctx context.Context, args []string, env *environment) error {
	var cf clientFlags
	fs := newFlagSet("tasks", "List a job's tasks in task id order: id, state, attempts, worker, finished, error.", env)
	cf.register(fs)
	state := fs.String("state", "", "only tasks in this state: pending, queued, completed, failed or cancelled")
	limit := fs.Int("limit", 0, "at most this many tasks (0: all)")
	asJSON := fs.Bool("json", false, `print {"tasks": [...], "next_cursor": ...}, results included`)
	fs.localFlags("state", "limit", "json")
	id, err := parseWithID(fs, args, env)
	if err != nil {
		return err
	}
	if *limit < 0 {
		return usageErrorf("--limit must be >= 0, got %d", *limit)
	}
	if *state != "" && !client.TaskState(*state).Valid() {
		return usageErrorf("--state: %q is not a task state (pending, queued, completed, failed, cancelled)", *state)
	}
	c, err := cf.client()
	if err != nil {
		return err
	}
	var out client.TaskList
	next := ""
	for {
		want := listPage
		if *limit > 0 {
			want = min(listPage, *limit-len(out.Tasks))
		}
		page, err := c.Tasks(ctx, id, &client.ListOpts{State: *state, Limit: want, Cursor: next})
		if err != nil {
			return err
		}
		out.Tasks = append(out.Tasks, page.Tasks...)
		out.NextCursor = page.NextCursor
		if page.NextCursor == nil || (*limit > 0 && len(out.Tasks) >= *limit) {
			break
		}
		next = *page.NextCursor
	}
	if *asJSON {
		if out.Tasks == nil {
			out.Tasks = []client.Task{}
		}
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
	var cf clientFlags
	fs := newFlagSet("result", "Print a completed job's reduced result, as JSON. A job that is not completed is an error (exit status 3).", env)
	cf.register(fs)
	// The result is JSON already: --json is accepted for scripts that
	// give it to every command.
	fs.Bool("json", true, "print the result as JSON (always)")
	fs.localFlags("json")
	id, err := parseWithID(fs, args, env)
	if err != nil {
		return err
	}
	c, err := cf.client()
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
	var cf clientFlags
	fs := newFlagSet("cancel", "Cancel an open job: its tasks not yet run are dropped, running ones are told to stop.", env)
	cf.register(fs)
	asJSON := fs.Bool("json", false, "print the cancelled job as JSON")
	fs.localFlags("json")
	id, err := parseWithID(fs, args, env)
	if err != nil {
		return err
	}
	c, err := cf.client()
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
