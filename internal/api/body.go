package api

import (
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"time"
)

// timedBody is a request body whose reads fail once no byte has arrived
// for timeout: before each read it moves the connection's read deadline
// to now + timeout, so a body that keeps arriving is never cut, however
// large, and a stalled one is cut after timeout. Once the body has ended
// it clears the deadline, so the work that follows (the store's) is not
// timed by it.
type timedBody struct {
	io.ReadCloser
	rc      *http.ResponseController
	timeout time.Duration
	ended   bool
}

// errBodyStalled is what a timedBody's read returns when the deadline
// passed; bodyError answers it with 408.
type errBodyStalled struct{ timeout time.Duration }

func (e *errBodyStalled) Error() string {
	return fmt.Sprintf("no byte of the request body arrived for %s", e.timeout)
}

// timeBody returns body as a timedBody, or body itself when it is empty or
// w cannot set read deadlines (it is not net/http's server's).
func timeBody(w http.ResponseWriter, body io.ReadCloser, timeout time.Duration) io.ReadCloser {
	if body == nil || body == http.NoBody {
		return body
	}
	rc := http.NewResponseController(w)
	// Set at once, so that a body the handler never reads is bounded too
	// when net/http drains it after the handler.
	if err := rc.SetReadDeadline(time.Now().Add(timeout)); err != nil {
		return body
	}
	return &timedBody{ReadCloser: body, rc: rc, timeout: timeout}
}

func (b *timedBody) Read(p []byte) (int, error) {
	if b.ended {
		return b.ReadCloser.Read(p)
	}
	_ = b.rc.SetReadDeadline(time.Now().Add(b.timeout))
	n, err := b.ReadCloser.Read(p)
	switch {
	case err == io.EOF:
		b.ended = true
		// net/http now reads the connection in the background to notice a
		// client that goes away; a deadline would cancel the request.
		_ = b.rc.SetReadDeadline(time.Time{})
	case errors.Is(err, os.ErrDeadlineExceeded):
		err = &errBodyStalled{timeout: b.timeout}
	}
	return n, err
}
