package engine

import (
	"strings"
	"unicode/utf8"
)

// storedText returns text from outside (a worker's error or name, a
// reducer's error quoting a result, a webhook's answer) as both drivers
// store it: valid UTF-8 without NUL bytes, which PostgreSQL refuses in
// text (SQLSTATE 22021) and would make a whole outcome batch fail again
// and again. Each run of bytes that is not valid UTF-8 becomes one
// U+FFFD, and so does each NUL byte; valid text without NUL comes back as
// it is.
func storedText(s string) string {
	if utf8.ValidString(s) && strings.IndexByte(s, 0) < 0 {
		return s
	}
	return strings.ReplaceAll(strings.ToValidUTF8(s, "\uFFFD"), "\x00", "\uFFFD")
}
