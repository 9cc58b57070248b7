// Package envconfig maps settings given as text (WARREN_* variables, or
// the values of the warren command's flags) onto a configuration struct.
// A package's table of Vars is the one mapping of its Config: its
// ConfigFromEnv reads the variables through it, and the warren command
// hands it its flags' values, so that a binary built on the worker or
// server package reads exactly what `warren worker` or `warren server`
// reads, parsed the same way.
package envconfig

import (
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"
)

// Var is one setting: the variable that holds it, the warren command's
// flag for it, and how its text sets the field of a C.
type Var[C any] struct {
	// Name is the environment variable, like WARREN_PREFIX.
	Name string
	// Flag is the warren command's flag of the same setting, without
	// dashes, like prefix.
	Flag string
	// Set parses value, never empty, into c.
	Set func(c *C, value string) error
}

// Error is a setting whose text does not parse: it names the variable and
// the flag, so that a caller can name whichever the value came from.
type Error struct {
	Var, Flag string
	Err       error
}

func (e *Error) Error() string { return e.Var + ": " + e.Err.Error() }

func (e *Error) Unwrap() error { return e.Err }

// Apply sets c from each of vars whose value, by lookup(Name), is not
// empty (or only white space); the errors of every bad value are joined,
// each an *Error.
func Apply[C any](c *C, vars []Var[C], lookup func(name string) string) error {
	var errs []error
	for _, v := range vars {
		value := strings.TrimSpace(lookup(v.Name))
		if value == "" {
			continue
		}
		if err := v.Set(c, value); err != nil {
			errs = append(errs, &Error{Var: v.Name, Flag: v.Flag, Err: err})
		}
	}
	return errors.Join(errs...)
}

// String sets a string field to the value as given.
func String[C any](field func(*C) *string) func(*C, string) error {
	return func(c *C, s string) error {
		*field(c) = s
		return nil
	}
}

// Int sets an int field from a whole number.
func Int[C any](field func(*C) *int) func(*C, string) error {
	return func(c *C, s string) error {
		n, err := strconv.Atoi(s)
		if err != nil {
			return fmt.Errorf("%q is not a whole number", s)
		}
		*field(c) = n
		return nil
	}
}

// Int64 sets an int64 field from a whole number.
func Int64[C any](field func(*C) *int64) func(*C, string) error {
	return func(c *C, s string) error {
		n, err := strconv.ParseInt(s, 10, 64)
		if err != nil {
			return fmt.Errorf("%q is not a whole number", s)
		}
		*field(c) = n
		return nil
	}
}

// Bool sets a bool field from what strconv.ParseBool takes (1, true, 0,
// false, ...).
func Bool[C any](field func(*C) *bool) func(*C, string) error {
	return func(c *C, s string) error {
		b, err := strconv.ParseBool(s)
		if err != nil {
			return fmt.Errorf("%q is not a boolean (1 or 0, true or false)", s)
		}
		*field(c) = b
		return nil
	}
}

// Duration sets a time.Duration field from a Go duration (500ms, 30s, 2m).
func Duration[C any](field func(*C) *time.Duration) func(*C, string) error {
	return func(c *C, s string) error {
		d, err := time.ParseDuration(s)
		if err != nil {
			return fmt.Errorf("%q is not a duration (like 500ms, 30s, 2m)", s)
		}
		*field(c) = d
		return nil
	}
}

// List sets a []string field from a comma-separated list, leaving out
// empty entries and the white space around each.
func List[C any](field func(*C) *[]string) func(*C, string) error {
	return func(c *C, s string) error {
		*field(c) = SplitList(s)
		return nil
	}
}

// Durations sets a []time.Duration field from comma-separated durations
// (the retry tiers: 1s,5s,30s).
func Durations[C any](field func(*C) *[]time.Duration) func(*C, string) error {
	return func(c *C, s string) error {
		out, err := ParseDurations(s)
		*field(c) = out
		return err
	}
}

// ParseDurations reads comma-separated durations; "" is none.
func ParseDurations(s string) ([]time.Duration, error) {
	if strings.TrimSpace(s) == "" {
		return nil, nil
	}
	var out []time.Duration
	for _, part := range strings.Split(s, ",") {
		d, err := time.ParseDuration(strings.TrimSpace(part))
		if err != nil {
			return nil, fmt.Errorf("%q is not a duration (like 500ms, 5s, 2m)", strings.TrimSpace(part))
		}
		out = append(out, d)
	}
	return out, nil
}

// SplitList splits a comma-separated list, leaving out empty entries and
// the white space around each.
func SplitList(list string) []string {
	var out []string
	for _, s := range strings.Split(list, ",") {
		if s = strings.TrimSpace(s); s != "" {
			out = append(out, s)
		}
	}
	return out
}

// KeepForever is the retention of "forever": a closed job is never
// deleted (server.Config.Retention below 0).
const KeepForever = -1

// ParseRetention reads a retention as --retention and WARREN_RETENTION
// take it: a Go duration of at least a second (168h), a whole number of
// days (30d), or "forever" (KeepForever).
func ParseRetention(s string) (time.Duration, error) {
	s = strings.TrimSpace(s)
	if strings.EqualFold(s, "forever") {
		return KeepForever, nil
	}
	if days, ok := strings.CutSuffix(s, "d"); ok {
		if n, err := strconv.ParseInt(days, 10, 32); err == nil && n > 0 {
			return time.Duration(n) * 24 * time.Hour, nil
		}
	}
	if d, err := time.ParseDuration(s); err == nil && d >= time.Second {
		return d, nil
	}
	return 0, fmt.Errorf("%q is not a retention: a duration of at least 1s (like 168h or 30d) or forever", s)
}
