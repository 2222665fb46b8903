package reaper

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	"github.com/hashicorp/consul/api"
)

// State is <prefix>/reaper/state: what the leader saw and planned in its
// last cycle. `orchestrate status` prints it.
type State struct {
	Time   time.Time `json:"time"`
	Leader string    `json:"leader"`
	DryRun bool      `json:"dry_run"`
	// Interval lets readers tell a stale state from a live one.
	Interval       Duration  `json:"interval"`
	Armed          bool      `json:"armed"`
	NotArmedReason string    `json:"not_armed_reason,omitempty"`
	Paused         bool      `json:"paused"`
	PauseReason    string    `json:"pause_reason,omitempty"`
	BackoffUntil   time.Time `json:"backoff_until,omitzero"`
	BackoffReason  string    `json:"backoff_reason,omitempty"`
	// RoleBackoff holds the roles whose creates are held back after a
	// capacity or fatal create error.
	RoleBackoff map[string]RoleBackoff `json:"role_backoff,omitempty"`
	Roles       []RoleView             `json:"roles"`
	Unassigned  int                    `json:"unassigned_servers"`
	Planned     []string               `json:"planned"`
	Blocked     []string               `json:"blocked,omitempty"`
	Journal     []Entry                `json:"journal,omitempty"`
	// Errors lists what went wrong in the cycle (cloud or Consul).
	Errors []string `json:"errors,omitempty"`
}

// RoleBackoff is one role's create backoff.
type RoleBackoff struct {
	Until  time.Time `json:"until"`
	Reason string    `json:"reason"`
}

// ReadState reads the state key; nil when there is none.
func ReadState(ctx context.Context, c *api.Client, prefix string) (*State, error) {
	p, _, err := c.KV().Get(StateKey(prefix), (&api.QueryOptions{}).WithContext(ctx))
	if err != nil {
		return nil, fmt.Errorf("read %s: %w", StateKey(prefix), err)
	}
	if p == nil {
		return nil, nil
	}
	var st State
	if err := json.Unmarshal(p.Value, &st); err != nil {
		return nil, fmt.Errorf("%s holds a value the reaper did not write: %w", p.Key, err)
	}
	return &st, nil
}
