package bench

import (
	"math"
	"sort"
	"time"
)

// medianIndex returns the index of the median of n values (the lower
// one for an even n); value(i) is the i-th.
func medianIndex(n int, value func(i int) float64) int {
	idx := make([]int, n)
	for i := range idx {
		idx[i] = i
	}
	sort.Slice(idx, func(a, b int) bool { return value(idx[a]) < value(idx[b]) })
	return idx[(n-1)/2]
}

func round1(x float64) float64 { return math.Round(x*10) / 10 }

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

// percentile is the nearest-rank percentile of sorted durations.
func percentile(sorted []time.Duration, p float64) time.Duration {
	if len(sorted) == 0 {
		return 0
	}
	i := int(math.Ceil(p/100*float64(len(sorted)))) - 1
	return sorted[min(max(i, 0), len(sorted)-1)]
}
