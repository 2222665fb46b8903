package store

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	"github.com/jiocloud/orchestrate/internal/store/reaperkv"
)

// ServerStateOrder is the order the report's states are listed in.
var ServerStateOrder = []string{reaperkv.ServerHealthy, reaperkv.ServerExpired, reaperkv.ServerBooting, reaperkv.ServerNew, reaperkv.ServerCriticalInGrace,
	reaperkv.ServerAbsentInGrace, reaperkv.ServerUnhealthy, reaperkv.ServerUnaccounted, reaperkv.ServerSuspect, reaperkv.ServerErrorInGrace, reaperkv.ServerError, reaperkv.ServerUnknown, reaperkv.ServerMaintenance, reaperkv.ServerReplacing, reaperkv.ServerDeleting}

// ReaperReport is the value of <prefix>/reaper/state: what the reaper's
// leader saw and planned in its last cycle.
type ReaperReport struct {
	Time   time.Time `json:"time"`
	Leader string    `json:"leader"`
	DryRun bool      `json:"dry_run"`
	// Interval (nanoseconds in JSON) lets readers tell a stale report from
	// a live one.
	Interval       time.Duration `json:"interval"`
	Armed          bool          `json:"armed"`
	NotArmedReason string        `json:"not_armed_reason,omitempty"`
	Paused         bool          `json:"paused"`
	PauseReason    string        `json:"pause_reason,omitempty"`
	BackoffUntil   time.Time     `json:"backoff_until,omitzero"`
	BackoffReason  string        `json:"backoff_reason,omitempty"`
	// RoleBackoff holds the roles whose creates are held back after a
	// capacity or fatal create error.
	RoleBackoff map[string]RoleBackoff  `json:"role_backoff,omitempty"`
	Roles       []reaperkv.RoleReport   `json:"roles"`
	Unassigned  int                     `json:"unassigned_servers"`
	Planned     []string                `json:"planned"`
	Blocked     []string                `json:"blocked,omitempty"`
	Journal     []reaperkv.JournalEntry `json:"journal,omitempty"`
	// Errors lists what went wrong in the cycle (cloud or Consul).
	Errors []string `json:"errors,omitempty"`
	// Terms are the starts of leaderships in the last hour (this one
	// last), carried from report to report: more than one means the
	// leader lock changed hands or was lost and taken again.
	Terms []LeaderTerm `json:"terms,omitempty"`
}

// LeaderTerm is the start of one leadership.
type LeaderTerm struct {
	Time   time.Time `json:"time"`
	Leader string    `json:"leader"`
}

// RoleBackoff is one role's create backoff.
type RoleBackoff struct {
	Until  time.Time `json:"until"`
	Reason string    `json:"reason"`
}

// ReaperReport reads <prefix>/reaper/state; nil when no reaper wrote one.
// A value that is not a report is an InputError.
func (s *Store) ReaperReport(ctx context.Context) (*ReaperReport, error) {
	key := reaperkv.ReaperKey(s.prefix, reaperkv.ReaperStateKey)
	p, _, err := s.kv.Get(key, readOpts(ctx))
	if err != nil {
		return nil, fmt.Errorf("read %s: %w", key, err)
	}
	if p == nil {
		return nil, nil
	}
	var st ReaperReport
	if err := json.Unmarshal(p.Value, &st); err != nil {
		return nil, &InputError{Err: fmt.Errorf("%s holds a value the reaper did not write: %w", key, err)}
	}
	return &st, nil
}
