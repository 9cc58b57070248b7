package reduce

import (
	"bytes"
	"encoding/json"
	"fmt"
	"strings"
	"unicode/utf8"
)

// eachNumberField calls fn with the decoded key and the number
// literal of each field of obj, a valid JSON object, until fn fails. A
// value that is not a number is an error naming its key. Merge walks
// objects itself because encoding/json allocates for every field.
func eachNumberField(obj []byte, fn func(key, lit []byte) error) error {
	var decoded []byte // the last key that needed decoding
	i := 1             // past the '{'
	for {
		i = skipSpace(obj, i)
		switch obj[i] {
		case '}':
			return nil
		case ',':
			i = skipSpace(obj, i+1)
		}
		keyStart, escaped := i, false
		for i++; obj[i] != '"'; i++ {
			if obj[i] == '\\' {
				escaped = true
				i++
			}
		}
		i++
		key := obj[keyStart+1 : i-1]
		if escaped || !utf8.Valid(key) {
			var s string
			if err := json.Unmarshal(obj[keyStart:i], &s); err != nil {
				return err
			}
			decoded = append(decoded[:0], s...)
			key = decoded
		}
		i = skipSpace(obj, skipSpace(obj, i)+1) // past the ':'
		if c := obj[i]; c != '-' && (c < '0' || c > '9') {
			return fmt.Errorf("key %q: want a JSON number, got a JSON %s", key, jsonKind(obj[i:]))
		}
		litStart := i
		for i < len(obj) && strings.IndexByte("+-.0123456789eE", obj[i]) >= 0 {
			i++
		}
		if err := fn(key, obj[litStart:i]); err != nil {
			return err
		}
	}
}

// skipSpace returns the index of the first non-space byte of b at or
// after i.
func skipSpace(b []byte, i int) int {
	for i < len(b) && (b[i] == ' ' || b[i] == '\t' || b[i] == '\n' || b[i] == '\r') {
		i++
	}
	return i
}

// validUTF8 replaces each invalid UTF-8 sequence in b with U+FFFD,
// as decoding with encoding/json would, so outputs are always UTF-8. In
// valid JSON such bytes can only sit inside strings.
func validUTF8(b []byte) []byte {
	if utf8.Valid(b) {
		return b
	}
	return bytes.ToValidUTF8(b, []byte("\uFFFD"))
}

// trimSpace strips the whitespace JSON allows around a value.
func trimSpace(b []byte) []byte {
	isSpace := func(c byte) bool { return c == ' ' || c == '\t' || c == '\n' || c == '\r' }
	for len(b) > 0 && isSpace(b[0]) {
		b = b[1:]
	}
	for len(b) > 0 && isSpace(b[len(b)-1]) {
		b = b[:len(b)-1]
	}
	return b
}

// jsonKind names the kind of the valid, trimmed JSON value v, for
// error messages.
func jsonKind(v []byte) string {
	switch v[0] {
	case '{':
		return "object"
	case '[':
		return "array"
	case '"':
		return "string"
	case 't', 'f':
		return "boolean"
	case 'n':
		return "null"
	default:
		return "number"
	}
}
