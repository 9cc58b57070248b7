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
	start    time.Time
	last     time.Time
	lastLine string
	drawn    bool
}

func newProgress(w io.Writer) *progress {
	return &progress{w: w, tty: isTerminal(w), start: time.Now()}
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
	rate := float64(done) / max(time.Since(p.start).Seconds(), 1e-3)
	if p.tty {
		const width = 30
		filled := 0
		if j.ExpectedTasks > 0 {
			filled = int(int64(width) * done / j.ExpectedTasks)
		}
		fmt.Fprintf(p.w, "\r[%s%s] %5.1f%% %d/%d failed %d  %.0f tasks/s  %-9s",
			strings.Repeat("#", filled), strings.Repeat("-", width-filled),
			percent(done, j.ExpectedTasks), done, j.ExpectedTasks, j.FailedTasks, rate, j.State)
		p.drawn = true
		return
	}
	line := fmt.Sprintf("progress: %s %d/%d tasks done (%d failed), %.0f tasks/s", j.State, done, j.ExpectedTasks, j.FailedTasks, rate)
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

func percent(n, of int64) float64 {
	if of <= 0 {
		return 100
	}
	return 100 * float64(n) / float64(of)
}
