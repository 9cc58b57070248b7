//go:build unix

package sqlite

import (
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// lockWait is how long lockFile keeps trying a lock that is held before
// it reports the file in use. A lock just released can still be held for
// a moment by a child process between its fork and its exec (the child
// shares the parent's open files until exec closes them; os/exec forks
// while other goroutines run), and a server restarted at once after the
// old one exits should not be refused for that.
const lockWait = time.Second

// flockSoon takes an exclusive flock(2) on f, trying again for up to
// lockWait while another open file holds it.
func flockSoon(f *os.File) error {
	deadline := time.Now().Add(lockWait)
	for {
		err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB)
		if !errors.Is(err, syscall.EWOULDBLOCK) || time.Now().After(deadline) {
			return err
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// lockFile takes the store's lock on path: an exclusive flock(2) on
// path+".lock", held until release. flock conflicts between open files,
// not processes, so a second Store in the same process is refused too.
// The lock file holds the pid of its holder, for the message of the one
// refused; it is never removed (a removal would race a new holder).
func lockFile(path string) (release func() error, err error) {
	name := path + ".lock"
	f, err := os.OpenFile(name, os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		return nil, fmt.Errorf("sqlite: open %s: %w", name, err)
	}
	if err := flockSoon(f); err != nil {
		holder := "another process"
		if b, rerr := os.ReadFile(name); rerr == nil && strings.TrimSpace(string(b)) != "" {
			if pid, perr := strconv.Atoi(strings.TrimSpace(string(b))); perr == nil {
				holder = "process " + strconv.Itoa(pid)
				if pid == os.Getpid() {
					holder = "this process"
				}
			}
		}
		f.Close()
		if errors.Is(err, syscall.EWOULDBLOCK) {
			return nil, &inUseError{path: path, holder: holder}
		}
		return nil, fmt.Errorf("sqlite: lock %s: %w", name, err)
	}
	if err := f.Truncate(0); err == nil {
		_, _ = f.WriteAt([]byte(strconv.Itoa(os.Getpid())+"\n"), 0)
	}
	return f.Close, nil // closing the file releases the lock
}
