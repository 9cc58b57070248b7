package webhooks

import "time"

// DefaultDelays are Schedule.Delays by default: the waits after the
// first, second, ... failed attempt, the last repeating.
var DefaultDelays = []time.Duration{10 * time.Second, 30 * time.Second, time.Minute, 5 * time.Minute,
	15 * time.Minute, time.Hour}

// DefaultMaxAge is Schedule.MaxAge by default: a delivery is tried for a
// day.
const DefaultMaxAge = 24 * time.Hour

// DefaultJitter is Schedule.Jitter by default.
const DefaultJitter = 0.2

// Schedule decides when a delivery whose attempt failed is tried again:
// exponential backoff with jitter, until MaxAge after the delivery was
// made.
type Schedule struct {
	// Delays are the waits after the 1st, 2nd, ... failed attempt; the
	// last repeats. nil means DefaultDelays.
	Delays []time.Duration
	// Jitter spreads each wait over d*(1-Jitter) to d*(1+Jitter), so that
	// the deliveries of many jobs that closed together, to one receiver
	// that was down, do not come back together. 0 means none.
	Jitter float64
	// MaxAge is how long after it was made a delivery is tried; 0 means
	// DefaultMaxAge.
	MaxAge time.Duration
}

// Next returns when to try a delivery made at created again after its
// attempt number attempt (1 for the first) failed at at; rnd is a random
// number in [0, 1) for the jitter. It returns false when the delivery
// is to be given up: at is MaxAge or more after created. The last try is
// at created+MaxAge: a wait that would pass it is cut short.
func (s Schedule) Next(created time.Time, attempt int, at time.Time, rnd float64) (time.Time, bool) {
	delays, maxAge := s.Delays, s.MaxAge
	if len(delays) == 0 {
		delays = DefaultDelays
	}
	if maxAge <= 0 {
		maxAge = DefaultMaxAge
	}
	deadline := created.Add(maxAge)
	if !at.Before(deadline) {
		return time.Time{}, false
	}
	d := delays[min(max(attempt, 1), len(delays))-1]
	if s.Jitter > 0 {
		d = time.Duration(float64(d) * (1 - s.Jitter + 2*s.Jitter*rnd))
	}
	next := at.Add(d)
	if next.After(deadline) {
		next = deadline
	}
	return next, true
}
