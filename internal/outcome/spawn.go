package outcome

import (
	"encoding/json"
	"errors"
	"fmt"
	"sync"

	"github.com/warrenhq/warren/protocol"
)

// Spawns gathers the tasks one run of a task spawns (worker.Task.Spawn),
// for its completed result to carry. The worker and worker/workertest
// both keep them here, so that the rules are written once. It is safe
// for concurrent use: a handler may spawn from several goroutines.
type Spawns struct {
	mu       sync.Mutex
	payloads []json.RawMessage
	bytes    int
	limit    int
	refuse   error
	ended    bool
}

// NewSpawns returns the spawns of one run, whose payloads may take at
// most limit bytes of JSON in all (0: no limit). A non-nil refuse is the
// error of every Add: a run that may not spawn (a reduce task).
func NewSpawns(limit int, refuse error) *Spawns {
	s := new(Spawns)
	s.Init(limit, refuse)
	return s
}

// Init makes the zero s the spawns of a run as NewSpawns does: the worker
// allocates a delivery's in one slice.
func (s *Spawns) Init(limit int, refuse error) {
	s.limit, s.refuse = limit, refuse
}

// ErrReduceSpawn is the error of Spawn in a reduce task: its job's map
// tasks are all finished, and its result is the job's.
var ErrReduceSpawn = errors.New("worker: a reduce task cannot spawn tasks")

// errSpawnEnded is the error of Spawn after the run returned.
var errSpawnEnded = errors.New("worker: Spawn after the task's run returned; spawn before returning")

// Add adds the payloads to the run's spawn, each as EncodeResult makes a
// result JSON. It adds none when one does not encode, when they would
// take the spawn over its limit, after Take, or when the run may not
// spawn, and says why.
func (s *Spawns) Add(payloads ...any) error {
	if s == nil {
		return errors.New("worker: Spawn on a task the worker did not give a handler")
	}
	raws := make([]json.RawMessage, len(payloads))
	size := 0
	for i, p := range payloads {
		raw, err := EncodeResult(p)
		if err != nil {
			return fmt.Errorf("worker: spawn payload %d: %w", i, err)
		}
		raws[i] = raw
		size += len(raw) + 1 // and a comma
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	switch {
	case s.refuse != nil:
		return s.refuse
	case s.ended:
		return errSpawnEnded
	case s.limit > 0 && s.bytes+size > s.limit:
		return SpawnOverLimit(s.bytes+size, s.limit)
	}
	s.payloads = append(s.payloads, raws...)
	s.bytes += size
	return nil
}

// Take ends the run's spawn (a later Add fails) and returns its
// payloads, and their size in bytes of JSON, commas included.
func (s *Spawns) Take() ([]json.RawMessage, int) {
	if s == nil {
		return nil, 0
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.ended = true
	return s.payloads, s.bytes
}

// SpawnTooLarge is the error of a spawned payload that, with its run's
// result, is size bytes of JSON, over the max bytes one result message
// carries.
func SpawnTooLarge(size, max int) error {
	return fmt.Errorf("worker: a spawned task with the result is %d bytes of JSON, over the %d one result message carries "+
		"(worker.Config.MaxMessageBytes less protocol.EnvelopeBytes); spawn smaller tasks, or return a smaller result", size, max)
}

// SpawnOverLimit is the error of a run's spawn of size bytes of JSON, over
// the max bytes one run may spawn (MaxSpawnBytes).
func SpawnOverLimit(size, max int) error {
	return fmt.Errorf("worker: the spawned tasks are %d bytes of JSON, over the %d one run may spawn; "+
		"spawn fewer tasks per run, and let them spawn the rest", size, max)
}

// AttachSpawns is set by package worker to a
// func(worker.Task, *Spawns) worker.Task that returns the task with its
// Spawn recording into the given Spawns: worker/workertest runs handlers
// as the worker does without an exported way for others to do so.
var AttachSpawns any

// WithSpawn is decision d of a run that spawned s: a completed run's
// result carries the spawn; when the result and the spawn together are
// over max bytes (0: no limit), the spawn is cut into parts
// (Decision.SpawnParts) that each fit in max bytes with the result and
// the part's fields, unless one payload cannot, which fails the task
// permanently with protocol.ReasonResultTooLarge, as more parts than
// protocol.MaxSpawnParts do. Any other run's spawn is dropped. Either way
// the spawn is over: a later Spawn fails.
func WithSpawn(d Decision, s *Spawns, max int) Decision {
	payloads, size := s.Take()
	if d.Action != Complete || len(payloads) == 0 {
		return d
	}
	d.Spawn = payloads
	if max <= 0 || len(d.Result)+size <= max {
		return d
	}
	room := max - len(d.Result) - partOverhead
	var (
		parts [][]json.RawMessage
		part  []json.RawMessage
		bytes int
	)
	for _, p := range payloads {
		if len(p)+1 > room {
			return Decision{Action: Fail, Err: SpawnTooLarge(len(d.Result)+len(p)+1+partOverhead, max), Reason: protocol.ReasonResultTooLarge}
		}
		if bytes+len(p)+1 > room {
			parts, part, bytes = append(parts, part), nil, 0
		}
		part, bytes = append(part, p), bytes+len(p)+1
	}
	parts = append(parts, part)
	if len(parts) > protocol.MaxSpawnParts {
		return Decision{Action: Fail, Err: fmt.Errorf("worker: the spawned tasks take %d messages, more than the %d one run may spawn in", len(parts), protocol.MaxSpawnParts),
			Reason: protocol.ReasonResultTooLarge}
	}
	d.SpawnParts = parts
	return d
}

// partOverhead is the room a spawn part's fields take in its message,
// with some to spare: "spawn_run", "spawn_part", "spawn_parts" and their
// values.
const partOverhead = 160

// MaxSpawnBytes is the most bytes of JSON one run may spawn: the spawn
// waits in the worker's memory until the run ends, and goes in as many
// messages as it takes (protocol.Result.SpawnParts).
const MaxSpawnBytes = 64 << 20
