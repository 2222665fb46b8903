package schema

import (
	"errors"
	"fmt"
	"strings"
	"time"
)

// Lifecycle hooks: a role's on_launch and on_terminate hold a new
// server's entry between "it serves" and the entry going on, and a
// leaving server's entry between the end of its drain and its delete,
// until a handler (an external inventory, a cache warmer, the platform)
// answers continue or abandon, or the hook's timeout gives its default.
// The reaper writes the request (hook/<role>/<host>); the answer is a
// record of its own (hook-answer/<role>/<host>), written by `orchestrate
// hook complete` with a token that may write hook-answer/ (no node's
// token may: an answer is an external system's or an operator's word,
// never the node's own about itself).

// The hooks.
const (
	// HookLaunch holds a new server (created, or a claimed standby) once
	// it serves, before its entry finishes or the server it replaces is
	// drained.
	HookLaunch = "launch"
	// HookTerminate holds a leaving server after its drain, before its
	// delete.
	HookTerminate = "terminate"
)

// The results of a hook.
const (
	// HookContinue: the entry goes on (the new server joins its role; the
	// leaving server is deleted).
	HookContinue = "continue"
	// HookAbandon: a launch is rolled back (the new server is deleted); a
	// terminate is aborted (the server stays) where the entry may be
	// aborted, and ignored for a server replaced for its health.
	HookAbandon = "abandon"
)

// ValidHookResult checks a result as `orchestrate hook complete` takes it
// and a role's default_result: continue or abandon, nothing else.
func ValidHookResult(s string) error {
	if s != HookContinue && s != HookAbandon {
		return fmt.Errorf("hook result %q: want %s or %s", s, HookContinue, HookAbandon)
	}
	return nil
}

// HookRequest is the value of hook/<role>/<host>: the reaper holds the
// lifecycle action of host (a server of role) until an answer naming
// Entry and Hook, or Deadline, when Default applies. Only the reaper
// writes it, in the transaction that journals the wait.
type HookRequest struct {
	Role string `json:"role"`
	Host string `json:"host"`
	// Hook is HookLaunch or HookTerminate.
	Hook string `json:"hook"`
	// Entry is the journal entry that waits.
	Entry string `json:"entry"`
	// Reason is why the entry exists (a replacement's cause, a scale-in).
	Reason    string    `json:"reason"`
	Requested time.Time `json:"requested"`
	Deadline  time.Time `json:"deadline"`
	// Default is the result at Deadline without an answer.
	Default string `json:"default"`
	// AbandonIgnored: a terminate of a server replaced for its health (or
	// a scale-in of a bad one): an abandon is recorded, and the server is
	// deleted all the same.
	AbandonIgnored bool `json:"abandon_ignored,omitempty"`
	// Answer is, as read, the answer to this request (nil: none yet);
	// never stored in the request.
	Answer *HookAnswer `json:"-"`
	// Index is the key's modify index when read (not stored).
	Index uint64 `json:"-"`
}

// HookAnswer is the value of hook-answer/<role>/<host>: a handler's (or
// an operator's) answer to the request naming Entry and Hook. An answer
// to another entry or hook is none.
type HookAnswer struct {
	Entry  string    `json:"entry"`
	Hook   string    `json:"hook"`
	Result string    `json:"result"`
	Time   time.Time `json:"time"`
	By     string    `json:"by"`
	Detail string    `json:"detail,omitempty"`
	// Index is the key's modify index when read (not stored).
	Index uint64 `json:"-"`
}

// Answers reports whether a answers the request r.
func (r HookRequest) Answers(a HookAnswer) bool { return a.Entry == r.Entry && a.Hook == r.Hook }

// ParseHookRequest reads a hook/<role>/<host> value: only a request the
// reaper wrote for that role and host counts.
func ParseHookRequest(role, host string, data []byte) (HookRequest, error) {
	var r HookRequest
	if err := StrictJSON(data, &r); err != nil {
		return HookRequest{}, errors.New("not a hook request the reaper wrote")
	}
	switch {
	case r.Role != role || r.Host != host:
		return HookRequest{}, fmt.Errorf("a hook request for %s/%s under the key of %s/%s", r.Role, r.Host, role, host)
	case r.Hook != HookLaunch && r.Hook != HookTerminate, r.Entry == "", r.Requested.IsZero(), r.Deadline.IsZero(), ValidHookResult(r.Default) != nil:
		return HookRequest{}, errors.New("not a hook request the reaper wrote")
	}
	return r, nil
}

// ParseHookAnswer reads a hook-answer/<role>/<host> value. Anything but a
// complete answer naming an entry, a hook and continue or abandon (a word
// or a JSON written by hand) is an error: no answer, never a continue.
func ParseHookAnswer(data []byte) (HookAnswer, error) {
	var a HookAnswer
	if err := StrictJSON(data, &a); err != nil {
		return HookAnswer{}, errors.New("not a hook answer (`orchestrate hook complete` writes {\"entry\", \"hook\", \"result\", \"time\", \"by\", \"detail\"})")
	}
	switch {
	case a.Entry == "" || a.Time.IsZero() || strings.TrimSpace(a.By) == "":
		return HookAnswer{}, errors.New("a hook answer without its entry, time or author: `orchestrate hook complete` writes a complete one")
	case a.Hook != HookLaunch && a.Hook != HookTerminate:
		return HookAnswer{}, fmt.Errorf("a hook answer for hook %q: want %s or %s", a.Hook, HookLaunch, HookTerminate)
	}
	if err := ValidHookResult(a.Result); err != nil {
		return HookAnswer{}, fmt.Errorf("a hook answer that is no answer: %w", err)
	}
	return a, nil
}

// Hooks is the hooks' part of a snapshot, by role, then host.
type Hooks struct {
	// Requests holds the reaper's requests, each with its answer.
	Requests map[string]map[string]HookRequest
	// Answers holds every answer record that reads as one, whether or not
	// it answers a request (the reaper removes those left behind).
	Answers map[string]map[string]HookAnswer
	// Problems holds the answer records that are no answer, by role and
	// host: why (and their index, for their removal once nothing waits).
	Problems map[string]map[string]HookProblem
}

// HookProblem is an answer record that is no answer.
type HookProblem struct {
	Why   string
	Index uint64
}

// NewHooks returns an empty Hooks.
func NewHooks() Hooks {
	return Hooks{Requests: map[string]map[string]HookRequest{}, Answers: map[string]map[string]HookAnswer{}, Problems: map[string]map[string]HookProblem{}}
}

// Request returns the request for role and host, if any.
func (h Hooks) Request(role, host string) (HookRequest, bool) {
	r, ok := h.Requests[role][host]
	return r, ok
}

// Problem returns why the answer record of role and host is no answer,
// or "".
func (h Hooks) Problem(role, host string) string { return h.Problems[role][host].Why }

// AnswerOf returns the answer to entry's hook of host in role, if one
// was written (the request itself need not be there).
func (h Hooks) AnswerOf(role, host, entry, hook string) *HookAnswer {
	a, ok := h.Answers[role][host]
	if !ok || a.Entry != entry || a.Hook != hook {
		return nil
	}
	return &a
}

// Set adds v to m[role][host].
func Set[V any](m map[string]map[string]V, role, host string, v V) {
	if m[role] == nil {
		m[role] = map[string]V{}
	}
	m[role][host] = v
}
