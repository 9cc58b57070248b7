package api

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"

	"github.com/warrenhq/warren"
	"github.com/warrenhq/warren/store"
)

// Error codes: the "code" of an error body. Clients may switch on them.
const (
	codeInvalidJSON      = "invalid_json"           // 400: the body is not well-formed JSON (or NDJSON)
	codeInvalidType      = "invalid_type"           // 400: a field has the wrong JSON type
	codeUnknownField     = "unknown_field"          // 400: a field the API does not know
	codeInvalidParameter = "invalid_parameter"      // 400: a bad query parameter, header or webhook
	codeUnauthorized     = "unauthorized"           // 401: no token, or not one the server knows
	codeForbidden        = "forbidden"              // 403: the token lacks the scope
	codeCrossOrigin      = "cross_origin"           // 403: a state-changing request from another origin (no tokens)
	codeNotFound         = "not_found"              // 404: no such job, result or route
	codeMethodNotAllowed = "method_not_allowed"     // 405
	codeTimeout          = "request_timeout"        // 408: the request body stalled
	codeConflict         = "conflict"               // 409: not possible in the job's state
	codeTooLarge         = "too_large"              // 413: the body is over the limit
	codeUnsupportedMedia = "unsupported_media_type" // 415
	codeMisdirected      = "misdirected"            // 421: a Host the server does not answer to (no tokens)
	codeValidation       = "validation_failed"      // 422: well-formed but not a valid job
	codeKeyReused        = "idempotency_key_reused" // 422: an Idempotency-Key already used for another body
	codeInternal         = "internal"               // 500: details are in the server's log
	codeUnavailable      = "unavailable"            // 503: the store (or another dependency) is down
)

// apiError is an error answered as {"error": {"code", "message"}} with
// status. Handlers and the submission's task iterator return it.
type apiError struct {
	status  int
	code    string
	message string
}

func (e *apiError) Error() string { return e.code + ": " + e.message }

// errorf returns an apiError whose message is formatted from format.
func errorf(status int, code, format string, args ...any) *apiError {
	return &apiError{status: status, code: code, message: fmt.Sprintf(format, args...)}
}

// errorBody is the JSON shape of every error response.
type errorBody struct {
	Error errorDetail `json:"error"`
}

type errorDetail struct {
	Code    string `json:"code"`
	Message string `json:"message"`
}

// writeError answers with e.
func writeError(w http.ResponseWriter, e *apiError) {
	writeJSON(w, e.status, errorBody{Error: errorDetail{Code: e.code, Message: e.message}})
}

// writeJSON answers with status and v as JSON.
func writeJSON(w http.ResponseWriter, status int, v any) {
	body, err := json.Marshal(v)
	if err != nil {
		// Only the handlers' own types are marshalled here, so this is a
		// programming error; still answer in the documented shape.
		status = http.StatusInternalServerError
		body = []byte(`{"error":{"code":"internal","message":"internal error"}}`)
	}
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("X-Content-Type-Options", "nosniff")
	w.WriteHeader(status)
	_, _ = w.Write(append(body, '\n'))
}

// storeError answers for an error from a store call: 404 and 409 for the
// store's sentinels, an apiError as itself, and otherwise 503 when the store
// does not answer a ping or 500 when it does, with the detail logged and not
// sent. what names the operation for the log; attrs add to it.
func (s *server) storeError(w http.ResponseWriter, r *http.Request, err error, what string, attrs ...any) {
	if e, ok := errors.AsType[*apiError](err); ok {
		writeError(w, e)
		return
	}
	switch {
	case errors.Is(err, warren.ErrNotFound):
		writeError(w, errorf(http.StatusNotFound, codeNotFound, "%s", notFoundMessage(r)))
		return
	case errors.Is(err, store.ErrKeyReused):
		writeError(w, errorf(http.StatusUnprocessableEntity, codeKeyReused,
			"this Idempotency-Key was used for a submission with another body; use a new key for a new job"))
		return
	case errors.Is(err, warren.ErrConflict):
		writeError(w, errorf(http.StatusConflict, codeConflict, "the job's state does not allow this"))
		return
	}
	if r.Context().Err() != nil {
		// The client went away; nobody reads the answer.
		s.log.DebugContext(r.Context(), "api: request cancelled", append(attrs, "op", what, "error", err)...)
		writeError(w, errorf(http.StatusServiceUnavailable, codeUnavailable, "request cancelled"))
		return
	}
	ctx, cancel := context.WithTimeout(context.WithoutCancel(r.Context()), probeTimeout)
	defer cancel()
	if pingErr := s.cfg.Store.Ping(ctx); pingErr != nil {
		s.log.ErrorContext(r.Context(), "api: the job store does not answer", append(attrs, "op", what, "error", err, "ping_error", pingErr)...)
		writeError(w, errorf(http.StatusServiceUnavailable, codeUnavailable, "the job store is unavailable; retry later"))
		return
	}
	s.log.ErrorContext(r.Context(), "api: store error", append(attrs, "op", what, "error", err)...)
	writeError(w, errorf(http.StatusInternalServerError, codeInternal, "internal error"))
}

// notFoundMessage names the job of a request with an {id}.
func notFoundMessage(r *http.Request) string {
	if id := r.PathValue("id"); id != "" {
		return fmt.Sprintf("job %q not found", id)
	}
	return "not found"
}
