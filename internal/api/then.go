package api

import (
	"bytes"
	"encoding/json"
	"net/http"
	"strings"

	"github.com/warrenhq/warren"
	"github.com/warrenhq/warren/store"
)

// A submission's "then" is its follow-up job: a job spec without tasks,
// read by the same decodeField as the submission's own fields, so that
// every option a submission takes, added later too, is an option of its
// follow-ups. Its tasks are the elements of the previous job's result,
// which warren makes when that job completes (store.Store.FinishJob).
// Every level is validated as a submission is (newJob), at submission,
// and an error names the field by its path (then.then.type).

// decodeThen decodes the value of "then" into sp, whose own path in the
// chain is sp.path ("" for the submission): null is absent, anything but
// an object is refused, and so is a chain of more than
// warren.MaxChainLength jobs.
func decodeThen(dec *json.Decoder, sp *jobSpec) *apiError {
	var raw json.RawMessage
	if err := dec.Decode(&raw); err != nil {
		return bodyError(err)
	}
	path := sp.path + "then"
	switch {
	case string(raw) == "null":
		sp.Then = nil
		return nil
	case raw[0] != '{':
		return errorf(http.StatusBadRequest, codeInvalidType, "%s must be %s, got %s", path, specFields["then"], jsonKind(raw))
	case strings.Count(path, "then") >= warren.MaxChainLength:
		return errorf(http.StatusUnprocessableEntity, codeValidation,
			"%s: a chain holds at most %d jobs, the submitted one included", path, warren.MaxChainLength)
	}
	next := &jobSpec{path: path + "."}
	in := json.NewDecoder(bytes.NewReader(raw))
	_, _ = in.Token() // '{': raw is a valid object
	seen := map[string]bool{}
	for in.More() {
		tok, err := in.Token()
		if err != nil {
			return bodyError(err)
		}
		key, _ := tok.(string)
		_, known := specFields[key]
		switch {
		case key == "tasks":
			return errorf(http.StatusBadRequest, codeUnknownField,
				"%s.tasks: a follow-up job has no tasks of its own: they are the elements of the previous job's result", path)
		case !known:
			return errorf(http.StatusBadRequest, codeUnknownField, "unknown field %q", next.path+key)
		case seen[key]:
			return errorf(http.StatusBadRequest, codeInvalidJSON, "field %q is given twice", next.path+key)
		}
		seen[key] = true
		if err := decodeField(in, key, next); err != nil {
			if key == "then" {
				return err // named by its own path
			}
			return underPath(next.path, err)
		}
	}
	sp.Then = next
	return nil
}

// underPath returns e with its message naming its field by path, the
// prefix of a follow-up's fields ("then.", "then.then."): the messages
// of decodeField and newJob start with the field they are about.
func underPath(path string, e *apiError) *apiError {
	if path == "" || strings.HasPrefix(e.message, path) {
		return e
	}
	field, _, _ := strings.Cut(e.message, " ")
	field, _, _ = strings.Cut(field, ".")
	field = strings.TrimSuffix(field, ":")
	if _, ok := specFields[field]; ok {
		e.message = path + e.message
	} else {
		// A message about the spec as a whole: name the follow-up.
		e.message = strings.TrimSuffix(path, ".") + ": " + e.message
	}
	return e
}

// followUp validates sp's follow-up, and those after it, as submissions
// are (newJob) and returns them for the store: nil when sp has none.
// Each is held to r's per-task limit for the tasks its previous job's
// result makes.
func (sp jobSpec) followUp(r rules) (*store.NewJob, *apiError) {
	if sp.Then == nil {
		return nil, nil
	}
	job, err := sp.Then.newJob(r)
	if err != nil {
		return nil, underPath(sp.Then.path, err)
	}
	job.MaxTaskBytes, job.MaxTasks = r.maxTaskBytes, r.maxJobTasks
	return &job, nil
}

// thenJSON is a job's follow-up as the API shows it: its type and how
// many jobs the chain still starts after this one (the follow-up
// included).
type thenJSON struct {
	Type      string `json:"type"`
	Remaining int    `json:"remaining"`
}

// toThenJSON is f as the API shows it; nil for none.
func toThenJSON(f *warren.FollowUp) *thenJSON {
	if f == nil {
		return nil
	}
	return &thenJSON{Type: f.Type, Remaining: f.Length()}
}

// webhooksOf lists the webhooks of job's follow-ups, for the handler to
// check where they go as it checks the job's.
func webhooksOf(job store.NewJob) []*store.Webhook {
	var list []*store.Webhook
	for t := job.Then; t != nil; t = t.Then {
		if t.Webhook != nil {
			list = append(list, t.Webhook)
		}
	}
	return list
}
