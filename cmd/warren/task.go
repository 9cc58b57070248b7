package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"strconv"
	"strings"

	"github.com/warrenhq/warren/client"
)

// maxShownJSON is how much of a payload or result the human output of
// `warren task` shows; --json shows all.
const maxShownJSON = 2048

func runTask(ctx context.Context, args []string, env *environment) error {
	var cf clientFlags
	fs := newFlagSet("task", "Show one task whole: its state, payload, result, every attempt kept (worker, times, outcome, error, traceback) and its dead letter.", env)
	cf.register(fs)
	asJSON := jsonFlag(fs, `print the task as GET /v1/jobs/{id}/tasks/{task_id} answers it`)
	fs.positional = "ID N"
	positional, err := fs.parseAll(args)
	if err != nil {
		return err
	}
	if len(positional) != 2 {
		fmt.Fprintf(env.stderr, "warren task: want a job id and a task id, got %d arguments (usage: warren task ID N [flags])\n", len(positional))
		return errUsage
	}
	taskID, err := strconv.ParseInt(positional[1], 10, 64)
	if err != nil || taskID < 0 {
		return usageErrorf("task id: %q is not a task id (1..N, or 0 for the reduce task)", positional[1])
	}
	if err := applyLogFlags(fs, env); err != nil {
		return err
	}
	c, err := cf.client()
	if err != nil {
		return err
	}
	t, err := c.Task(ctx, positional[0], taskID)
	if err != nil {
		return err
	}
	if *asJSON {
		return printJSON(env.stdout, t)
	}
	printTask(env.stdout, t)
	return nil
}

// printTask writes task t for people: its fields, then its attempts,
// each failure's traceback indented under it, then its dead letter.
func printTask(w io.Writer, t client.TaskDetail) {
	plural := "s"
	if t.Attempts == 1 {
		plural = ""
	}
	fmt.Fprintf(w, "Task %d of job %s: %s (generation %d, %d attempt%s)\n", t.TaskID, t.JobID, t.State, t.Generation, t.Attempts, plural)
	worker := t.Worker
	if worker == "" {
		worker = "-"
	}
	fmt.Fprintf(w, "Worker:    %s\n", worker)
	fmt.Fprintf(w, "Queued:    %s\n", when(t.QueuedAt))
	fmt.Fprintf(w, "Started:   %s\n", when(t.StartedAt))
	fmt.Fprintf(w, "Finished:  %s\n", when(t.FinishedAt))
	if t.Error != "" {
		fmt.Fprintf(w, "Error:     %s\n", t.Error)
	}
	fmt.Fprintf(w, "Payload:   %s\n", shownJSON(t.Payload))
	fmt.Fprintf(w, "Result:    %s\n", shownJSON(t.Result))
	if len(t.AttemptHistory) == 0 {
		fmt.Fprintln(w, "Attempts:  none recorded yet")
	} else {
		fmt.Fprintln(w, "Attempts (oldest first):")
	}
	for _, a := range t.AttemptHistory {
		worker := a.Worker
		if worker == "" {
			worker = "-"
		}
		fmt.Fprintf(w, "  #%d  %-9s  %s  started %s  finished %s\n", a.Attempt, a.Outcome, worker, when(a.StartedAt), when(&a.FinishedAt))
		if a.Error != "" {
			fmt.Fprintf(w, "      error: %s\n", a.Error)
		}
		if a.Traceback != "" {
			for line := range strings.SplitSeq(strings.TrimRight(a.Traceback, "\n"), "\n") {
				fmt.Fprintf(w, "      | %s\n", line)
			}
		}
	}
	if d := t.DeadLetter; d != nil {
		fmt.Fprintf(w, "Dead letter: %s, %d attempts, at %s (message %s): %s\n", d.Reason, d.Attempts, when(d.Time), d.MessageID, d.Error)
	}
}

// shownJSON is raw compacted for one line, its first maxShownJSON bytes
// when it is longer; "-" for none.
func shownJSON(raw json.RawMessage) string {
	if len(raw) == 0 {
		return "-"
	}
	var b bytes.Buffer
	if json.Compact(&b, raw) != nil {
		b.Reset()
		b.Write(raw)
	}
	if b.Len() > maxShownJSON {
		return fmt.Sprintf("%s… (%d bytes; --json shows all)", b.Bytes()[:maxShownJSON], b.Len())
	}
	return b.String()
}
