package main

import (
	"context"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/warrenhq/warren/client"
)

// listPage is the largest page list and tasks ask for.
const listPage = 500

func runList(ctx context.Context, args []string, env *environment) error {
	var cf clientFlags
	fs := newFlagSet("list", "List jobs, newest first: id, type, state, tasks finished (completed + failed) of expected, failed, rate, created.\n"+
		"--limit pages through the server's list until it has that many, or --cursor goes on from a page's next_cursor.", env)
	cf.register(fs)
	state := fs.String("state", "", "only jobs in this state: pending, running, completed, failed or cancelled")
	typ := fs.String("type", "", "only jobs of this type")
	queue := fs.String("queue", "", `only jobs of this work queue ("default": the jobs that name none)`)
	search := fs.String("search", "", "only jobs whose id starts with this text, or with it in their type, queue, metadata values or errors (job's or a task's), ignoring case; 3 to 200 bytes")
	after := fs.String("created-after", "", "only jobs created at or after this time: RFC 3339 (2026-12-02T06:45:00Z) or a duration ago (2h)")
	before := fs.String("created-before", "", "only jobs created before this time: RFC 3339 or a duration ago")
	limit := fs.Int("limit", 20, "at most this many jobs (0: all)")
	cursor := fs.String("cursor", "", "start after this cursor, the next_cursor of an earlier page (--json prints it)")
	asJSON := fs.Bool("json", false, `print {"jobs": [...], "next_cursor": ...} as the API does`)
	quiet := fs.Bool("q", false, "print the job ids only, one per line (for scripts: xargs, shell loops)")
	fs.localFlags("state", "type", "queue", "search", "created-after", "created-before", "limit", "cursor", "json", "q")
	if err := parse(fs, args, env); err != nil {
		return err
	}
	if *limit < 0 {
		return usageErrorf("--limit must be >= 0, got %d", *limit)
	}
	if *asJSON && *quiet {
		return usageErrorf("--json and -q: choose one")
	}
	if *state != "" && !client.JobState(*state).Valid() {
		return usageErrorf("--state: %q is not a job state (pending, running, completed, failed, cancelled)", *state)
	}
	opts := client.ListOpts{State: *state, Type: *typ, Queue: *queue, Search: *search}
	var err error
	if opts.CreatedAfter, err = parseSince("--created-after", *after, time.Now()); err != nil {
		return err
	}
	if opts.CreatedBefore, err = parseSince("--created-before", *before, time.Now()); err != nil {
		return err
	}
	c, err := cf.client()
	if err != nil {
		return err
	}
	var out client.JobList
	out.Jobs, out.NextCursor, err = allPages(*limit, *cursor, func(limit int, cursor string) ([]client.Job, *string, error) {
		page := opts
		page.Limit, page.Cursor = limit, cursor
		list, err := c.List(ctx, &page)
		return list.Jobs, list.NextCursor, err
	})
	if err != nil {
		return err
	}
	switch {
	case *asJSON:
		return printJSON(env.stdout, out)
	case *quiet:
		for _, j := range out.Jobs {
			fmt.Fprintln(env.stdout, j.ID)
		}
		return nil
	}
	tw := tabwriter.NewWriter(env.stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "ID\tTYPE\tSTATE\tFINISHED\tFAILED\tRATE\tCREATED")
	for _, j := range out.Jobs {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%d/%d\t%d\t%s\t%s\n", j.ID, j.Type, j.State, j.CompletedTasks+j.FailedTasks, j.ExpectedTasks, j.FailedTasks,
			listRate(j.Rate), when(j.CreatedAt))
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	if out.NextCursor != nil {
		fmt.Fprintf(env.stderr, "more: warren list%s --cursor %s\n",
			filterFlags("state", *state, "type", *typ, "queue", *queue, "search", *search,
				"created-after", *after, "created-before", *before), *out.NextCursor)
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

// filterFlags returns the flags of the pairs (name, value) whose value is
// not empty, as " --name value" each, a value quoted for a POSIX shell
// when it needs it: the filters a next page's command must repeat.
func filterFlags(pairs ...string) string {
	var b strings.Builder
	for i := 0; i+1 < len(pairs); i += 2 {
		if v := pairs[i+1]; v != "" {
			b.WriteString(" --" + pairs[i] + " " + shellQuote(v))
		}
	}
	return b.String()
}

// shellQuote returns v as one word of a POSIX shell.
func shellQuote(v string) string {
	if v != "" && !strings.ContainsFunc(v, func(r rune) bool {
		return !(r == '-' || r == '_' || r == '.' || r == ':' || r == '/' || r == '+' ||
			'a' <= r && r <= 'z' || 'A' <= r && r <= 'Z' || '0' <= r && r <= '9')
	}) {
		return v
	}
	return "'" + strings.ReplaceAll(v, "'", `'\''`) + "'"
}

// parseSince reads flag name's value v as a time: RFC 3339, or a
// duration (2h, 30m) before now. "" is the zero time (no bound).
func parseSince(name, v string, now time.Time) (time.Time, error) {
	if v == "" {
		return time.Time{}, nil
	}
	if t, err := time.Parse(time.RFC3339Nano, v); err == nil {
		return t, nil
	}
	if d, err := time.ParseDuration(v); err == nil && d >= 0 {
		return now.Add(-d), nil
	}
	return time.Time{}, usageErrorf("%s: %q is neither an RFC 3339 time (2026-12-02T06:45:00Z) nor a duration ago (2h)", name, v)
}

// listRate is a job's rate in the list: "3.33/s", "-" for none.
func listRate(r *float64) string {
	if r == nil {
		return "-"
	}
	return rateNumber(r) + "/s"
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
		state         *string
		limit         *int
		asJSON, quiet *bool
	)
	id, c, err := jobCommand("tasks", "List a job's tasks in task id order: id, state, attempts, worker, finished, error.", args, env, func(fs *flagSet) {
		state = fs.String("state", "", "only tasks in this state: pending, queued, completed, failed or cancelled")
		limit = fs.Int("limit", 0, "at most this many tasks (0: all)")
		asJSON = jsonFlag(fs, `print {"tasks": [...], "next_cursor": ...}, results included`)
		quiet = fs.Bool("q", false, "print the task ids only, one per line")
		fs.localFlags("state", "limit", "q")
	})
	if err != nil {
		return err
	}
	if *limit < 0 {
		return usageErrorf("--limit must be >= 0, got %d", *limit)
	}
	if *asJSON && *quiet {
		return usageErrorf("--json and -q: choose one")
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
	switch {
	case *asJSON:
		return printJSON(env.stdout, out)
	case *quiet:
		for _, t := range out.Tasks {
			fmt.Fprintln(env.stdout, t.TaskID)
		}
		return nil
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
