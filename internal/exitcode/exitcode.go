// Package exitcode carries a process exit code inside an error, so every
// binary maps failures to the exit codes of DESIGN.md in one place.
//
//	0 done, or the answer is yes
//	1 the answer is no (hosts not on version, failures found, timeout, ...)
//	2 usage or input error, with a message naming what is wrong
//	3 Consul or the cloud could not be reached or refused
package exitcode

import (
	"errors"
	"fmt"
)

// Exit codes shared by every binary.
const (
	OK          = 0
	No          = 1
	Usage       = 2
	Unavailable = 3
)

// Error is an error that also says which exit code it deserves.
type Error struct {
	Code int
	Err  error
}

func (e *Error) Error() string { return e.Err.Error() }
func (e *Error) Unwrap() error { return e.Err }

// Wrap attaches code to err. A nil err stays nil.
func Wrap(code int, err error) error {
	if err == nil {
		return nil
	}
	return &Error{Code: code, Err: err}
}

// Usagef returns a usage or input error (exit 2).
func Usagef(format string, args ...any) error {
	return &Error{Code: Usage, Err: fmt.Errorf(format, args...)}
}

// Nof returns a "the answer is no" error (exit 1).
func Nof(format string, args ...any) error {
	return &Error{Code: No, Err: fmt.Errorf(format, args...)}
}

// Code returns the exit code for err: 0 for nil, the code of the outermost
// *Error in its chain, else 3, because an error nobody classified comes from
// a remote side (Consul, the cloud) far more often than from a bug here.
func Code(err error) int {
	if err == nil {
		return OK
	}
	var e *Error
	if errors.As(err, &e) {
		return e.Code
	}
	return Unavailable
}
