package reaperkv

import (
	"encoding/json"
	"fmt"
	"time"

	"github.com/jiocloud/orchestrate/internal/store/schema"
)

// The reaper's activity history: every action it carried out (create,
// claim, drain, delete, restore, abort, rollback, deregister...), with its
// result, and each pause, resume, start-gate opening and autoscaling
// change, appended by the leader to one bounded value, oldest dropped
// first, and fired as a Consul event (HistoryEvent) so a watch handler can
// forward it. Journal entries are removed when their work is done; this is
// what stays.
const (
	// HistoryKey holds the history, outside reaper/ so the leader's
	// per-cycle read of its keys does not carry it.
	HistoryKey = "history/reaper"
	// HistoryEvent is the name of the Consul user event fired for each
	// activity; its payload is the activity's JSON, cut to fit.
	HistoryEvent = "reaper-activity"
	// MaxHistoryEntries and MaxHistoryBytes bound the history: 1,000
	// activities is weeks of a steady cloud's replacements and scaling,
	// and 256 KiB stays far under Consul's 512 KiB limit on a value.
	MaxHistoryEntries = 1000
	MaxHistoryBytes   = 256 << 10
	// MaxEventPayload is the most an event's payload may hold: the
	// agent's HTTP API refuses more than 300 bytes (agent/event_endpoint.go,
	// within Serf's 512 for name and payload together).
	MaxEventPayload = 300
)

// Kinds of activity beside the actions (whose kind is the action's op).
const (
	ActivityPause  = "pause"
	ActivityResume = "resume"
	ActivityArm    = "arm"
	ActivityScale  = "scale"
	// ActivityRefresh: an instance refresh started, stopped at a
	// checkpoint, failed, finished or was pinned.
	ActivityRefresh = "refresh"
	// ActivityHold: a step the reaper would take that a safety rule
	// holds (the plan's blocked line), recorded when the hold begins.
	ActivityHold = "hold"
)

// Activity is one entry of the history.
type Activity struct {
	Time time.Time `json:"time"`
	// Leader is the reaper that acted.
	Leader string `json:"leader"`
	// Kind is the action's op (create, claim, drain, delete...) or one of
	// the Activity* kinds.
	Kind string `json:"kind"`
	Role string `json:"role,omitempty"`
	// Action says what was done, as the reaper's log says it.
	Action string `json:"action,omitempty"`
	// Reason is why.
	Reason string `json:"reason,omitempty"`
	// Result is done, pending (accepted by the cloud, not carried out
	// yet) or failed (Error says why).
	Result string `json:"result"`
	Error  string `json:"error,omitempty"`
}

// HistoryKeyOf is the history's key under prefix.
func HistoryKeyOf(prefix string) string { return schema.Join(prefix, HistoryKey) }

// ParseHistory reads a history value; an empty value is an empty history.
func ParseHistory(data []byte) ([]Activity, error) {
	if len(data) == 0 {
		return nil, nil
	}
	var h []Activity
	if err := schema.StrictJSON(data, &h); err != nil {
		return nil, fmt.Errorf("%s: not a history the reaper wrote: %w", HistoryKey, err)
	}
	return h, nil
}

// AppendHistory returns h with add appended, oldest dropped first until
// at most maxEntries remain and their JSON takes at most maxBytes, and
// that JSON.
func AppendHistory(h, add []Activity, maxEntries, maxBytes int) ([]Activity, []byte, error) {
	all := append(append([]Activity(nil), h...), add...)
	if len(all) > maxEntries {
		all = all[len(all)-maxEntries:]
	}
	for {
		data, err := json.Marshal(all)
		if err != nil {
			return nil, nil, err
		}
		if len(data) <= maxBytes || len(all) == 0 {
			return all, data, nil
		}
		// Drop the oldest share that makes it fit, at least one.
		drop := max(1, len(all)*(len(data)-maxBytes)/len(data))
		all = all[drop:]
	}
}

// EventPayload is an activity as an event's payload: its JSON, with the
// error, reason and action cut (marked "...") until it fits in
// MaxEventPayload; the history holds them whole.
func EventPayload(a Activity) []byte {
	limit := MaxEventPayload
	for {
		data, _ := json.Marshal(a)
		if len(data) <= limit || a.Error+a.Reason+a.Action+a.Role+a.Leader == "" {
			return data
		}
		over := len(data) - limit
		switch {
		case len(a.Error) > 0:
			a.Error = cut(a.Error, over)
		case len(a.Reason) > 0:
			a.Reason = cut(a.Reason, over)
		case len(a.Action) > 0:
			a.Action = cut(a.Action, over)
		default:
			a.Role, a.Leader = cut(a.Role, over), cut(a.Leader, over)
		}
	}
}

// cut shortens s by at least n bytes (and the marker), on a rune boundary.
func cut(s string, n int) string {
	keep := len(s) - n - len("...")
	if keep <= 0 {
		return ""
	}
	for keep > 0 && keep < len(s) && s[keep]&0xC0 == 0x80 {
		keep--
	}
	return s[:keep] + "..."
}
