package reduce

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"math/big"
	"strconv"
)

// number is a running total of JSON numbers. Integer literals are
// added exactly: in an int64 while it does not overflow, in a big.Int
// beyond. Any literal with a fraction or an exponent makes the total a
// float64, the exact integer part converted only at the end.
type number struct {
	small   int64
	large   *big.Int // what overflowed small; nil until then
	frac    float64  // sum of the non-integer literals
	isFloat bool
	scratch big.Int
}

// add adds the JSON number raw, or says why raw is not one.
func (n *number) add(raw []byte) error {
	raw = trimSpace(raw)
	switch {
	case len(raw) == 0:
		return errors.New("the result is empty")
	case !json.Valid(raw):
		return fmt.Errorf("the result is not valid JSON: %.40q", raw)
	case raw[0] != '-' && (raw[0] < '0' || raw[0] > '9'):
		return fmt.Errorf("want a JSON number, got a JSON %s %.40q", jsonKind(raw), raw)
	}
	return n.addLiteral(raw)
}

// addLiteral adds lit, a valid JSON number literal.
func (n *number) addLiteral(lit []byte) error {
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
func (n *number) addInt(v int64) {
	s := n.small + v
	if (n.small^s)&(v^s) < 0 { // both operands' sign differs from the sum's
		n.spill().Add(n.large, n.scratch.SetInt64(n.small))
		s = v
	}
	n.small = s
}

// spill returns the big.Int part of the total, allocating it on first use.
func (n *number) spill() *big.Int {
	if n.large == nil {
		n.large = new(big.Int)
	}
	return n.large
}

// appendJSON appends the total as a JSON number.
func (n *number) appendJSON(b []byte) ([]byte, error) {
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
	return appendFloat(b, f), nil
}

// appendFloat formats f the way encoding/json does.
func appendFloat(b []byte, f float64) []byte {
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
