package main

import (
	"bytes"
	"context"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"time"
)

// proc is one running warren process; its output goes to a log file.
type proc struct {
	name string
	cmd  *exec.Cmd
	log  string
	done chan struct{}
	err  error
}

// startProc starts bin with args and env, its output in dir/name.log.
func startProc(bin, dir, name string, env []string, args ...string) (*proc, error) {
	logPath := filepath.Join(dir, name+".log")
	f, err := os.OpenFile(logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return nil, err
	}
	cmd := exec.Command(bin, args...)
	cmd.Env = append(os.Environ(), env...)
	cmd.Stdout, cmd.Stderr = f, f
	if err := cmd.Start(); err != nil {
		f.Close()
		return nil, err
	}
	p := &proc{name: name, cmd: cmd, log: logPath, done: make(chan struct{})}
	go func() {
		p.err = cmd.Wait()
		f.Close()
		close(p.done)
	}()
	return p, nil
}

func (p *proc) exited() bool {
	select {
	case <-p.done:
		return true
	default:
		return false
	}
}

// kill9 sends SIGKILL and waits for the process to be gone.
func (p *proc) kill9() {
	if p.exited() {
		return
	}
	_ = p.cmd.Process.Signal(syscall.SIGKILL)
	<-p.done
}

// term sends SIGTERM and waits up to d; it returns the exit code, or -1
// and kills the process when it did not exit in time.
func (p *proc) term(d time.Duration) (int, bool) {
	if !p.exited() {
		_ = p.cmd.Process.Signal(syscall.SIGTERM)
	}
	select {
	case <-p.done:
		return p.cmd.ProcessState.ExitCode(), true
	case <-time.After(d):
		p.kill9()
		return -1, false
	}
}

// tail returns the last n lines of the process's log.
func (p *proc) tail(n int) string {
	b, err := os.ReadFile(p.log)
	if err != nil {
		return err.Error()
	}
	lines := strings.Split(strings.TrimRight(string(b), "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}

// freeAddr returns a loopback address nobody listens on.
func freeAddr() (string, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", err
	}
	defer l.Close()
	return l.Addr().String(), nil
}

var httpClient = &http.Client{Timeout: 10 * time.Second}

// waitReady polls base/readyz until it answers 200.
func waitReady(base string, p *proc, d time.Duration) error {
	deadline := time.Now().Add(d)
	for {
		resp, err := httpClient.Get(base + "/readyz")
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return nil
			}
		}
		if p != nil && p.exited() {
			return fmt.Errorf("%s exited: %v\n%s", p.name, p.err, p.tail(20))
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%s not ready after %s: %v", base, d, err)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// run runs a command to its end, bounded by d, returning its combined output.
func run(d time.Duration, name string, args ...string) (string, error) {
	return runEnv(d, nil, name, args...)
}

// runEnv is run with env added to the environment.
func runEnv(d time.Duration, env []string, name string, args ...string) (string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	defer cancel()
	cmd := exec.CommandContext(ctx, name, args...)
	if env != nil {
		cmd.Env = append(os.Environ(), env...)
	}
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	cmd.WaitDelay = 2 * time.Second
	err := cmd.Run()
	if err != nil {
		return out.String(), fmt.Errorf("%s %s: %v: %s", name, strings.Join(args, " "), err, strings.TrimSpace(out.String()+" "+errb.String()))
	}
	return out.String(), nil
}

// cleanups are run once at exit, also on a signal: they restore the
// broker and database to their normal state.
var (
	cleanupMu sync.Mutex
	cleanups  = map[string]func(){}
)

func addCleanup(key string, f func()) {
	cleanupMu.Lock()
	defer cleanupMu.Unlock()
	cleanups[key] = f
}

func removeCleanup(key string) {
	cleanupMu.Lock()
	defer cleanupMu.Unlock()
	delete(cleanups, key)
}

func runCleanups() {
	cleanupMu.Lock()
	fs := cleanups
	cleanups = map[string]func(){}
	cleanupMu.Unlock()
	for _, f := range fs {
		f()
	}
}

// scenarioCleanup removes the running scenario's topology, schema and
// temp dir when the suite is interrupted.
var scenarioCleanup func()

func setScenarioCleanup(f func()) {
	cleanupMu.Lock()
	defer cleanupMu.Unlock()
	scenarioCleanup = f
}

func runScenarioCleanup() {
	cleanupMu.Lock()
	f := scenarioCleanup
	scenarioCleanup = nil
	cleanupMu.Unlock()
	if f != nil {
		f()
	}
}
