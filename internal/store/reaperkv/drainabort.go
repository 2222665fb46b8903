package reaperkv

import (
	"encoding/json"
	"fmt"
	"strings"
	"time"

	"github.com/jiocloud/orchestrate/internal/store/schema"
)

// What ends a failed or unanswered drain (a role's on_drain_failure and
// on_drain_timeout).
const (
	// DrainAbort: the server stays; the drain's entry ends as aborted.
	DrainAbort = "abort"
	// DrainDelete: the server is deleted at the drain's deadline.
	DrainDelete = "delete"
)

// Causes of an aborted drain, in a DrainAbortRecord.
const (
	// AbortFailed: the node (or the platform) answered that moving the
	// work away failed.
	AbortFailed = "failed"
	// AbortTimeout: no answer came by the drain's deadline.
	AbortTimeout = "timeout"
	// AbortHook: the role's on_terminate hook was answered abandon (or
	// its timeout's default was abandon) after the drain.
	AbortHook = "hook"
)

// DrainAbortRecord is the value of <prefix>/reaper/cooloff/<host>: the
// reaper aborted the drain of host, which stays a server of its role and
// is not chosen for a scale-in or a max-age retirement before Until. A
// scale-in that names the host afresh (`orchestrate scale-in`) is not
// held by it.
type DrainAbortRecord struct {
	Host string `json:"host"`
	// ID is the server's Nova ID: a later server of the same name is
	// not held by this record.
	ID   string    `json:"id"`
	Role string    `json:"role"`
	Kind EntryKind `json:"kind"`
	// Entry is the journal entry that drained the host; Reason that
	// entry's reason (why it was to leave).
	Entry  string `json:"entry"`
	Reason string `json:"reason"`
	// Cause is AbortFailed, AbortTimeout or AbortHook; Detail says what the answer
	// said, or that none came.
	Cause  string    `json:"cause"`
	Detail string    `json:"detail"`
	Time   time.Time `json:"time"`
	Until  time.Time `json:"until"`
	// Named: the host had been named with `orchestrate scale-in`; its
	// request was removed with the abort. Restored says the desired count
	// was raised back by one in the same transaction (false when a count
	// set by hand since the request stands).
	Named    bool `json:"named,omitempty"`
	Restored bool `json:"restored,omitempty"`
	// Index is the record's modify index when read (not stored): the
	// record is removed at its end only if it is still the one read.
	Index uint64 `json:"-"`
}

// String is the record on one line, for logs and status.
func (a DrainAbortRecord) String() string {
	what := "scale-in"
	if a.Kind == KindReplace {
		what = "max-age retirement"
	}
	s := fmt.Sprintf("%s of %s aborted at %s: %s; not chosen again before %s", what, a.Host, a.Time.UTC().Format(time.RFC3339), a.Detail, a.Until.UTC().Format(time.RFC3339))
	switch {
	case a.Restored:
		s += "; its scale-in request was withdrawn and the desired count raised back by one"
	case a.Named:
		s += "; its scale-in request was withdrawn (the count set by hand since then stands)"
	}
	return s
}

// A drain that fails (the node answered `orchestrate drained --failed`)
// or is not answered by its deadline ends, for a scale-in or a max-age
// retirement, as its role's on_drain_failure and on_drain_timeout say:
// abort (the server stays) or delete. An aborted drain leaves a record
// under <prefix>/reaper/cooloff/<host>, written in the transaction that
// drops its journal entry, so no leader chooses the host again for a
// scale-in or a max-age retirement before the record's Until.

// ReaperCooloffDir holds one record per host whose drain was aborted.
const ReaperCooloffDir = "reaper/cooloff/"

// CooloffKey is the key of host's aborted-drain record under prefix.
func CooloffKey(prefix, host string) string { return ReaperKey(prefix, ReaperCooloffDir+host) }

// ParseDrainAbort reads the record at key rel (relative to the prefix)
// with value data. An error names what is wrong; the host is then still
// returned when the key names one, so the caller can keep it from being
// chosen until the record is looked at.
func ParseDrainAbort(rel string, data []byte) (DrainAbortRecord, error) {
	host := strings.TrimPrefix(rel, ReaperCooloffDir)
	if schema.ValidName("host", host) != nil {
		return DrainAbortRecord{}, fmt.Errorf("%s: not of the form %s<host>", rel, ReaperCooloffDir)
	}
	var a DrainAbortRecord
	if err := schema.StrictJSON(data, &a); err != nil || a.Host != host || a.Until.IsZero() {
		return DrainAbortRecord{Host: host}, fmt.Errorf("%s: not a record of an aborted drain the reaper wrote", rel)
	}
	return a, nil
}

// MarshalDrainAbort encodes a record for its key.
func MarshalDrainAbort(a DrainAbortRecord) []byte {
	data, _ := json.Marshal(a)
	return data
}
