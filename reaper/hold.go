package reaper

import (
	"fmt"
	"strings"
	"time"

	"github.com/jiocloud/orchestrate/internal/store/reaperkv"
)

// A hold keeps a failing server for a human (reaperkv.HoldRecord): out of
// service and out of the reaper's reach while its role's replacement is
// built. Holds count against the role's max_held, so they cannot starve
// it; a role's hold_failures makes the reaper hold its first failures
// itself.

const (
	// maxMaxHeld bounds max_held: each held server is one the role runs
	// without, and one more the project pays for; a role that needs more
	// kept aside is a role to look at whole.
	maxMaxHeld = 10
	// defaultHoldFor is an automatic hold's length: a working day for
	// someone to look.
	defaultHoldFor = 24 * time.Hour
	// defaultHoldReason is an automatic hold's reason.
	defaultHoldReason = "hold_failures: kept for a human to look at"
)

// validateHolds fills in and checks max_held, hold_failures, hold_for and
// hold_reason.
func (r *Role) validateHolds(field string) error {
	if r.MaxHeld != nil && (*r.MaxHeld < 0 || *r.MaxHeld > maxMaxHeld) {
		return fmt.Errorf("%s.max_held: want 0 to %d, got %d", field, maxMaxHeld, *r.MaxHeld)
	}
	if r.HoldFailures < 0 || r.HoldFailures > r.HeldCap() {
		return fmt.Errorf("%s.hold_failures: want 0 to max_held (%d), got %d", field, r.HeldCap(), r.HoldFailures)
	}
	if r.HoldFor == 0 {
		r.HoldFor = Duration(defaultHoldFor)
	}
	if r.HoldFor < 0 || r.HoldFor.D() > reaperkv.MaxHoldFor {
		return fmt.Errorf("%s.hold_for: must be a positive duration of at most %s, got %s", field, reaperkv.MaxHoldFor, r.HoldFor.D())
	}
	if strings.TrimSpace(r.HoldReason) == "" {
		r.HoldReason = defaultHoldReason
	}
	return nil
}

// HeldCap is the role's max_held (its default when unset).
func (r *Role) HeldCap() int {
	if r.MaxHeld == nil {
		return reaperkv.DefaultMaxHeld
	}
	return *r.MaxHeld
}

// Hold lengths of an automatic hold (hold_for, its default when unset).
func (r *Role) AutoHoldFor() time.Duration {
	if r.HoldFor <= 0 {
		return defaultHoldFor
	}
	return r.HoldFor.D()
}

// StateHeld: an operator or the reaper holds the server for a human
// (reaperkv.HoldRecord): not serving, not counted towards its role's
// desired count (its replacement is built), and never a victim. It is
// set over whatever the server's checks say (the planner keeps that too).
const StateHeld ServerState = reaperkv.ServerHeld
