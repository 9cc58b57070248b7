package postgres

import (
	"encoding/base64"
	"fmt"
	"strconv"
	"strings"
	"time"
)

// Cursors are opaque to callers: base64 of a small versioned text, so the
// encoding can change without breaking clients that only pass them back.

// jobCursor is the position after the last job of a ListJobs page.
type jobCursor struct {
	createdAt time.Time
	id        string
}

func encodeJobCursor(c jobCursor) string {
	raw := "j1:" + strconv.FormatInt(c.createdAt.UnixMicro(), 10) + ":" + c.id
	return base64.RawURLEncoding.EncodeToString([]byte(raw))
}

func decodeJobCursor(s string) (jobCursor, error) {
	raw, err := base64.RawURLEncoding.DecodeString(s)
	if err != nil {
		return jobCursor{}, invalidCursor(s)
	}
	rest, ok := strings.CutPrefix(string(raw), "j1:")
	if !ok {
		return jobCursor{}, invalidCursor(s)
	}
	micros, id, ok := strings.Cut(rest, ":")
	if !ok {
		return jobCursor{}, invalidCursor(s)
	}
	us, err := strconv.ParseInt(micros, 10, 64)
	if err != nil {
		return jobCursor{}, invalidCursor(s)
	}
	return jobCursor{createdAt: time.UnixMicro(us).UTC(), id: id}, nil
}

// encodeTaskCursor returns the cursor of the page after task id.
func encodeTaskCursor(taskID int64) string {
	return base64.RawURLEncoding.EncodeToString([]byte("t1:" + strconv.FormatInt(taskID, 10)))
}

func decodeTaskCursor(s string) (int64, error) {
	raw, err := base64.RawURLEncoding.DecodeString(s)
	if err != nil {
		return 0, invalidCursor(s)
	}
	rest, ok := strings.CutPrefix(string(raw), "t1:")
	if !ok {
		return 0, invalidCursor(s)
	}
	id, err := strconv.ParseInt(rest, 10, 64)
	if err != nil {
		return 0, invalidCursor(s)
	}
	return id, nil
}

func invalidCursor(s string) error {
	return fmt.Errorf("postgres: invalid page cursor %q", s)
}
