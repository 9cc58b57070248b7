package reduce

import "encoding/json"

// sumReducer is "sum": the sum of the numeric results of completed tasks,
// exact while they are integers.
type sumReducer struct {
	total number
}

func (r *sumReducer) Add(taskID int64, failed bool, result json.RawMessage) error {
	if failed {
		return nil
	}
	if err := r.total.add(result); err != nil {
		return &Error{TaskID: taskID, Err: err}
	}
	return nil
}

func (r *sumReducer) Result() ([]byte, error) {
	return r.total.appendJSON(nil)
}

// resultIsValidJSON marks the result as valid JSON by construction.
func (*sumReducer) resultIsValidJSON() {}
