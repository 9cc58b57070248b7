package main

import (
	"os"
	"syscall"
)

// sysProcAttr puts a child in its own process group, so a Ctrl-C in the
// terminal reaches only this program, which then stops the children in
// order; and has the kernel kill the child should this program die
// without stopping it.
func sysProcAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
}

// maxRSSBytes is a finished process's peak RSS from its rusage (ru_maxrss
// is in kilobytes on Linux).
func maxRSSBytes(st *os.ProcessState) int64 {
	if st == nil {
		return 0
	}
	if ru, ok := st.SysUsage().(*syscall.Rusage); ok {
		return ru.Maxrss * 1024
	}
	return 0
}
