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
	"io"
	"net"
	"net/http"
	"net/url"
	"regexp"
	"strconv"
	"strings"
	"syscall"

	"github.com/hashicorp/consul/api"

	"github.com/jiocloud/orchestrate/internal/fault"
	"github.com/jiocloud/orchestrate/internal/term"
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

// Message is err as a person reads it, in the words of the exit codes:
// an error of reaching Consul (exit 3) says so and what to check: "cannot
// reach Consul at 127.0.0.1:8500: connection refused (is the agent
// running?)", "Consul refused the token: permission denied (the token
// needs key:write on orchestrate/roles/web)". The context around the
// transport's own words (what was being read or written, a hint about
// the policy) is kept; the URL, the HTTP verb and the token's accessor ID
// are not.
//
// The message is one line, any control character in it escaped
// (term.OneLine): an error may quote what a remote side or a node wrote.
func Message(err error) string {
	return term.OneLine(message(err))
}

func message(err error) string {
	msg := err.Error()
	var ue *url.Error
	var se api.StatusError
	switch {
	case errors.As(err, &se) && strings.Contains(msg, se.Error()):
		return strings.Replace(msg, se.Error(), statusMessage(se), 1)
	case errors.As(err, &ue) && strings.Contains(msg, ue.Error()):
		return strings.Replace(msg, ue.Error(), reachMessage(ue), 1)
	}
	// A transaction's refusals come as text in its answer, not as a
	// status.
	return refused(msg)
}

// refused says the ACL refusals in msg once: "Consul refused the token:
// permission denied (the token needs key:write on A and B)", in place of
// the first refusal through the last.
func refused(msg string) string {
	locs := refusal.FindAllStringSubmatchIndex(msg, -1)
	if len(locs) == 0 {
		return msg
	}
	var needs []string
	by := map[string][]string{}
	for _, l := range locs {
		perm := msg[l[2]:l[3]]
		if _, seen := by[perm]; !seen {
			needs = append(needs, perm)
			by[perm] = nil
		}
		if l[4] >= 0 {
			by[perm] = append(by[perm], msg[l[4]:l[5]])
		}
	}
	for i, perm := range needs {
		if len(by[perm]) > 0 {
			needs[i] = perm + " on " + listed(by[perm])
		}
	}
	phrase := "Consul refused the token: permission denied (the token needs " + strings.Join(needs, ", and ") + ")"
	return msg[:locs[0][0]] + phrase + msg[locs[len(locs)-1][1]:]
}

// listed writes items as "a", "a and b", "a, b and c".
func listed(items []string) string {
	if len(items) == 1 {
		return items[0]
	}
	return strings.Join(items[:len(items)-1], ", ") + " and " + items[len(items)-1]
}

// refusal finds Consul's ACL refusal in text: the permission lacking, and
// the resource, without the token's accessor ID.
var refusal = regexp.MustCompile(`Permission denied: token with AccessorID '[^']*' lacks permission '([^']+)'(?: on "([^"]*)")?`)

// reachMessage says why Consul could not be reached at the URL's host.
func reachMessage(ue *url.Error) string {
	host := ue.URL
	if u, err := url.Parse(ue.URL); err == nil && u.Host != "" {
		host = u.Host
	}
	why := "no answer"
	var dns *net.DNSError
	var ne net.Error
	switch {
	case errors.Is(ue, syscall.ECONNREFUSED):
		why = "connection refused (is the agent running, and listening there?)"
	case errors.As(ue, &dns):
		why = fmt.Sprintf("no such host %q (check --consul-addr or CONSUL_HTTP_ADDR)", dns.Name)
	case errors.Is(ue, context.DeadlineExceeded) || (errors.As(ue, &ne) && ne.Timeout()):
		why = "timed out (is the agent overloaded, or a firewall in the way?)"
	case errors.Is(ue, syscall.ECONNRESET) || errors.Is(ue, io.EOF):
		why = "the connection was closed (HTTPS to an HTTP port, or the other way round? check CONSUL_HTTP_SSL)"
	case strings.Contains(ue.Err.Error(), "certificate") || strings.Contains(ue.Err.Error(), "tls:"):
		why = "TLS failed: " + innermost(ue.Err) + " (check CONSUL_CACERT and the client certificate)"
	default:
		why = innermost(ue.Err)
	}
	return fmt.Sprintf("cannot reach Consul at %s: %s", host, why)
}

// innermost is the last error in err's chain: the system's own words.
func innermost(err error) string {
	for {
		next := errors.Unwrap(err)
		if next == nil {
			return err.Error()
		}
		err = next
	}
}

// statusMessage says what Consul's HTTP status means for the operator.
func statusMessage(se api.StatusError) string {
	body := se.Body
	switch {
	case se.Code == http.StatusForbidden && strings.Contains(body, "ACL not found"):
		return "Consul refused the token: ACL not found, no such token (check --token-file or CONSUL_HTTP_TOKEN_FILE)"
	case se.Code == http.StatusForbidden:
		if refusal.MatchString(body) {
			return refused(refusal.FindString(body))
		}
		return "Consul refused the token: permission denied (see docs/acl.md for the policy each command needs)"
	case se.Code == http.StatusTooManyRequests:
		return "Consul refused the request: rate limited (429); try again shortly"
	case se.Code >= 500:
		return fmt.Sprintf("Consul could not answer (%d): %s (is there a cluster leader?)", se.Code, clip(body))
	}
	return fmt.Sprintf("Consul refused the request (%d): %s", se.Code, clip(body))
}

// clip keeps the first line of a body, escaped, cut at 200 bytes: a
// body is the remote side's text and may hold anything.
func clip(body string) string {
	line, _, _ := strings.Cut(body, "\n")
	if len(line) > 200 {
		line = line[:200] + "..."
	}
	q := strconv.Quote(line)
	return q[1 : len(q)-1]
}
