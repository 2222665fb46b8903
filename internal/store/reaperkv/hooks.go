package reaperkv

import (
	"encoding/json"
	"time"

	"github.com/jiocloud/orchestrate/internal/store/schema"
)

// HookEvent is the name of the Consul user event the reaper fires when it
// publishes a lifecycle hook's request (schema.HookRequest), for a
// handler's watch (`consul watch -type event -name reaper-hook`); the
// request in KV is what counts, the event only wakes the handler.
const HookEvent = "reaper-hook"

// Activity kinds of the hooks in the history: a request published, and
// the result the reaper took (an answer, or the timeout's default).
const (
	ActivityHook       = "hook"
	ActivityHookResult = "hook-result"
)

// HookState is a journal entry's lifecycle hook: when it was asked, until
// when, and what applies then; then the result the reaper took.
type HookState struct {
	Requested time.Time `json:"requested"`
	Deadline  time.Time `json:"deadline"`
	// Default is the result at Deadline without an answer.
	Default string `json:"default"`
	// Result is schema.HookContinue or schema.HookAbandon once taken
	// (empty while the hook waits); By who answered (or "timeout"),
	// Detail what they said, Time when the reaper took it.
	Result string    `json:"result,omitempty"`
	By     string    `json:"by,omitempty"`
	Detail string    `json:"detail,omitempty"`
	Time   time.Time `json:"time,omitzero"`
}

// Pending reports whether the hook waits for its result.
func (h *HookState) Pending() bool { return h != nil && h.Result == "" }

// HookEventBody is the payload of a HookEvent.
type HookEventBody struct {
	Role     string    `json:"role,omitempty"`
	Host     string    `json:"host,omitempty"`
	Hook     string    `json:"hook"`
	Entry    string    `json:"entry"`
	Deadline time.Time `json:"deadline,omitzero"`
	Default  string    `json:"default,omitempty"`
	// Cut: the names did not fit the agent's limit on a payload; the
	// request under hook/ (`orchestrate hook list`) has them.
	Cut bool `json:"cut,omitempty"`
}

// HookEventPayload is req as an event's payload: role, host, hook, entry,
// deadline and default; when that does not fit MaxEventPayload (names of
// up to 200 bytes each), the deadline and default go, then the role and
// host (marked cut): the entry's ID still names the request.
func HookEventPayload(req schema.HookRequest) []byte {
	b := HookEventBody{Role: req.Role, Host: req.Host, Hook: req.Hook, Entry: req.Entry, Deadline: req.Deadline.UTC(), Default: req.Default}
	for _, shrink := range []func(){
		func() {},
		func() { b.Deadline, b.Default = time.Time{}, "" },
		func() { b.Role, b.Host, b.Cut = "", "", true },
		func() {
			// Unreachable with the reaper's entry IDs (a role name and two
			// numbers), kept so no payload is ever refused.
			if over := len(b.Entry) - (MaxEventPayload - 64); over > 0 {
				b.Entry = cut(b.Entry, over)
			}
		},
	} {
		shrink()
		if data, _ := json.Marshal(b); len(data) <= MaxEventPayload {
			return data
		}
	}
	data, _ := json.Marshal(b)
	return data
}
