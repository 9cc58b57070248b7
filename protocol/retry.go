package protocol

import (
	"fmt"
	"strings"
	"time"
)

// DefaultRetryTiers are the delays of the retry tiers: the nth retry of a
// task waits DefaultRetryTiers[n-1], the last tier for every retry after.
var DefaultRetryTiers = []time.Duration{time.Second, 5 * time.Second, 30 * time.Second, 2 * time.Minute, 10 * time.Minute}

// RetryTierName names a delay tier by its delay, compactly: "1s", "250ms",
// "2m", "1h30m".
func RetryTierName(d time.Duration) string {
	if d%time.Second != 0 {
		return fmt.Sprintf("%dms", d.Milliseconds())
	}
	s := d.String() // e.g. "2m0s", "1h30m0s"
	if strings.HasSuffix(s, "m0s") {
		s = strings.TrimSuffix(s, "0s")
	}
	if strings.HasSuffix(s, "h0m") {
		s = strings.TrimSuffix(s, "0m")
	}
	return s
}

// RetryTier returns the index of the tier that the given retry (1 for the
// first) waits in, among n tiers.
func RetryTier(retry, n int) int {
	if retry < 1 {
		retry = 1
	}
	return min(retry, n) - 1
}
