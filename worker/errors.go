package worker

import "errors"

// ErrPermanent matches every error marked with Permanent:
// errors.Is(err, ErrPermanent) is the same test as IsPermanent(err).
var ErrPermanent = errors.New("worker: permanent error")

// Permanent marks err as permanent: the task fails at once with a failed
// result carrying err's text, and is never retried. Use it for errors no
// retry can fix, such as a payload that does not parse. The returned error
// has err's text and unwraps to err, so errors.Is and errors.As still see
// what it wraps. Permanent(nil) is nil.
func Permanent(err error) error {
	if err == nil {
		return nil
	}
	return &permanentError{err: err}
}

// IsPermanent reports whether err, or any error it wraps, was marked with
// Permanent.
func IsPermanent(err error) bool {
	var p *permanentError
	return errors.As(err, &p)
}

type permanentError struct{ err error }

func (e *permanentError) Error() string        { return e.err.Error() }
func (e *permanentError) Unwrap() error        { return e.err }
func (e *permanentError) Is(target error) bool { return target == ErrPermanent }
