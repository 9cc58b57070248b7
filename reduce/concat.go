package reduce

import (
	"bytes"
	"encoding/json"
)

// concatReducer is "concat": array results joined into one array, or
// string results into one string, skipping failed tasks and null results.
// It holds only the output written so far.
type concatReducer struct {
	buf     bytes.Buffer // the output, without its closing bracket or quote
	kind    byte         // 0 before the first result, then '[' or '"'
	items   bool         // an array element has been written
	scratch bytes.Buffer // one compacted result
}

func (r *concatReducer) Add(taskID int64, failed bool, result json.RawMessage) error {
	if failed {
		return nil
	}
	if len(result) == 0 {
		return refuseResult(taskID, "the result is empty")
	}
	r.scratch.Reset()
	if err := json.Compact(&r.scratch, validUTF8(result)); err != nil {
		return refuseResult(taskID, "the result is not valid JSON: %w", err)
	}
	value := r.scratch.Bytes()
	kind := value[0]
	switch {
	case kind == 'n':
		return nil
	case kind != '[' && kind != '"':
		return refuseResult(taskID, "want a JSON array or string, got a JSON %s", jsonKind(value))
	case r.kind == 0:
		r.kind = kind
		r.buf.WriteByte(kind)
	case r.kind != kind:
		return refuseResult(taskID, "got a JSON %s after earlier results that were JSON %ss",
			jsonKind(value), jsonKind([]byte{r.kind}))
	}
	if kind == '[' {
		r.appendElements(value)
		return nil
	}
	return r.appendString(taskID, value)
}

// appendElements appends the elements of the compacted array value.
func (r *concatReducer) appendElements(value []byte) {
	elems := value[1 : len(value)-1]
	if len(elems) == 0 {
		return
	}
	if r.items {
		r.buf.WriteByte(',')
	}
	r.buf.Write(elems)
	r.items = true
}

// appendString appends the text of the JSON string value, re-encoded so the
// output is canonical and each result's escapes stand on their own.
func (r *concatReducer) appendString(taskID int64, value []byte) error {
	var s string
	if err := json.Unmarshal(value, &s); err != nil {
		return &Error{TaskID: taskID, Err: err}
	}
	start := r.buf.Len()
	enc := json.NewEncoder(&r.buf)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(s); err != nil {
		return &Error{TaskID: taskID, Err: err}
	}
	// Drop the encoded string's quotes and the encoder's newline.
	encoded := r.buf.Bytes()[start:]
	n := copy(encoded, encoded[1:len(encoded)-2])
	r.buf.Truncate(start + n)
	return nil
}

func (r *concatReducer) Result() ([]byte, error) {
	switch r.kind {
	case 0:
		return []byte("[]"), nil
	case '[':
		r.buf.WriteByte(']')
	default:
		r.buf.WriteByte('"')
	}
	return r.buf.Bytes(), nil
}

// resultIsValidJSON marks the result as valid JSON by construction.
func (*concatReducer) resultIsValidJSON() {}
