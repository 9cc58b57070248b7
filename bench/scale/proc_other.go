//go:build !linux

package main

import (
	"os"
	"syscall"
)

// sysProcAttr is nil off Linux: children stay in this program's process
// group and receive a terminal's Ctrl-C themselves.
func sysProcAttr() *syscall.SysProcAttr { return nil }

// maxRSSBytes is unknown off Linux (the rusage units differ by system).
func maxRSSBytes(*os.ProcessState) int64 { return 0 }
