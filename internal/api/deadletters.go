package api

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"mime"
	"net/http"
	"strconv"
	"time"

	"github.com/warrenhq/warren/internal/deadletters"
)

// DeadLetters operates on the dead-letter queue for the /v1/deadletters
// routes. *deadletters.Queue implements it.
type DeadLetters interface {
	// List returns the matching dead letters and leaves them in the queue.
	List(ctx context.Context, f deadletters.Filter) ([]deadletters.Message, error)
	// Replay republishes the matching dead letters' tasks.
	Replay(ctx context.Context, f deadletters.Filter) (deadletters.Report, error)
	// Purge removes the matching dead letters and says how many.
	Purge(ctx context.Context, f deadletters.Filter) (int, error)
}

// maxDeadLetterBody bounds the body of a replay or a purge: a filter.
const maxDeadLetterBody = 64 << 10

// deadLetterJSON is a dead letter as the API shows it.
type deadLetterJSON struct {
	JobID      string     `json:"job_id"`
	TaskID     int64      `json:"task_id"`
	TaskIDs    []int64    `json:"task_ids,omitempty"` // a whole batch's tasks
	MessageID  string     `json:"message_id"`
	RoutingKey string     `json:"routing_key"`
	Reason     string     `json:"reason"`
	Error      string     `json:"error"`
	Attempts   int        `json:"attempts"`
	Time       *time.Time `json:"time"` // null when no header says
	// Pending is false once a redrive, a replay or a delete settled the
	// dead letter (Settled says how): nothing is left to do about it.
	Pending bool    `json:"pending"`
	Settled *string `json:"settled"` // deadletters.Settled*; null while pending
}

// deadLetterList is the body of GET /v1/deadletters.
type deadLetterList struct {
	DeadLetters []deadLetterJSON `json:"deadletters"`
}

// replayResponse is the body of POST /v1/deadletters/replay.
type replayResponse struct {
	Replayed int `json:"replayed"`
	Skipped  int `json:"skipped"`
}

// purgeResponse is the body of POST /v1/deadletters/purge.
type purgeResponse struct {
	Purged int `json:"purged"`
}

// listDeadLetters handles GET /v1/deadletters.
func (s *server) listDeadLetters(w http.ResponseWriter, r *http.Request) {
	dl, ok := s.deadLetters(w)
	if !ok {
		return
	}
	q := r.URL.Query()
	f := deadletters.Filter{JobID: q.Get("job_id")}
	if !validText(f.JobID) {
		writeError(w, errorf(http.StatusBadRequest, codeInvalidParameter, "job_id must be UTF-8 without control characters"))
		return
	}
	if v := q.Get("pending"); v != "" {
		p, err := strconv.ParseBool(v)
		if err != nil {
			writeError(w, errorf(http.StatusBadRequest, codeInvalidParameter, "pending must be true or false; got %q", v))
			return
		}
		f.Pending = p
	}
	if v := q.Get("limit"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 {
			writeError(w, errorf(http.StatusBadRequest, codeInvalidParameter, "limit must be a positive integer; got %q", v))
			return
		}
		f.Limit = n
	}
	msgs, err := dl.List(r.Context(), f)
	if err != nil {
		s.deadLetterError(w, r, err, "list dead letters", "")
		return
	}
	out := deadLetterList{DeadLetters: make([]deadLetterJSON, 0, len(msgs))}
	for _, m := range msgs {
		dj := deadLetterJSON{JobID: m.JobID, TaskID: m.TaskID, TaskIDs: m.TaskIDs, MessageID: m.MessageID, RoutingKey: m.RoutingKey,
			Reason: m.Reason, Error: m.Error, Attempts: m.Attempts, Pending: m.Settled == ""}
		if !m.Time.IsZero() {
			dj.Time = utc(&m.Time)
		}
		if m.Settled != "" {
			dj.Settled = &m.Settled
		}
		out.DeadLetters = append(out.DeadLetters, dj)
	}
	writeJSON(w, http.StatusOK, out)
}

// replayDeadLetters handles POST /v1/deadletters/replay.
func (s *server) replayDeadLetters(w http.ResponseWriter, r *http.Request) {
	dl, ok := s.deadLetters(w)
	if !ok {
		return
	}
	f, aerr := readFilter(w, r, filterReplay)
	if aerr != nil {
		writeError(w, aerr)
		return
	}
	rep, err := dl.Replay(r.Context(), f)
	if err != nil {
		s.deadLetterError(w, r, err, "replay dead letters",
			fmt.Sprintf(" (after replaying %d and skipping %d)", rep.Replayed, rep.Skipped))
		return
	}
	s.log.InfoContext(r.Context(), "api: dead letters replayed", "job_id", f.JobID, "replayed", rep.Replayed, "skipped", rep.Skipped)
	writeJSON(w, http.StatusOK, replayResponse{Replayed: rep.Replayed, Skipped: rep.Skipped})
}

// purgeDeadLetters handles POST /v1/deadletters/purge.
func (s *server) purgeDeadLetters(w http.ResponseWriter, r *http.Request) {
	dl, ok := s.deadLetters(w)
	if !ok {
		return
	}
	f, aerr := readFilter(w, r, filterPurge)
	if aerr != nil {
		writeError(w, aerr)
		return
	}
	n, err := dl.Purge(r.Context(), f)
	if err != nil {
		s.deadLetterError(w, r, err, "purge dead letters", fmt.Sprintf(" (after purging %d)", n))
		return
	}
	s.log.InfoContext(r.Context(), "api: dead letters purged", "job_id", f.JobID, "settled_only", f.Settled, "purged", n)
	writeJSON(w, http.StatusOK, purgeResponse{Purged: n})
}

// deadLetters returns the configured DeadLetters, or answers 503.
func (s *server) deadLetters(w http.ResponseWriter) (DeadLetters, bool) {
	if s.cfg.DeadLetters == nil {
		writeError(w, errorf(http.StatusServiceUnavailable, codeUnavailable, "this server has no dead-letter queue to operate on"))
		return nil, false
	}
	return s.cfg.DeadLetters, true
}

// deadLetterError answers for an error of a dead-letter operation: 503
// when the broker (Config.Ready) or the store does not answer, else 500,
// with the detail logged and not sent. done says what the operation did
// before the error, for the message.
func (s *server) deadLetterError(w http.ResponseWriter, r *http.Request, err error, what, done string) {
	if r.Context().Err() != nil {
		s.log.DebugContext(r.Context(), "api: request cancelled", "op", what, "error", err)
		writeError(w, errorf(http.StatusServiceUnavailable, codeUnavailable, "request cancelled%s", done))
		return
	}
	ctx, cancel := context.WithTimeout(context.WithoutCancel(r.Context()), probeTimeout)
	defer cancel()
	var down error
	if s.cfg.Ready != nil {
		down = s.cfg.Ready(ctx)
	}
	if down == nil {
		down = s.cfg.Store.Ping(ctx)
	}
	if down != nil {
		s.log.ErrorContext(r.Context(), "api: a dependency of the dead-letter queue does not answer", "op", what, "error", err, "ping_error", down)
		writeError(w, errorf(http.StatusServiceUnavailable, codeUnavailable, "the broker or the job store is unavailable%s; retry later", done))
		return
	}
	s.log.ErrorContext(r.Context(), "api: dead-letter operation failed", "op", what, "error", err)
	writeError(w, errorf(http.StatusInternalServerError, codeInternal, "internal error%s", done))
}

// errPurgeWhat refuses a purge that names neither a job, nor every dead
// letter, nor the settled ones (or names all with another).
var errPurgeWhat = errorf(http.StatusUnprocessableEntity, codeValidation,
	`say which dead letters to purge: {"job_id": "ID"} for one job's, {"settled": true} for those a redrive, replay or delete settled (with job_id: that job's), or {"all": true} for every one`)

// filterOp is the dead-letter operation whose filter readFilter reads.
type filterOp int

const (
	// filterReplay: {"job_id", "limit"}, every field optional; an empty
	// body replays every dead letter.
	filterReplay filterOp = iota
	// filterPurge: {"job_id"}, {"settled": true} (with or without
	// job_id) or {"all": true}; purging every dead letter must be asked
	// for, never the meaning of a body left empty.
	filterPurge
)

// readFilter reads the JSON body of a replay or a purge (filterOp says
// which fields it takes). A body must say it is JSON: one without a
// Content-Type is refused as a browser's simple request would be.
func readFilter(w http.ResponseWriter, r *http.Request, op filterOp) (deadletters.Filter, *apiError) {
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, maxDeadLetterBody))
	if err != nil {
		return deadletters.Filter{}, bodyError(err)
	}
	if len(bytes.TrimSpace(body)) == 0 {
		if op == filterPurge {
			return deadletters.Filter{}, errPurgeWhat
		}
		return deadletters.Filter{}, nil
	}
	if media, _, err := mime.ParseMediaType(r.Header.Get("Content-Type")); err != nil || media != mediaJSON {
		return deadletters.Filter{}, errorf(http.StatusUnsupportedMediaType, codeUnsupportedMedia, "Content-Type must be %s", mediaJSON)
	}
	var fields map[string]json.RawMessage
	if err := json.Unmarshal(body, &fields); err != nil {
		if _, ok := errors.AsType[*json.UnmarshalTypeError](err); ok {
			return deadletters.Filter{}, errorf(http.StatusBadRequest, codeInvalidType, "the body must be a JSON object")
		}
		return deadletters.Filter{}, bodyError(err)
	}
	var (
		f   deadletters.Filter
		all bool
	)
	for key, raw := range fields {
		var target any
		switch {
		case key == "job_id":
			target = &f.JobID
		case key == "limit" && op == filterReplay:
			target = &f.Limit
		case key == "all" && op == filterPurge:
			target = &all
		case key == "settled" && op == filterPurge:
			target = &f.Settled
		default:
			return deadletters.Filter{}, errorf(http.StatusBadRequest, codeUnknownField, "unknown field %q", key)
		}
		if err := json.Unmarshal(raw, target); err != nil {
			want := map[string]string{"job_id": "a string", "limit": "an integer", "all": "a boolean", "settled": "a boolean"}[key]
			return deadletters.Filter{}, errorf(http.StatusBadRequest, codeInvalidType, "%s must be %s, got %s", key, want, jsonKind(raw))
		}
		if key == "limit" && string(raw) != "null" && f.Limit < 1 {
			return deadletters.Filter{}, errorf(http.StatusUnprocessableEntity, codeValidation, "limit must be at least 1 (leave it out for every message), got %d", f.Limit)
		}
	}
	if !validText(f.JobID) {
		return deadletters.Filter{}, errorf(http.StatusUnprocessableEntity, codeValidation, "job_id must be UTF-8 without control characters")
	}
	if op == filterPurge && (all == (f.JobID != "" || f.Settled)) {
		return deadletters.Filter{}, errPurgeWhat
	}
	return f, nil
}
