// Package exitcode maps errors to the exit codes every binary shares, in
// one place (Code):
//
//	0 done, or the answer is yes
//	1 the answer is no (hosts not on version, failures found, timeout, ...)
//	2 usage or input error, with a message naming what is wrong
//	3 Consul or the cloud could not be reached or refused
//
// An unexpected error is 1 with its message, never 3.
package exitcode

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/url"

	"github.com/hashicorp/consul/api"

	"github.com/jiocloud/orchestrate/internal/fault"
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

// Code returns the exit code for err, the one place each binary maps its
// errors: nil is 0; the code of the outermost *Error in its chain; 2 for
// bad input (fault.InputError); 3 for a remote side that could not be
// reached or refused (fault.UnavailableError, or an error of the Consul
// client's transport: a failed connection, an HTTP error status, a
// deadline); anything else is unexpected, 1 with its message.
func Code(err error) int {
	if err == nil {
		return OK
	}
	var e *Error
	switch {
	case errors.As(err, &e):
		return e.Code
	case fault.IsInput(err):
		return Usage
	case fault.IsUnavailable(err) || remote(err):
		return Unavailable
	}
	return No
}

// remote reports whether err came from reaching a remote side: the Consul
// client's connection or an HTTP status it answered with, or a deadline.
func remote(err error) bool {
	var ue *url.Error
	var se api.StatusError
	var ne net.Error
	return errors.As(err, &ue) || errors.As(err, &se) || errors.As(err, &ne) || errors.Is(err, context.DeadlineExceeded)
}
