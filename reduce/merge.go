package reduce

import (
	"encoding/json"
	"fmt"
	"maps"
	"slices"
)

// mergeReducer is "merge": objects of numbers summed key by key, skipping
// failed tasks and null results. It holds one running total per key: the
// output being built.
type mergeReducer struct {
	sums map[string]*number
}

func (r *mergeReducer) Add(taskID int64, failed bool, result json.RawMessage) error {
	if failed {
		return nil
	}
	value := trimSpace(result)
	switch {
	case len(value) == 0:
		return refuseResult(taskID, "the result is empty")
	case !json.Valid(value):
		return refuseResult(taskID, "the result is not valid JSON: %.40q", value)
	case value[0] == 'n':
		return nil
	case value[0] != '{':
		return refuseResult(taskID, "want a JSON object of numbers, got a JSON %s", jsonKind(value))
	}
	if r.sums == nil {
		r.sums = make(map[string]*number)
	}
	if err := eachNumberField(value, r.addField); err != nil {
		return &Error{TaskID: taskID, Err: err}
	}
	return nil
}

// addField adds lit, one key's number literal, to that key's total.
func (r *mergeReducer) addField(key, lit []byte) error {
	sum := r.sums[string(key)]
	if sum == nil {
		sum = new(number)
		r.sums[string(key)] = sum
	}
	if err := sum.addLiteral(lit); err != nil {
		return fmt.Errorf("key %q: %w", key, err)
	}
	return nil
}

func (r *mergeReducer) Result() ([]byte, error) {
	out := []byte{'{'}
	for i, key := range slices.Sorted(maps.Keys(r.sums)) {
		if i > 0 {
			out = append(out, ',')
		}
		k, err := json.Marshal(key)
		if err != nil {
			return nil, fmt.Errorf("key %q: %w", key, err)
		}
		out = append(append(out, k...), ':')
		if out, err = r.sums[key].appendJSON(out); err != nil {
			return nil, fmt.Errorf("key %q: %w", key, err)
		}
	}
	return append(out, '}'), nil
}

// resultIsValidJSON marks the result as valid JSON by construction.
func (*mergeReducer) resultIsValidJSON() {}
