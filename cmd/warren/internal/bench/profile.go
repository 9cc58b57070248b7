package bench

import (
	"fmt"
	"os"
	"runtime/pprof"
)

// startCPUProfile starts a CPU profile into path ("" for none) and returns
// the function that stops it and closes the file.
func startCPUProfile(path string) (func() error, error) {
	if path == "" {
		return func() error { return nil }, nil
	}
	fh, err := os.Create(path)
	if err != nil {
		return nil, fmt.Errorf("CPUProfile: %w", err)
	}
	if err := pprof.StartCPUProfile(fh); err != nil {
		_ = fh.Close()
		return nil, fmt.Errorf("CPUProfile: %w", err)
	}
	return func() error {
		pprof.StopCPUProfile()
		return fh.Close()
	}, nil
}

// writeAllocProfile writes the allocs profile (every allocation since the
// process started) to path.
func writeAllocProfile(path string) error {
	fh, err := os.Create(path)
	if err != nil {
		return fmt.Errorf("MemProfile: %w", err)
	}
	if err := pprof.Lookup("allocs").WriteTo(fh, 0); err != nil {
		_ = fh.Close()
		return fmt.Errorf("MemProfile: %w", err)
	}
	return fh.Close()
}
