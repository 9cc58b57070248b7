package main

import (
	"fmt"
	"io"
	"math"
	"text/tabwriter"
)

// report is the outcome of a scale run; --json prints it as it is.
type report struct {
	Tasks          int     `json:"tasks"`
	BatchSize      int     `json:"batch_size"`
	Workers        int     `json:"workers"`
	Servers        int     `json:"servers"`
	Concurrency    int     `json:"concurrency"`
	Store          string  `json:"store"`
	Prefix         string  `json:"prefix"`
	JobID          string  `json:"job_id"`
	State          string  `json:"state"`
	CompletedTasks int64   `json:"completed_tasks"`
	FailedTasks    int64   `json:"failed_tasks"`
	SpecMB         float64 `json:"spec_mb"`
	// SubmitS is the wall-clock time of `warren submit FILE`, process
	// start to exit.
	SubmitS float64 `json:"submit_s"`
	// AllPublishedS is the job's published_at minus its created_at, both
	// the server's: a job turns running, and gets its published_at, once
	// the relay has published its last task.
	AllPublishedS float64 `json:"all_published_s"`
	// FirstResultS is from the submit's start to the first poll that saw
	// a finished task.
	FirstResultS float64 `json:"first_result_s"`
	// TotalS is the job's finished_at minus its created_at, both the
	// server's.
	TotalS float64 `json:"total_s"`
	// WallS is from the submit's start to the first poll that saw the job
	// closed.
	WallS float64 `json:"wall_s"`
	// TasksPerS is Tasks / TotalS.
	TasksPerS float64 `json:"tasks_per_s"`
	// MaxQueueMessages is the most messages seen ready in the work queue,
	// read at each poll of the job: what the relay's window lets RabbitMQ
	// hold (-1 when the queue could not be read).
	MaxQueueMessages int `json:"max_queue_messages"`
	// MaxPeakRSSMB is the largest PeakRSSMB of Processes.
	MaxPeakRSSMB float64      `json:"max_peak_rss_mb"`
	Processes    []procReport `json:"processes"`
}

// procReport is one process's resource use.
type procReport struct {
	Name string `json:"name"`
	// PeakRSSMB is the process's peak resident set (VmHWM; for submit,
	// its rusage maximum), in MiB.
	PeakRSSMB float64 `json:"peak_rss_mb"`
	// EndRSSMB is its resident set when the job was seen closed (absent
	// for submit, which has exited by then).
	EndRSSMB float64 `json:"end_rss_mb,omitempty"`
	// CPUJobS is its user+system CPU time from the submit's start to the
	// job seen closed.
	CPUJobS float64 `json:"cpu_job_s"`
	// CPUTotalS is its user+system CPU time over its whole life.
	CPUTotalS float64 `json:"cpu_total_s"`
	// Exit is how it ended once stopped: "exit 0" is a clean shutdown.
	Exit string `json:"exit"`
}

// printTable writes the human-readable report.
func printTable(w io.Writer, r report) {
	batch := "batch size chosen by warren"
	switch {
	case r.BatchSize == 1:
		batch = "one task per message"
	case r.BatchSize > 1:
		batch = fmt.Sprintf("batch_size %d", r.BatchSize)
	}
	fmt.Fprintf(w, "warren scale: %d echo tasks (%s, %.1f MB NDJSON), %d server(s), %d workers x concurrency %d, %s store\n\n",
		r.Tasks, batch, r.SpecMB, r.Servers, r.Workers, r.Concurrency, r.Store)
	row := func(k, format string, a ...any) { fmt.Fprintf(w, "  %-34s %s\n", k, fmt.Sprintf(format, a...)) }
	row("job", "%s %s: %d completed, %d failed", r.JobID, r.State, r.CompletedTasks, r.FailedTasks)
	row("submit (warren submit, wall)", "%.3f s", r.SubmitS)
	row("all tasks published (published_at)", "%.3f s after created_at", r.AllPublishedS)
	row("first result seen", "%.3f s after submit start", r.FirstResultS)
	row("created_at -> finished_at", "%.3f s", r.TotalS)
	row("submit start -> closed seen", "%.3f s (wall)", r.WallS)
	row("tasks/s", "%.0f (tasks / (finished_at - created_at))", r.TasksPerS)
	row("max peak RSS", "%.1f MB", r.MaxPeakRSSMB)
	row("most messages ready in the queue", "%d (read every %s)", r.MaxQueueMessages, pollEvery)
	fmt.Fprintln(w)

	// Numbers align right; names, padded to one width here, stay left.
	width := len("process")
	for _, p := range r.Processes {
		width = max(width, len(p.Name))
	}
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintf(tw, "  %-*s\tpeak RSS MB\tRSS at close MB\tCPU s during job\tCPU s total\t  exit\n", width, "process")
	for _, p := range r.Processes {
		end, job := fmt.Sprintf("%.1f", p.EndRSSMB), fmt.Sprintf("%.2f", p.CPUJobS)
		if p.Name == "submit" {
			end, job = "-", fmt.Sprintf("%.2f", p.CPUTotalS)
		}
		fmt.Fprintf(tw, "  %-*s\t%.1f\t%s\t%s\t%.2f\t  %s\n", width, p.Name, p.PeakRSSMB, end, job, p.CPUTotalS, p.Exit)
	}
	_ = tw.Flush()
}

// round rounds x to digits decimal places.
func round(x float64, digits int) float64 {
	p := math.Pow(10, float64(digits))
	return math.Round(x*p) / p
}
