// Package fault holds the two kinds of error every library of orchestrate
// returns when it is not a plain failure: bad input (a flag, a file, a KV
// value someone wrote by hand, a reply that makes no sense) and an
// unavailable remote side (Consul or the cloud unreachable or refusing).
// Libraries wrap their errors in these kinds; each binary maps them to its
// exit code in one place (internal/exitcode.Code): input is 2, unavailable 3,
// anything else 1.
package fault

import (
	"errors"
	"fmt"
)

// InputError is bad input; its message names what is wrong.
type InputError struct{ Err error }

// Error returns the wrapped error's message.
func (e *InputError) Error() string { return e.Err.Error() }

// Unwrap returns the wrapped error.
func (e *InputError) Unwrap() error { return e.Err }

// Input marks err as bad input; nil stays nil.
func Input(err error) error {
	if err == nil {
		return nil
	}
	return &InputError{Err: err}
}

// Inputf returns a new input error.
func Inputf(format string, args ...any) error {
	return &InputError{Err: fmt.Errorf(format, args...)}
}

// IsInput reports whether err is, or wraps, bad input.
func IsInput(err error) bool {
	var ie *InputError
	return errors.As(err, &ie)
}

// UnavailableError is a remote side (Consul, the cloud) that could not be
// reached or refused the request.
type UnavailableError struct{ Err error }

// Error returns the wrapped error's message.
func (e *UnavailableError) Error() string { return e.Err.Error() }

// Unwrap returns the wrapped error.
func (e *UnavailableError) Unwrap() error { return e.Err }

// Unavailable marks err as an unavailable remote side; nil stays nil.
func Unavailable(err error) error {
	if err == nil {
		return nil
	}
	return &UnavailableError{Err: err}
}

// IsUnavailable reports whether err is, or wraps, an unavailable remote side.
func IsUnavailable(err error) bool {
	var ue *UnavailableError
	return errors.As(err, &ue)
}
