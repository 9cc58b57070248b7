package protocol

import "bytes"

// MaxMessageDepth is the deepest nesting of arrays and objects a warren
// task message body has. It is the smallest default limit among common
// JSON parsers (.NET's System.Text.Json allows 64; Ruby's JSON 100, Rust's
// serde_json 128, Go's encoding/json 10,000), so that a worker in any
// language reads every task message with its parser's defaults.
const MaxMessageDepth = 64

// MaxPayloadDepth is the deepest nesting of arrays and objects a task
// payload may have: MaxMessageDepth less the three levels a task batch
// message wraps around each payload (the body, its "tasks" array, the
// task's object). The API refuses a deeper payload at submit, and
// DecodeTask and DecodeTasks refuse a message that carries one as
// malformed.
const MaxPayloadDepth = MaxMessageDepth - 3

// Depth returns the deepest nesting of arrays and objects in the JSON
// value v: 0 for a scalar, 1 for [1] or {"a":1}, 2 for [[1]] or
// {"a":{}}. v must be valid JSON; brackets inside strings do not count.
func Depth(v []byte) int {
	depth, deepest := 0, 0
	for i := 0; i < len(v); i++ {
		switch v[i] {
		case '"':
			i = stringEnd(v, i+1)
		case '[', '{':
			depth++
			deepest = max(deepest, depth)
		case ']', '}':
			depth--
		}
	}
	return deepest
}

// stringEnd returns the index of the quote that closes the string whose
// contents start at v[i], or len(v) when it is not closed.
func stringEnd(v []byte, i int) int {
	for i < len(v) {
		j := bytes.IndexAny(v[i:], `"\`)
		if j < 0 {
			return len(v)
		}
		i += j
		if v[i] == '"' {
			return i
		}
		i += 2 // a backslash and the character it escapes
	}
	return len(v)
}
