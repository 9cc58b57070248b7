package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"
	"sync"
	"time"
)

// clockTicks is the unit of utime and stime in /proc/PID/stat: USER_HZ,
// 100 on every Linux architecture Go runs on (sysconf is out of reach
// without cgo).
const clockTicks = 100

// usage is what the sampler knows about one process.
type usage struct {
	hwmKB    int64 // VmHWM: the kernel's peak resident set, last read
	rssKB    int64 // VmRSS, last read
	cpuStart int64 // utime+stime ticks when the job was submitted
	cpuEnd   int64 // utime+stime ticks when the job was seen closed
}

// sampler reads each process's memory from /proc every interval, and
// its CPU time at the start and the end of the job.
type sampler struct {
	every    time.Duration
	quit     chan struct{}
	quitOnce sync.Once

	mu    sync.Mutex
	procs []*proc
	stats map[*proc]*usage
}

// newSampler returns a sampler that reads every interval once run.
func newSampler(every time.Duration) *sampler {
	return &sampler{every: every, quit: make(chan struct{}), stats: map[*proc]*usage{}}
}

// add samples p from now on.
func (s *sampler) add(p *proc) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.procs = append(s.procs, p)
	s.stats[p] = &usage{}
	s.sampleLocked(p)
}

// run samples every process every interval until ctx is done or stop is
// called.
func (s *sampler) run(ctx context.Context) {
	t := time.NewTicker(s.every)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-s.quit:
			return
		case <-t.C:
			s.mu.Lock()
			for _, p := range s.procs {
				s.sampleLocked(p)
			}
			s.mu.Unlock()
		}
	}
}

// stop ends run; it may be called more than once.
func (s *sampler) stop() { s.quitOnce.Do(func() { close(s.quit) }) }

// sampleLocked reads p's memory, keeping the last values read while p
// runs (a process that has exited has nothing to read).
func (s *sampler) sampleLocked(p *proc) {
	if p.exited() {
		return
	}
	hwm, rss, err := readStatus(p.pid())
	if err != nil {
		return
	}
	u := s.stats[p]
	u.hwmKB, u.rssKB = max(u.hwmKB, hwm), rss
}

// markCPU records every process's CPU time at the job's start.
func (s *sampler) markCPU() {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, p := range s.procs {
		if ticks, err := readCPUTicks(p.pid()); err == nil {
			s.stats[p].cpuStart = ticks
		}
	}
}

// finish takes the last sample of every process and records its CPU time
// at the job's end. It must run before the processes are stopped: their
// VmHWM is gone once they exit.
func (s *sampler) finish() {
	s.stop()
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, p := range s.procs {
		s.sampleLocked(p)
		if ticks, err := readCPUTicks(p.pid()); err == nil && !p.exited() {
			s.stats[p].cpuEnd = ticks
		}
	}
}

// rssLine is every process's last VmRSS, for progress lines.
func (s *sampler) rssLine() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	parts := make([]string, 0, len(s.procs))
	for _, p := range s.procs {
		parts = append(parts, fmt.Sprintf("%s %.0f", p.name, kbToMB(s.stats[p].rssKB)))
	}
	return strings.Join(parts, ", ")
}

// report is p's line of the report; p must have exited.
func (s *sampler) report(p *proc) procReport {
	s.mu.Lock()
	u := *s.stats[p]
	s.mu.Unlock()
	st := p.cmd.ProcessState
	r := procReport{Name: p.name, PeakRSSMB: round(kbToMB(u.hwmKB), 1), EndRSSMB: round(kbToMB(u.rssKB), 1), Exit: p.exitText()}
	// VmHWM is read at most every interval and last just before the
	// stop; the rusage peak covers the whole life, shutdown included.
	if ru := round(float64(maxRSSBytes(st))/(1<<20), 1); ru > r.PeakRSSMB {
		r.PeakRSSMB = ru
	}
	if u.cpuEnd > 0 {
		r.CPUJobS = round(float64(u.cpuEnd-u.cpuStart)/clockTicks, 2)
	}
	if st != nil {
		r.CPUTotalS = round((st.UserTime() + st.SystemTime()).Seconds(), 2)
	}
	return r
}

// readStatus returns VmHWM and VmRSS of process pid in kB.
func readStatus(pid int) (hwmKB, rssKB int64, err error) {
	data, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/status")
	if err != nil {
		return 0, 0, err
	}
	return parseStatus(data)
}

// parseStatus extracts VmHWM and VmRSS (in kB) from a /proc/PID/status.
func parseStatus(data []byte) (hwmKB, rssKB int64, err error) {
	var found int
	for line := range bytes.Lines(data) {
		key, val, ok := strings.Cut(string(line), ":")
		if !ok || (key != "VmHWM" && key != "VmRSS") {
			continue
		}
		n, err := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(val), " kB"), 10, 64)
		if err != nil {
			return 0, 0, fmt.Errorf("/proc status %s: %q: %w", key, val, err)
		}
		if key == "VmHWM" {
			hwmKB = n
		} else {
			rssKB = n
		}
		found++
	}
	if found != 2 {
		return 0, 0, errors.New("/proc status: no VmHWM and VmRSS lines")
	}
	return hwmKB, rssKB, nil
}

// readCPUTicks returns utime+stime of process pid in clock ticks.
func readCPUTicks(pid int) (int64, error) {
	data, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return 0, err
	}
	return parseStat(data)
}

// parseStat extracts utime+stime (fields 14 and 15) from a
// /proc/PID/stat. The command name, field 2, is in parentheses and may
// hold spaces and parentheses itself, so fields are counted after the
// last ')'.
func parseStat(data []byte) (int64, error) {
	i := bytes.LastIndexByte(data, ')')
	if i < 0 {
		return 0, errors.New("/proc stat: no command name")
	}
	fields := strings.Fields(string(data[i+1:])) // fields[0] is field 3, the state
	if len(fields) < 13 {
		return 0, fmt.Errorf("/proc stat: %d fields after the command name, want at least 13", len(fields))
	}
	utime, err1 := strconv.ParseInt(fields[11], 10, 64)
	stime, err2 := strconv.ParseInt(fields[12], 10, 64)
	if err := errors.Join(err1, err2); err != nil {
		return 0, fmt.Errorf("/proc stat: %w", err)
	}
	return utime + stime, nil
}

// kbToMB converts kilobytes to megabytes (MiB).
func kbToMB(kb int64) float64 { return float64(kb) / 1024 }
