// Package autobatch chooses how many tasks travel in one message for the
// jobs that leave it to warren (warren.Policy.BatchSize 0).
//
// The size comes from two things the server observes as a job runs: how
// long its tasks take in their handlers (from the times its results
// carry, which the aggregator hands to Observe), and how many consumers
// its work queue has (which the relay reads with each queue depth). A
// message then holds about Target of handler work: fast tasks travel in
// batches that share the broker's per-message cost, slow tasks one per
// message so that the work stays balanced between worker slots.
//
// Until a job's first results arrive, its tasks go one per message, and
// only as many as its queue's consumers have slots (a probe): the rest
// waits for the first durations (ProbeWait at most, after which tasks go
// one per message until durations are known), so that a job of fast tasks
// does not go out as thousands of single messages while its first results
// are on their way. At the end of a job the batches shrink so that every
// slot gets a message.
package autobatch

import (
	"sync"
	"time"

	"github.com/warrenhq/warren/store"
)

// Defaults of Config.
const (
	// DefaultTarget is Config.Target's default: the handler work one
	// message carries at most, as estimated. A worker slot thus runs at
	// most this much more than another at the end of a job.
	DefaultTarget = 10 * time.Millisecond
	// DefaultMax is Config.Max's default: past it, a larger batch saves
	// little, and a redelivered batch (split into single tasks) costs
	// more.
	DefaultMax = 64
	// DefaultSlotsPerConsumer is Config.SlotsPerConsumer's default: the
	// messages a default warren worker holds (its prefetch, twice its
	// concurrency of 8).
	DefaultSlotsPerConsumer = 16
	// DefaultProbeWait is Config.ProbeWait's default.
	DefaultProbeWait = 250 * time.Millisecond
	// forgetAfter is how long a job's estimate is kept without a new
	// result: a job closed by another server is never Forgotten here.
	forgetAfter = time.Hour
	// weight is the share of a new duration in a job's running mean.
	weight = 0.1
)

// Config configures a Sizer; the zero value uses the defaults.
type Config struct {
	// Target is the handler work one message should carry; 0 means
	// DefaultTarget.
	Target time.Duration
	// Max is the largest batch chosen (at most warren.MaxBatchSize); 0
	// means DefaultMax.
	Max int
	// SlotsPerConsumer is how many messages each consumer of a work
	// queue is taken to run at once; 0 means DefaultSlotsPerConsumer.
	SlotsPerConsumer int
	// ProbeWait is how long a job whose probe is out waits for its first
	// durations before its tasks go on, one per message; 0 means
	// DefaultProbeWait.
	ProbeWait time.Duration
	// OnKnown, when set, is called (without locks held) when a job's
	// first durations arrive, so that its tasks held back behind the
	// probe go out at once: the server wakes the relay.
	OnKnown func()
	// Now is the clock; nil means time.Now.
	Now func() time.Time
}

// Sizer estimates each job's task duration and chooses its batch size.
// It is safe for concurrent use.
type Sizer struct {
	cfg Config

	mu      sync.Mutex
	jobs    map[string]*estimate
	sweepAt time.Time
}

// estimate is one job's running mean of its tasks' handler durations,
// or its probe while none is known.
type estimate struct {
	mean  float64 // nanoseconds, once known
	known bool
	seen  time.Time // the last result, or the probe
	// probed is how many tasks the probe offered, from probeAt.
	probed  int
	probeAt time.Time
}

// New returns a Sizer with cfg's settings.
func New(cfg Config) *Sizer {
	if cfg.Target <= 0 {
		cfg.Target = DefaultTarget
	}
	if cfg.Max <= 0 {
		cfg.Max = DefaultMax
	}
	if cfg.SlotsPerConsumer <= 0 {
		cfg.SlotsPerConsumer = DefaultSlotsPerConsumer
	}
	if cfg.ProbeWait <= 0 {
		cfg.ProbeWait = DefaultProbeWait
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	return &Sizer{cfg: cfg, jobs: map[string]*estimate{}}
}

// Observe takes the handler durations of outcomes, as recorded: each
// outcome with both times counts, and a run of consecutive outcomes of
// one job with the same start and finish (one call of a batch handler)
// counts as that call's time shared between its tasks. It does not keep
// outcomes.
func (s *Sizer) Observe(outcomes []store.Outcome) {
	if s.observe(outcomes) && s.cfg.OnKnown != nil {
		s.cfg.OnKnown()
	}
}

// observe is Observe, reporting whether a job's first durations came.
func (s *Sizer) observe(outcomes []store.Outcome) (first bool) {
	now := s.cfg.Now()
	s.mu.Lock()
	defer s.mu.Unlock()
	for i := 0; i < len(outcomes); {
		o := outcomes[i]
		j := i + 1
		if o.StartedAt == nil || o.FinishedAt == nil {
			i = j
			continue
		}
		for j < len(outcomes) && sameCall(o, outcomes[j]) {
			j++
		}
		d := max(o.FinishedAt.Sub(*o.StartedAt), 0)
		per := float64(d) / float64(j-i)
		e := s.jobs[o.JobID]
		if e == nil {
			e = &estimate{}
			s.jobs[o.JobID] = e
		}
		if !e.known {
			e.mean, e.known, first = per, true, true
		}
		for range j - i {
			e.mean += weight * (per - e.mean)
		}
		e.seen = now
		i = j
	}
	if now.After(s.sweepAt) {
		s.sweep(now)
	}
	return first
}

// sameCall reports whether b has a's job and run times: the two came out
// of one call of a batch handler.
func sameCall(a, b store.Outcome) bool {
	return b.JobID == a.JobID && b.StartedAt != nil && b.FinishedAt != nil &&
		b.StartedAt.Equal(*a.StartedAt) && b.FinishedAt.Equal(*a.FinishedAt)
}

// sweep drops the estimates of jobs without a result for forgetAfter;
// the caller holds mu.
func (s *Sizer) sweep(now time.Time) {
	for id, e := range s.jobs {
		if now.Sub(e.seen) > forgetAfter {
			delete(s.jobs, id)
		}
	}
	s.sweepAt = now.Add(forgetAfter / 4)
}

// Forget drops job id's estimate, for example once it closed.
func (s *Sizer) Forget(id string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	delete(s.jobs, id)
}

// Mean returns job id's estimated handler duration per task, and whether
// there is one.
func (s *Sizer) Mean(id string) (time.Duration, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	e, ok := s.jobs[id]
	if !ok || !e.known {
		return 0, false
	}
	return time.Duration(e.mean), true
}

// Size returns, for job j in a relay round, how many of its tasks go in
// one message and how many it may send in all (most, at most j.Pending):
//
//   - While none of its tasks' durations is known: one per message, and
//     first a probe of as many tasks as its queue's consumers have slots
//     (DefaultSlotsPerConsumer when consumers is 0), then nothing until
//     the durations come or ProbeWait has passed, then no limit.
//   - Then as many tasks as fit in Target (at least 1, at most Max), and
//     when j.Pending is all the job has left (atLeast false) and its
//     queue has consumers, no more than spreads those tasks over every
//     consumer's slots.
func (s *Sizer) Size(j store.PendingJob, atLeast bool, consumers int) (size, most int) {
	slots := max(consumers, 1) * s.cfg.SlotsPerConsumer
	now := s.cfg.Now()
	s.mu.Lock()
	e := s.jobs[j.ID]
	if e == nil {
		e = &estimate{seen: now, probeAt: now}
		s.jobs[j.ID] = e
	}
	if !e.known {
		defer s.mu.Unlock()
		if now.Sub(e.probeAt) > s.cfg.ProbeWait {
			return 1, j.Pending
		}
		most = min(max(slots-e.probed, 0), j.Pending)
		e.probed += most
		return 1, most
	}
	mean := time.Duration(e.mean)
	s.mu.Unlock()
	b := s.cfg.Max
	if mean > 0 {
		b = int(min(int64(s.cfg.Target/mean), int64(s.cfg.Max)))
	}
	if !atLeast && consumers > 0 {
		b = min(b, (j.Pending+slots-1)/slots)
	}
	return max(b, 1), j.Pending
}
