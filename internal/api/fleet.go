package api

import (
	"cmp"
	"encoding/base64"
	"encoding/json"
	"net/http"
	"slices"
	"time"

	"github.com/warrenhq/warren/internal/heartbeats"
)

// Queue kinds, as GET /v1/queues shows them.
const (
	QueueWork    = "work"    // a work queue: tasks for workers
	QueueRetry   = "retry"   // a retry tier of a work queue
	QueueDead    = "dead"    // dead letters: tasks.dlq, results.dlq, dead.q
	QueueResults = "results" // results.q, for the aggregator
)

// Queue is one of warren's queues as GET /v1/queues shows it.
type Queue struct {
	// Name is the queue's full name, prefix included.
	Name string
	// Kind is one of QueueWork, QueueRetry, QueueDead and QueueResults.
	Kind string
	// Messages are the messages ready in it; Consumers its consumers.
	Messages, Consumers int
	// DeadLetters1m and DeadLetters15m are how much a dead-letter queue
	// grew over the last minute and fifteen, nil until the server has
	// sampled it that long; always nil for the other kinds.
	DeadLetters1m, DeadLetters15m *int64
}

// workerJSON is a worker as GET /v1/workers shows it.
type workerJSON struct {
	ID          string    `json:"id"`
	Name        string    `json:"name"`
	Queues      []string  `json:"queues"`
	Types       []string  `json:"types"`
	Concurrency int       `json:"concurrency"`
	InFlight    int       `json:"in_flight"`
	StartedAt   time.Time `json:"started_at"`
	LastSeen    time.Time `json:"last_seen"`
	Alive       bool      `json:"alive"`
	Version     string    `json:"version,omitempty"`
}

// workerList is the body of GET /v1/workers.
type workerList struct {
	Workers []workerJSON `json:"workers"`
	// NextCursor is null on the last page.
	NextCursor *string `json:"next_cursor"`
	// Total is how many workers the whole list has now.
	Total int `json:"total"`
}

// defaultWorkerPage is the page size of GET /v1/workers without a limit.
const defaultWorkerPage = 100

// queueJSON is a queue in the body of GET /v1/queues.
type queueJSON struct {
	Name      string `json:"name"`
	Kind      string `json:"kind"`
	Messages  int    `json:"messages"`
	Consumers int    `json:"consumers"`
	// Only on dead-letter queues: a number, or null until known.
	DeadLetters1m  any `json:"dead_letters_1m,omitempty"`
	DeadLetters15m any `json:"dead_letters_15m,omitempty"`
}

// queueList is the body of GET /v1/queues.
type queueList struct {
	Queues []queueJSON `json:"queues"`
	// Paused are the paused work queues, with or without jobs.
	Paused []queuePauseJSON `json:"paused"`
}

// listWorkers handles GET /v1/workers: a page of the workers heard from
// in the last five minutes, by name and then id. The list changes under
// a reader (it is advisory: see package heartbeats); a cursor is the last
// name and id of its page, so a page goes on after it whatever came or
// went.
func (s *server) listWorkers(w http.ResponseWriter, r *http.Request) {
	if s.cfg.Workers == nil {
		writeError(w, errorf(http.StatusServiceUnavailable, codeUnavailable, "this server keeps no list of workers"))
		return
	}
	q := r.URL.Query()
	limit, aerr := parseLimit(q.Get("limit"))
	if aerr != nil {
		writeError(w, aerr)
		return
	}
	if limit == 0 {
		limit = defaultWorkerPage
	}
	after, ok := parseWorkerCursor(q.Get("cursor"))
	if !ok {
		writeError(w, errorf(http.StatusBadRequest, codeInvalidParameter, "cursor is not a next_cursor this server returned"))
		return
	}
	all := s.cfg.Workers()
	from := 0
	if after != nil {
		from, _ = slices.BinarySearchFunc(all, *after, compareWorkers)
		if from < len(all) && compareWorkers(all[from], *after) == 0 {
			from++
		}
	}
	page := all[from:min(len(all), from+limit)]
	out := workerList{Workers: make([]workerJSON, 0, len(page)), Total: len(all)}
	for _, wk := range page {
		out.Workers = append(out.Workers, workerJSON{
			ID: wk.ID, Name: wk.Name, Queues: nonNil(wk.Queues), Types: nonNil(wk.Types), Concurrency: wk.Concurrency,
			InFlight: wk.InFlight, StartedAt: wk.StartedAt.UTC(), LastSeen: wk.LastSeen.UTC(), Alive: wk.Alive, Version: wk.Version,
		})
	}
	if from+len(page) < len(all) {
		last := page[len(page)-1]
		key, _ := json.Marshal([2]string{last.Name, last.ID}) // a string cannot fail
		out.NextCursor = cursorJSON(base64.RawURLEncoding.EncodeToString(key))
	}
	writeJSON(w, http.StatusOK, out)
}

// compareWorkers orders workers as heartbeats.Registry.List does: by name,
// then id.
func compareWorkers(a, b heartbeats.Worker) int {
	return cmp.Or(cmp.Compare(a.Name, b.Name), cmp.Compare(a.ID, b.ID))
}

// parseWorkerCursor reads a cursor of GET /v1/workers: nil for none, and
// false for one this server did not write.
func parseWorkerCursor(raw string) (*heartbeats.Worker, bool) {
	if raw == "" {
		return nil, true
	}
	b, err := base64.RawURLEncoding.DecodeString(raw)
	if err != nil {
		return nil, false
	}
	var key [2]string
	if json.Unmarshal(b, &key) != nil || key[1] == "" {
		return nil, false
	}
	return &heartbeats.Worker{Name: key[0], ID: key[1]}, true
}

// listQueues handles GET /v1/queues: the queues the server knows, with
// their depth and consumers read from the broker now.
func (s *server) listQueues(w http.ResponseWriter, r *http.Request) {
	if s.cfg.Queues == nil {
		writeError(w, errorf(http.StatusServiceUnavailable, codeUnavailable, "this server cannot read the queues"))
		return
	}
	queues, err := s.cfg.Queues(r.Context())
	if err != nil {
		s.deadLetterError(w, r, err, "read the queues", "")
		return
	}
	paused, err := s.cfg.Store.PausedQueues(r.Context())
	if err != nil {
		s.storeError(w, r, err, "read the paused queues")
		return
	}
	out := queueList{Queues: make([]queueJSON, 0, len(queues)), Paused: make([]queuePauseJSON, 0, len(paused))}
	for _, p := range paused {
		at := p.PausedAt.UTC()
		out.Paused = append(out.Paused, queuePauseJSON{Queue: p.Queue, Paused: true, PausedAt: &at})
	}
	for _, q := range queues {
		qj := queueJSON{Name: q.Name, Kind: q.Kind, Messages: q.Messages, Consumers: q.Consumers}
		if q.Kind == QueueDead {
			// Present, as null until known, on dead-letter queues only.
			qj.DeadLetters1m, qj.DeadLetters15m = orNull(q.DeadLetters1m), orNull(q.DeadLetters15m)
		}
		out.Queues = append(out.Queues, qj)
	}
	writeJSON(w, http.StatusOK, out)
}

// orNull is v, or a JSON null when v is nil.
func orNull(v *int64) any {
	if v == nil {
		return json.RawMessage("null")
	}
	return *v
}

func nonNil(s []string) []string {
	if s == nil {
		return []string{}
	}
	return s
}
