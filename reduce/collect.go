package reduce

import (
	"bytes"
	"encoding/json"
)

// collectReducer is "collect": a JSON array with one element per task, in
// task order, null where the task failed, each result validated and
// compacted. It holds only the array written so far.
type collectReducer struct {
	buf bytes.Buffer
	n   int
}

func (r *collectReducer) Add(taskID int64, failed bool, result json.RawMessage) error {
	if r.n == 0 {
		r.buf.WriteByte('[')
	} else {
		r.buf.WriteByte(',')
	}
	r.n++
	if failed {
		r.buf.WriteString("null")
		return nil
	}
	if len(result) == 0 {
		return refuseResult(taskID, "the result is empty")
	}
	// Compact validates as it copies and writes nothing on error.
	if err := json.Compact(&r.buf, validUTF8(result)); err != nil {
		return refuseResult(taskID, "the result is not valid JSON: %w", err)
	}
	return nil
}

func (r *collectReducer) Result() ([]byte, error) {
	if r.n == 0 {
		return []byte("[]"), nil
	}
	r.buf.WriteByte(']')
	return r.buf.Bytes(), nil
}

// resultIsValidJSON marks the result as valid JSON by construction.
func (*collectReducer) resultIsValidJSON() {}
