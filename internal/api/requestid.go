package api

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"log/slog"
	"net/http"
)

// HeaderRequestID is the header that carries a request's id: the client's,
// when it sends a usable one, else one the server makes. The response
// carries it back, and every log line of the request has it as
// request_id.
const HeaderRequestID = "X-Request-Id"

// maxRequestIDLen bounds a client's request id.
const maxRequestIDLen = 128

type requestIDKey struct{}

// withRequestID returns r with its request id in its context and in w's
// header: the client's X-Request-Id if it is 1 to 128 letters, digits,
// '-', '_', '.' or ':', else a new random one.
func withRequestID(w http.ResponseWriter, r *http.Request) *http.Request {
	id := r.Header.Get(HeaderRequestID)
	if !usableRequestID(id) {
		var b [8]byte
		_, _ = rand.Read(b[:])
		id = hex.EncodeToString(b[:])
	}
	w.Header().Set(HeaderRequestID, id)
	return r.WithContext(context.WithValue(r.Context(), requestIDKey{}, id))
}

// usableRequestID reports whether a client's request id may be logged and
// echoed as it is.
func usableRequestID(id string) bool {
	if id == "" || len(id) > maxRequestIDLen {
		return false
	}
	for _, c := range id {
		switch {
		case c >= 'a' && c <= 'z', c >= 'A' && c <= 'Z', c >= '0' && c <= '9', c == '-', c == '_', c == '.', c == ':':
		default:
			return false
		}
	}
	return true
}

// requestIDHandler adds the request id of a record's context, if any, to
// the record as request_id.
type requestIDHandler struct{ slog.Handler }

// Handle implements slog.Handler.
func (h requestIDHandler) Handle(ctx context.Context, rec slog.Record) error {
	if id, ok := ctx.Value(requestIDKey{}).(string); ok {
		rec.AddAttrs(slog.String("request_id", id))
	}
	return h.Handler.Handle(ctx, rec)
}

// WithAttrs implements slog.Handler.
func (h requestIDHandler) WithAttrs(attrs []slog.Attr) slog.Handler {
	return requestIDHandler{h.Handler.WithAttrs(attrs)}
}

// WithGroup implements slog.Handler.
func (h requestIDHandler) WithGroup(name string) slog.Handler {
	return requestIDHandler{h.Handler.WithGroup(name)}
}
