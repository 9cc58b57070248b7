//go:build !unix

package bench

import "time"

// cpuTime is 0 where getrusage is not available.
func cpuTime() time.Duration { return 0 }
