package main

import (
	"bytes"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync/atomic"
	"syscall"
	"time"
)

// tailLines is how many lines of a process's log a failed run shows.
const tailLines = 30

// proc is one long-running warren child process, its stdout and stderr
// going to its own log file in the temporary directory.
type proc struct {
	name     string
	cmd      *exec.Cmd
	logPath  string
	stopping atomic.Bool   // set before SIGTERM: an exit is then expected
	done     chan struct{} // closed once the process has exited
}

// startProc starts bin with args as the process called name. When it
// exits before stopAll stopped it, it is sent to exits (which must have
// room for every process).
func startProc(name, bin string, args []string, dir string, exits chan<- *proc) (*proc, error) {
	p := &proc{name: name, logPath: filepath.Join(dir, name+".log"), done: make(chan struct{})}
	logFile, err := os.Create(p.logPath)
	if err != nil {
		return nil, err
	}
	p.cmd = exec.Command(bin, args...)
	p.cmd.Stdout, p.cmd.Stderr = logFile, logFile
	p.cmd.Env, p.cmd.SysProcAttr = childEnv(), sysProcAttr()
	if err := p.cmd.Start(); err != nil {
		_ = logFile.Close()
		return nil, fmt.Errorf("start %s: %w", name, err)
	}
	go func() {
		_ = p.cmd.Wait()
		_ = logFile.Close()
		close(p.done)
		if !p.stopping.Load() {
			exits <- p
		}
	}()
	return p, nil
}

// pid is the process id.
func (p *proc) pid() int { return p.cmd.Process.Pid }

// exited reports whether the process has exited.
func (p *proc) exited() bool {
	select {
	case <-p.done:
		return true
	default:
		return false
	}
}

// exitText describes how the process ended ("running" while it runs).
func (p *proc) exitText() string {
	if !p.exited() {
		return "running"
	}
	return exitText(p.cmd.ProcessState)
}

// exitedError is the error for a process that exited on its own.
func (p *proc) exitedError() error {
	return fmt.Errorf("%s exited unexpectedly (%s); see its log above", p.name, p.exitText())
}

// exitText describes a finished process's end: "exit 0", "exit 1",
// "signal: killed".
func exitText(st *os.ProcessState) string {
	if st == nil {
		return "not started"
	}
	if ws, ok := st.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
		return "signal: " + ws.Signal().String()
	}
	return fmt.Sprintf("exit %d", st.ExitCode())
}

// stopAll sends SIGTERM to every process still running, waits up to
// grace for all of them to exit, then kills the rest, and returns the
// names of those it killed.
func stopAll(procs []*proc, grace time.Duration) (killed []string) {
	for _, p := range procs {
		p.stopping.Store(true)
		if !p.exited() {
			_ = p.cmd.Process.Signal(syscall.SIGTERM)
		}
	}
	deadline := time.NewTimer(grace)
	defer deadline.Stop()
	for _, p := range procs {
		select {
		case <-p.done:
		case <-deadline.C:
			for _, q := range procs {
				if !q.exited() {
					killed = append(killed, q.name)
					_ = q.cmd.Process.Kill()
				}
			}
			<-p.done
		}
	}
	return killed
}

// childEnv is this process's environment without WARREN_* variables, so
// that every setting a child uses is on its command line (an API token
// or retry tiers from the caller's shell would change the run).
func childEnv() []string {
	var env []string
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "WARREN_") {
			env = append(env, kv)
		}
	}
	return env
}

// tail returns the last n lines of the file at path (or why it cannot),
// each ending in a newline.
func tail(path string, n int) string {
	const window = 64 << 10
	fh, err := os.Open(path)
	if err != nil {
		return fmt.Sprintf("(%v)\n", err)
	}
	defer fh.Close()
	if st, err := fh.Stat(); err == nil && st.Size() > window {
		_, _ = fh.Seek(-window, io.SeekEnd)
	}
	data, err := io.ReadAll(fh)
	if err != nil {
		return fmt.Sprintf("(%v)\n", err)
	}
	return lastLines(data, n)
}

// lastLines returns the last n lines of data, each ending in a newline;
// "(empty)" for no lines.
func lastLines(data []byte, n int) string {
	data = bytes.TrimRight(data, "\n")
	if len(data) == 0 {
		return "(empty)\n"
	}
	lines := bytes.Split(data, []byte("\n"))
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return string(bytes.Join(lines, []byte("\n"))) + "\n"
}
