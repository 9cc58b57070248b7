package bench

import (
	"fmt"
	"io"
)

// Print writes the report as the table `warren bench` shows.
func (r Report) Print(w io.Writer) {
	per := "one message per task"
	switch {
	case r.BatchSize == 0:
		per = "warren choosing the batch size (no batch_size; the ceiling: one message per task)"
	case r.BatchSize > 1:
		per = fmt.Sprintf("warren with batch_size %d (the ceiling: one message per task)", r.BatchSize)
	}
	tasks := "no-op tasks"
	if r.TaskDurationMs > 0 {
		tasks = fmt.Sprintf("tasks of %g ms", r.TaskDurationMs)
	}
	fmt.Fprintf(w, "warren bench: %d %s, %d workers, %s\n\n", r.Tasks, tasks, r.Workers, per)
	row := func(k, v string) { fmt.Fprintf(w, "  %-34s %s\n", k, v) }
	if r.CeilingTasksPerS > 0 {
		row("broker ceiling", fmt.Sprintf("%.0f tasks/s (prefetch %d)", r.CeilingTasksPerS, r.CeilingPrefetch))
	}
	row("warren end to end", fmt.Sprintf("%.0f tasks/s", r.WarrenTasksPerS))
	if r.CeilingTasksPerS > 0 {
		row("ratio warren/ceiling", fmt.Sprintf("%.2f (medians of %d interleaved rounds)", r.Ratio, len(r.RoundsWarren)))
		row("rounds: ceiling", fmt.Sprint(r.RoundsCeiling))
	}
	row("rounds: warren", fmt.Sprint(r.RoundsWarren))
	row("submit (CreateJob)", fmt.Sprintf("%.3f s", r.SubmitS))
	row("warren CPU per task", fmt.Sprintf("%.1f µs (all of warren's parts, this process)", r.CPUPerTaskUs))
	row("aggregator transactions", fmt.Sprintf("%d, %.1f messages each on average", r.AggregatorBatches, r.MeanBatchMessages))
	row("time to first result", fmt.Sprintf("%.3f s", r.FirstResultS))
	row("submit to job closed", fmt.Sprintf("%.3f s", r.TotalS))
	row("task latency queued->recorded p50", fmt.Sprintf("%.1f ms", r.P50Ms))
	row("task latency queued->recorded p99", fmt.Sprintf("%.1f ms", r.P99Ms))
	row(fmt.Sprintf("one-task job p50 (%d jobs)", r.OneTaskJobs), fmt.Sprintf("%.1f ms submit -> closed", r.OneTaskP50Ms))
	row(fmt.Sprintf("one-task job p99 (%d jobs)", r.OneTaskJobs), fmt.Sprintf("%.1f ms", r.OneTaskP99Ms))
	row("peak RSS", fmt.Sprintf("%.1f MB, %s", r.PeakRSSMB, r.PeakRSSNote))
}
