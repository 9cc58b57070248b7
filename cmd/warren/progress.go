package main

import (
	"fmt"
	"io"
	"os"
	"strings"
	"time"

	"github.com/warrenhq/warren/client"
)

// progress shows a job's progress: a bar redrawn in place on a terminal,
// plain lines at most once a second otherwise.
type progress struct {
	w        io.Writer
	tty      bool
	last     time.Time
	lastLine string
	drawn    bool
}

func newProgress(w io.Writer) *progress {
	return &progress{w: w, tty: isTerminal(w)}
}

func isTerminal(w io.Writer) bool {
	f, ok := w.(*os.File)
	if !ok {
		return false
	}
	st, err := f.Stat()
	return err == nil && st.Mode()&os.ModeCharDevice != 0
}

func (p *progress) update(j client.Job) {
	done := j.CompletedTasks + j.FailedTasks
	rate := rateText(j.Rate)
	if p.tty {
		const width = 30
		filled := 0
		if j.ExpectedTasks > 0 {
			filled = int(int64(width) * done / j.ExpectedTasks)
		}
		fmt.Fprintf(p.w, "\r[%s%s] %5.1f%% %d/%d finished, %d failed  %s  %-9s%s\x1b[K",
			strings.Repeat("#", filled), strings.Repeat("-", width-filled),
			percent(done, j.ExpectedTasks), done, j.ExpectedTasks, j.FailedTasks, rate, j.State, waitingNote(j, time.Now()))
		p.drawn = true
		return
	}
	line := fmt.Sprintf("progress: %s %d/%d tasks finished (%d failed), %s%s", j.State, done, j.ExpectedTasks, j.FailedTasks, rate, waitingNote(j, time.Now()))
	if line == p.lastLine || (time.Since(p.last) < time.Second && !j.Terminal()) {
		return
	}
	p.last, p.lastLine = time.Now(), line
	fmt.Fprintln(p.w, line)
}

func (p *progress) finish() {
	if p.tty && p.drawn {
		fmt.Fprintln(p.w)
	}
}

// rateText formats a job's rate (client.Job.Rate: finished tasks per
// second, the dashboard's definition and digits) as "3.33 tasks/s",
// "- tasks/s" while it cannot be measured.
func rateText(r *float64) string {
	return rateNumber(r) + " tasks/s"
}

// rateNumber is rateText's number: "-" for none.
func rateNumber(r *float64) string {
	switch {
	case r == nil:
		return "-"
	case *r >= 100:
		return fmt.Sprintf("%.0f", *r)
	case *r >= 10:
		return fmt.Sprintf("%.1f", *r)
	default:
		return fmt.Sprintf("%.2f", *r)
	}
}

func percent(n, of int64) float64 {
	if of <= 0 {
		return 100
	}
	return 100 * float64(n) / float64(of)
}

// waitingNote is "; no consumer on queue Q for N s" while j waits for a
// consumer, or "; no live worker serves type T on queue Q ..." while it
// waits for a worker that serves its type (client.Job.Waiting), else "".
func waitingNote(j client.Job, now time.Time) string {
	if j.Waiting == nil || j.Terminal() {
		return ""
	}
	return "; " + waitingText(*j.Waiting, now)
}

// waitingText says why a job waits, as status and watch show it.
func waitingText(w client.Waiting, now time.Time) string {
	if w.Reason == "no_worker_for_type" {
		return fmt.Sprintf("no live worker serves type %s on queue %s for %d s (its tasks wait for one, and fail unknown_type after the task_timeout)",
			w.Type, w.Queue, int(max(now.Sub(w.Since), 0).Seconds()))
	}
	if w.Reason == "queue_paused" {
		return fmt.Sprintf("its work queue %s is paused (since %s): no new task starts until `warren resume --queue %s`",
			w.Queue, w.Since.Format(time.RFC3339), w.Queue)
	}
	if w.Reason != "no_consumer" {
		return fmt.Sprintf("waiting (%s) on queue %s since %s", w.Reason, w.Queue, w.Since.Format(time.RFC3339))
	}
	return fmt.Sprintf("no consumer on queue %s for %d s (no worker consumes it: is one running, with this prefix and --queues %s?)",
		w.Queue, int(max(now.Sub(w.Since), 0).Seconds()), w.Queue)
}
