package reduce

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"math"
	"math/big"
	"slices"
	"strconv"
	"strings"
	"unicode/utf8"
)

// Reducer folds a job's task results, fed in task id order, into one JSON
// value. A Reducer serves one job and one goroutine; after Add returns an
// error it is discarded.
type Reducer interface {
	// Add is called once per task in task id order. failed is true for a
	// task that failed (result is then nil). result is only valid during
	// the call, so the caller may reuse its buffer: a Reducer that needs
	// the bytes later must copy them. An error should say why the result
	// was refused; Reduce adds the task id when it is missing.
	Add(taskID int64, failed bool, result json.RawMessage) error
	// Result returns the reduced JSON document. It is called once, after
	// the last Add.
	Result() ([]byte, error)
}

// Factory makes a new, empty Reducer for one job.
type Factory func() Reducer

// Default is the reducer of a job that names none.
const Default = "collect"

// ErrUnknownReducer is wrapped by Reduce's error when no reducer is
// registered under the name it was given.
var ErrUnknownReducer = errors.New("unknown reducer")

// Error is a reducer refusing one task's result. Built-in reducers
// return it from Add, and Reduce wraps every error from Add in one, so
// errors.As finds the task whichever reducer ran.
type Error struct {
	// TaskID is the task whose result was refused.
	TaskID int64
	// Err says why.
	Err error
}

// Error names the task and the reason.
func (e *Error) Error() string {
	return fmt.Sprintf("task %d: %v", e.TaskID, e.Err)
}

// Unwrap returns the reason, for errors.Is and errors.As.
func (e *Error) Unwrap() error { return e.Err }

// ScanFunc feeds a job's task results to fn, one call per task in
// increasing task id order, and returns fn's first error, or its own. It
// should stop at fn's first error; Reduce copes with one that does not.
type ScanFunc func(fn func(taskID int64, failed bool, result json.RawMessage) error) error

// Reduce runs the reducer registered under name over the results scan
// feeds it and returns the reduced document, which is valid JSON. The
// reducer sees a failed task with a nil result, whatever scan passed.
//
// Errors: an unregistered name wraps ErrUnknownReducer, and scan is not
// called; a refused result is a *Error naming the task; task ids that do
// not increase stop the scan; an error of scan's own is returned wrapped.
// Every error names the reducer.
//
// The built-in reducers stream: each holds the output it is building, never
// the results it has read.
//
//   - collect: a JSON array with one element per task, in task order, null
//     where the task failed. Each result is validated and compacted.
//   - sum: the sum of the results, a JSON number; 0 when there are none.
//     It is exact while every result is an integer literal, however large,
//     and a float64 once any has a fraction or an exponent.
//   - concat: array results joined into one array, or string results into
//     one string; [] when there are none. Mixing the two is an error.
//   - merge: objects of numbers summed key by key, exactly as sum adds,
//     into one object with sorted keys; {} when there are none.
//   - none: null, whatever the results.
//
// sum, concat and merge skip failed tasks; concat and merge skip null
// results too, while sum refuses them like any other non-number.
func (reg *Registry) Reduce(name string, scan ScanFunc) ([]byte, error) {
	newReducer, ok := reg.Lookup(name)
	if !ok {
		return nil, fmt.Errorf("reduce %q: %w", name, ErrUnknownReducer)
	}
	r := newReducer()
	if r == nil {
		return nil, fmt.Errorf("reduce %q: the Factory returned a nil Reducer", name)
	}
	out, err := run(r, scan)
	if err != nil {
		return nil, fmt.Errorf("reduce %q: %w", name, err)
	}
	return out, nil
}

// run feeds r the results scan yields, in increasing task id order, and
// returns r's result once it is known to be JSON.
func run(r Reducer, scan ScanFunc) ([]byte, error) {
	var (
		lastID  int64
		started bool
		stopErr error // why run stopped the scan, as opposed to scan failing
	)
	scanErr := scan(func(taskID int64, failed bool, result json.RawMessage) error {
		if stopErr != nil { // a scan that ignored the error: the reducer is spent
			return stopErr
		}
		if started && taskID <= lastID {
			stopErr = fmt.Errorf("task %d came after task %d: results must arrive in increasing task id order", taskID, lastID)
			return stopErr
		}
		started, lastID = true, taskID
		if failed {
			result = nil
		}
		if err := r.Add(taskID, failed, result); err != nil {
			stopErr = reduceErrorFor(taskID, err)
			return stopErr
		}
		return nil
	})
	switch {
	case stopErr != nil:
		return nil, stopErr
	case scanErr != nil:
		return nil, fmt.Errorf("scanning results: %w", scanErr)
	}

	out, err := r.Result()
	if err != nil {
		return nil, err
	}
	if _, valid := r.(reducerOfValidJSON); !valid && !json.Valid(out) {
		return nil, fmt.Errorf("the reducer's result is not valid JSON: %.40q", out)
	}
	return out, nil
}

// reducerOfValidJSON is a built-in reducer: its Result is valid JSON by
// construction, so Reduce need not scan it again. Only this package can
// implement it.
type reducerOfValidJSON interface{ resultIsValidJSON() }

func (*collectReducer) resultIsValidJSON() {}
func (*sumReducer) resultIsValidJSON()     {}
func (*concatReducer) resultIsValidJSON()  {}
func (*mergeReducer) resultIsValidJSON()   {}
func (noneReducer) resultIsValidJSON()     {}

// reduceErrorFor makes err a *Error for taskID unless it already is one.
func reduceErrorFor(taskID int64, err error) error {
	if _, ok := errors.AsType[*Error](err); ok {
		return err
	}
	return &Error{TaskID: taskID, Err: err}
}

// refuseResult is the error a built-in reducer returns for a task's result.
func refuseResult(taskID int64, format string, args ...any) error {
	return &Error{TaskID: taskID, Err: fmt.Errorf(format, args...)}
}

// collectReducer builds a JSON array with one element per task, streaming:
// it holds only the array written so far.
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
	if err := json.Compact(&r.buf, reduceValidUTF8(result)); err != nil {
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

// sumReducer adds numeric results, exactly while they are integers.
type sumReducer struct {
	total reduceNumber
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

// concatReducer joins array results into one array, or string results into
// one string, streaming: it holds only the output written so far.
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
	if err := json.Compact(&r.scratch, reduceValidUTF8(result)); err != nil {
		return refuseResult(taskID, "the result is not valid JSON: %w", err)
	}
	value := r.scratch.Bytes()
	kind := value[0]
	switch {
	case kind == 'n':
		return nil
	case kind != '[' && kind != '"':
		return refuseResult(taskID, "want a JSON array or string, got a JSON %s", reduceJSONKind(value))
	case r.kind == 0:
		r.kind = kind
		r.buf.WriteByte(kind)
	case r.kind != kind:
		return refuseResult(taskID, "got a JSON %s after earlier results that were JSON %ss",
			reduceJSONKind(value), reduceJSONKind([]byte{r.kind}))
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

// mergeReducer sums objects of numbers key by key. It holds one running
// total per key: the output being built.
type mergeReducer struct {
	sums map[string]*reduceNumber
}

func (r *mergeReducer) Add(taskID int64, failed bool, result json.RawMessage) error {
	if failed {
		return nil
	}
	value := reduceTrimSpace(result)
	switch {
	case len(value) == 0:
		return refuseResult(taskID, "the result is empty")
	case !json.Valid(value):
		return refuseResult(taskID, "the result is not valid JSON: %.40q", value)
	case value[0] == 'n':
		return nil
	case value[0] != '{':
		return refuseResult(taskID, "want a JSON object of numbers, got a JSON %s", reduceJSONKind(value))
	}
	if r.sums == nil {
		r.sums = make(map[string]*reduceNumber)
	}
	if err := reduceEachNumberField(value, r.addField); err != nil {
		return &Error{TaskID: taskID, Err: err}
	}
	return nil
}

// addField adds lit, one key's number literal, to that key's total.
func (r *mergeReducer) addField(key, lit []byte) error {
	sum := r.sums[string(key)]
	if sum == nil {
		sum = new(reduceNumber)
		r.sums[string(key)] = sum
	}
	if err := sum.addLiteral(lit); err != nil {
		return fmt.Errorf("key %q: %w", key, err)
	}
	return nil
}

// reduceEachNumberField calls fn with the decoded key and the number
// literal of each field of obj, a valid JSON object, until fn fails. A
// value that is not a number is an error naming its key. Merge walks
// objects itself because encoding/json allocates for every field.
func reduceEachNumberField(obj []byte, fn func(key, lit []byte) error) error {
	var decoded []byte // the last key that needed decoding
	i := 1             // past the '{'
	for {
		i = reduceSkipSpace(obj, i)
		switch obj[i] {
		case '}':
			return nil
		case ',':
			i = reduceSkipSpace(obj, i+1)
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
		i = reduceSkipSpace(obj, reduceSkipSpace(obj, i)+1) // past the ':'
		if c := obj[i]; c != '-' && (c < '0' || c > '9') {
			return fmt.Errorf("key %q: want a JSON number, got a JSON %s", key, reduceJSONKind(obj[i:]))
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

// reduceSkipSpace returns the index of the first non-space byte of b at or
// after i.
func reduceSkipSpace(b []byte, i int) int {
	for i < len(b) && (b[i] == ' ' || b[i] == '\t' || b[i] == '\n' || b[i] == '\r') {
		i++
	}
	return i
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

// noneReducer ignores every result.
type noneReducer struct{}

func (noneReducer) Add(int64, bool, json.RawMessage) error { return nil }
func (noneReducer) Result() ([]byte, error)                { return []byte("null"), nil }

// reduceNumber is a running total of JSON numbers. Integer literals are
// added exactly: in an int64 while it does not overflow, in a big.Int
// beyond. Any literal with a fraction or an exponent makes the total a
// float64, the exact integer part converted only at the end.
type reduceNumber struct {
	small   int64
	large   *big.Int // what overflowed small; nil until then
	frac    float64  // sum of the non-integer literals
	isFloat bool
	scratch big.Int
}

// add adds the JSON number raw, or says why raw is not one.
func (n *reduceNumber) add(raw []byte) error {
	raw = reduceTrimSpace(raw)
	switch {
	case len(raw) == 0:
		return errors.New("the result is empty")
	case !json.Valid(raw):
		return fmt.Errorf("the result is not valid JSON: %.40q", raw)
	case raw[0] != '-' && (raw[0] < '0' || raw[0] > '9'):
		return fmt.Errorf("want a JSON number, got a JSON %s %.40q", reduceJSONKind(raw), raw)
	}
	return n.addLiteral(raw)
}

// addLiteral adds lit, a valid JSON number literal.
func (n *reduceNumber) addLiteral(lit []byte) error {
	if bytes.ContainsAny(lit, ".eE") {
		f, err := strconv.ParseFloat(string(lit), 64)
		if err != nil {
			return fmt.Errorf("number %.40s is out of float64 range", lit)
		}
		n.isFloat = true
		n.frac += f
		if math.IsInf(n.frac, 0) {
			return errors.New("the sum overflows float64")
		}
		return nil
	}
	if v, err := strconv.ParseInt(string(lit), 10, 64); err == nil {
		n.addInt(v)
		return nil
	}
	if _, ok := n.scratch.SetString(string(lit), 10); !ok {
		return fmt.Errorf("integer %.40s does not parse", lit)
	}
	n.spill().Add(n.large, &n.scratch)
	return nil
}

// addInt adds v, moving the int64 total into the big.Int when the sum
// would overflow, so later additions stay on the fast path.
func (n *reduceNumber) addInt(v int64) {
	s := n.small + v
	if (n.small^s)&(v^s) < 0 { // both operands' sign differs from the sum's
		n.spill().Add(n.large, n.scratch.SetInt64(n.small))
		s = v
	}
	n.small = s
}

// spill returns the big.Int part of the total, allocating it on first use.
func (n *reduceNumber) spill() *big.Int {
	if n.large == nil {
		n.large = new(big.Int)
	}
	return n.large
}

// appendJSON appends the total as a JSON number.
func (n *reduceNumber) appendJSON(b []byte) ([]byte, error) {
	if !n.isFloat {
		if n.large == nil {
			return strconv.AppendInt(b, n.small, 10), nil
		}
		total := new(big.Int).Add(n.large, big.NewInt(n.small))
		return total.Append(b, 10), nil
	}
	f := float64(n.small) + n.frac
	if n.large != nil {
		exact := new(big.Int).Add(n.large, big.NewInt(n.small))
		whole, _ := new(big.Float).SetInt(exact).Float64()
		f = whole + n.frac
	}
	if math.IsInf(f, 0) {
		return nil, errors.New("the sum overflows float64")
	}
	return reduceAppendFloat(b, f), nil
}

// reduceAppendFloat formats f the way encoding/json does.
func reduceAppendFloat(b []byte, f float64) []byte {
	format := byte('f')
	if abs := math.Abs(f); abs != 0 && (abs < 1e-6 || abs >= 1e21) {
		format = 'e'
	}
	b = strconv.AppendFloat(b, f, format, -1, 64)
	if format == 'e' {
		// Shorten e-09 to e-9, as encoding/json does.
		if n := len(b); n >= 4 && b[n-4] == 'e' && b[n-3] == '-' && b[n-2] == '0' {
			b[n-2] = b[n-1]
			b = b[:n-1]
		}
	}
	return b
}

// reduceValidUTF8 replaces each invalid UTF-8 sequence in b with U+FFFD,
// as decoding with encoding/json would, so outputs are always UTF-8. In
// valid JSON such bytes can only sit inside strings.
func reduceValidUTF8(b []byte) []byte {
	if utf8.Valid(b) {
		return b
	}
	return bytes.ToValidUTF8(b, []byte("\uFFFD"))
}

// reduceTrimSpace strips the whitespace JSON allows around a value.
func reduceTrimSpace(b []byte) []byte {
	isSpace := func(c byte) bool { return c == ' ' || c == '\t' || c == '\n' || c == '\r' }
	for len(b) > 0 && isSpace(b[0]) {
		b = b[1:]
	}
	for len(b) > 0 && isSpace(b[len(b)-1]) {
		b = b[:len(b)-1]
	}
	return b
}

// reduceJSONKind names the kind of the valid, trimmed JSON value v, for
// error messages.
func reduceJSONKind(v []byte) string {
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
