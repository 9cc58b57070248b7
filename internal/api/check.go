package api

import (
	"bytes"
	"encoding/json"
)

// SpecError is what POST /v1/jobs answers for a job spec it cannot read:
// the error body's code (invalid_json, invalid_type, unknown_field, ...)
// and message, which names the field and, for malformed JSON, the byte.
type SpecError struct {
	Code, Message string
}

// Error is the API's message, with its code.
func (e *SpecError) Error() string { return e.Message + " (" + e.Code + ")" }

// CheckSpec reads an application/json job spec, tasks included, with the
// decoder POST /v1/jobs runs, and returns the *SpecError the API would
// answer for its syntax, its field names and its fields' types, or nil.
// What depends on the server (its reducers, limits and retry tiers) is
// not judged: the server still does. Clients such as `warren submit` call
// it so that an error names the field and the byte of the spec as
// written, not what a client made of it.
func CheckSpec(body []byte) error {
	dec := json.NewDecoder(bytes.NewReader(body))
	if err := expectObject(dec); err != nil {
		return specError(err)
	}
	var sp jobSpec
	seen := map[string]bool{}
	for dec.More() {
		key, err := nextKey(dec, seen, true)
		if err != nil {
			return specError(err)
		}
		if key == "tasks" {
			var tasks json.RawMessage
			err = decodeTasksArray(dec, &tasks)
		} else {
			err = decodeField(dec, key, &sp)
		}
		if err != nil {
			return specError(err)
		}
	}
	if err := endObject(dec); err != nil {
		return specError(err)
	}
	return nil
}

// CheckNDJSONSpec is CheckSpec for the first line of an
// application/x-ndjson submission, the job spec without tasks: its errors
// start with "line 1:", as the API's do.
func CheckNDJSONSpec(line []byte) error {
	dec := json.NewDecoder(bytes.NewReader(line))
	if err := expectObject(dec); err != nil {
		return specError(lineError(1, err))
	}
	var sp jobSpec
	seen := map[string]bool{}
	for dec.More() {
		key, err := nextKey(dec, seen, false)
		if err == nil {
			err = decodeField(dec, key, &sp)
		}
		if err != nil {
			return specError(lineError(1, err))
		}
	}
	if err := endObject(dec); err != nil {
		return specError(lineError(1, err))
	}
	return nil
}

// specError is e as a *SpecError, nil for nil.
func specError(e *apiError) error {
	if e == nil {
		return nil
	}
	return &SpecError{Code: e.code, Message: e.message}
}
