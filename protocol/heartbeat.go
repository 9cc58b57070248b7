package protocol

import (
	"encoding/json"
	"fmt"
	"time"
)

// Heartbeat states.
const (
	// HeartbeatRunning is the state of a worker's periodic heartbeat.
	HeartbeatRunning = "running"
	// HeartbeatStopping is the state of a worker's goodbye: it stopped
	// taking tasks, and sends no more heartbeats.
	HeartbeatStopping = "stopping"
)

// DefaultHeartbeatInterval is how often a worker sends its heartbeat when
// it does not say otherwise.
const DefaultHeartbeatInterval = 5 * time.Second

// Heartbeat is the body of a worker's heartbeat, published to the
// heartbeat exchange (Names.HeartbeatExchange) every few seconds, and once
// more with State HeartbeatStopping when the worker stops. Heartbeats are
// optional: they only feed the servers' list of workers (GET /v1/workers).
type Heartbeat struct {
	// ID identifies one run of one worker process; it stays the same
	// across reconnects.
	ID string `json:"id"`
	// Name is the worker's name, as in its results (Result.Worker).
	Name string `json:"name"`
	// State is HeartbeatRunning or HeartbeatStopping.
	State string `json:"state"`
	// Queues are the work queues it consumes (the jobs' "queue" option).
	Queues []string `json:"queues"`
	// Types are the task types it has handlers for.
	Types []string `json:"types"`
	// Concurrency is how many handlers it runs at once, at most.
	Concurrency int `json:"concurrency"`
	// InFlight is how many tasks it holds now: running, or about to run.
	InFlight int `json:"in_flight"`
	// StartedAt is when this run of the worker started.
	StartedAt time.Time `json:"started_at"`
	// IntervalMS is the time between two heartbeats, in milliseconds; 0
	// means DefaultHeartbeatInterval. A server takes a worker for dead
	// after three intervals without one.
	IntervalMS int64 `json:"interval_ms,omitempty"`
	// Version is the worker's software version, if it knows it.
	Version string `json:"version,omitempty"`
}

// Interval is the time between two of the worker's heartbeats.
func (h Heartbeat) Interval() time.Duration {
	if h.IntervalMS <= 0 {
		return DefaultHeartbeatInterval
	}
	return time.Duration(h.IntervalMS) * time.Millisecond
}

// EncodeHeartbeat returns the JSON body of a heartbeat message.
func EncodeHeartbeat(h Heartbeat) ([]byte, error) {
	if err := h.check(); err != nil {
		return nil, err
	}
	return json.Marshal(h)
}

// DecodeHeartbeat parses a heartbeat message body. Unknown fields are
// ignored, so that workers may send more than this version knows. Every
// error wraps ErrMalformed.
func DecodeHeartbeat(body []byte) (Heartbeat, error) {
	var h Heartbeat
	if err := json.Unmarshal(body, &h); err != nil {
		return Heartbeat{}, fmt.Errorf("%w: heartbeat: %v", ErrMalformed, err)
	}
	if err := h.check(); err != nil {
		return Heartbeat{}, err
	}
	return h, nil
}

// maxHeartbeatText bounds the id, name, version and each queue and type
// of a heartbeat; maxHeartbeatList bounds its queues and its types: a
// server keeps the heartbeats of thousands of workers.
const (
	maxHeartbeatText = 256
	maxHeartbeatList = 1024
)

// checkList checks the entries of a heartbeat's list what.
func checkList(what string, list []string) error {
	if len(list) > maxHeartbeatList {
		return fmt.Errorf("%w: heartbeat has more than %d %s", ErrMalformed, maxHeartbeatList, what)
	}
	for _, s := range list {
		if len(s) > maxHeartbeatText {
			return fmt.Errorf("%w: heartbeat has one of its %s longer than %d bytes", ErrMalformed, what, maxHeartbeatText)
		}
	}
	return nil
}

func (h Heartbeat) check() error {
	switch {
	case h.ID == "" || len(h.ID) > maxHeartbeatText:
		return fmt.Errorf("%w: heartbeat needs an id of 1 to %d bytes", ErrMalformed, maxHeartbeatText)
	case len(h.Name) > maxHeartbeatText || len(h.Version) > maxHeartbeatText:
		return fmt.Errorf("%w: heartbeat name or version longer than %d bytes", ErrMalformed, maxHeartbeatText)
	case h.State != HeartbeatRunning && h.State != HeartbeatStopping:
		return fmt.Errorf("%w: heartbeat state must be %q or %q, got %q", ErrMalformed, HeartbeatRunning, HeartbeatStopping, h.State)
	case h.Concurrency < 0 || h.InFlight < 0 || h.IntervalMS < 0:
		return fmt.Errorf("%w: heartbeat counts must be >= 0", ErrMalformed)
	}
	if err := checkList("queues", h.Queues); err != nil {
		return err
	}
	return checkList("types", h.Types)
}
