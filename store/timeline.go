package store

import "time"

// MaxTimelineBuckets is the most buckets TimelineSpanOf gives a timeline.
const MaxTimelineBuckets = 60

// timelineWidths are the bucket widths a timeline may have, smallest
// first: round numbers, so that bucket starts read well on a chart.
var timelineWidths = []time.Duration{
	time.Second, 2 * time.Second, 5 * time.Second, 10 * time.Second, 15 * time.Second, 30 * time.Second,
	time.Minute, 2 * time.Minute, 5 * time.Minute, 10 * time.Minute, 15 * time.Minute, 30 * time.Minute,
	time.Hour, 2 * time.Hour, 3 * time.Hour, 6 * time.Hour, 12 * time.Hour, 24 * time.Hour,
}

// TimelineSpan is the time a job's timeline covers: N buckets of width
// Bucket, the first starting at Start.
type TimelineSpan struct {
	Start  time.Time
	Bucket time.Duration
	N      int
}

// TimelineBucket counts the tasks of a job that finished in one bucket of
// its timeline.
type TimelineBucket struct {
	// Start is when the bucket starts; it ends where the next starts.
	Start     time.Time
	Completed int64
	Failed    int64
}

// TimelineSpanOf returns the span of at most maxBuckets buckets (at least
// 1; MaxTimelineBuckets when maxBuckets <= 0) that covers from to to: the
// narrowest round bucket width that fits (a whole number of days past a
// day), the first bucket starting at from truncated to that width, the last
// holding to.
func TimelineSpanOf(from, to time.Time, maxBuckets int) TimelineSpan {
	if maxBuckets <= 0 {
		maxBuckets = MaxTimelineBuckets
	}
	from = from.UTC()
	if to.Before(from) {
		to = from
	}
	fits := func(w time.Duration) (TimelineSpan, bool) {
		start := from.Truncate(w)
		n := int(to.Sub(start)/w) + 1
		return TimelineSpan{Start: start, Bucket: w, N: n}, n <= maxBuckets
	}
	for _, w := range timelineWidths {
		if span, ok := fits(w); ok {
			return span
		}
	}
	day := 24 * time.Hour
	days := to.Sub(from)/(time.Duration(maxBuckets)*day) + 1
	for {
		if span, ok := fits(days * day); ok {
			return span
		}
		days++
	}
}

// Index returns the bucket of span that holds t: a time before the span
// counts in the first bucket, one after it in the last.
func (s TimelineSpan) Index(t time.Time) int {
	if !t.After(s.Start) {
		return 0
	}
	return min(int(t.Sub(s.Start)/s.Bucket), s.N-1)
}
