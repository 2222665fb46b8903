package reaper

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/jiocloud/orchestrate/internal/store/reaperkv"
)

// Repair before replace. A role's repair ladder is a prefix of rerun,
// reboot, rebuild: an unhealthy server (or one in Nova ERROR, or
// unaccounted) is given each step in turn, each with its own grace, and
// is replaced as before only when the last did not make it serve again.
// rerun is the node's own: its repair watch re-runs converge when its
// checks turn critical (orchestrate converge --repair); the reaper only
// gives it the step's grace. reboot and rebuild are Nova's. A suspect
// server (its consistent run failed) is replaced at once: Puppet itself
// failed on it. Each step asks the same gate as a replacement (armed,
// not paused, the hourly budget for a reboot or rebuild, max_in_flight,
// the journal before the cloud call).

// Repair steps (see reaperkv).
const (
	RepairRerun   = reaperkv.RepairRerun
	RepairReboot  = reaperkv.RepairReboot
	RepairRebuild = reaperkv.RepairRebuild
)

// OpRepair journals a repair step (the entry's phase, with its start and
// the budget for a reboot or rebuild), then asks Nova for it: a hard
// reboot, or a rebuild from the role's image; a rerun asks nothing of
// the cloud. A step is asked at most once per entry: a new leader that
// finds the phase journalled never asks again.
const OpRepair Op = reaperkv.ActivityRepair

// StateRepairing is the part a server plays in its repair entry.
const StateRepairing ServerState = reaperkv.ServerRepairing

// RebuildRequest is one server to rebuild in place.
type RebuildRequest struct {
	// ID is the server's Nova ID; Image the image (name or ID) it is
	// rebuilt from. Its name, metadata, key and user data are kept.
	ID    string
	Image string
}

// Repairer is the part of the Cloud a repair ladder uses.
type Repairer interface {
	// Reboot hard-reboots a server (Nova's reboot, type HARD: it works
	// from ERROR and from a hung guest). Conflict when Nova refuses it in
	// the server's state (409).
	Reboot(ctx context.Context, id string) error
	// Rebuild rebuilds a server from an image, keeping its ID, name,
	// metadata and user data. Conflict when Nova refuses it (409).
	Rebuild(ctx context.Context, req RebuildRequest) error
}

// validateRepair checks the role's repair ladder (a prefix of rerun,
// reboot, rebuild, each step once) and fills in repair_grace.
func (r *Role) validateRepair(field string) error {
	for i, step := range r.Repair {
		if !slices.Contains(reaperkv.RepairLadder, step) {
			return fmt.Errorf("%s.repair[%d]: %q is no repair step (want %s)", field, i, step, strings.Join(reaperkv.RepairLadder, ", "))
		}
		if i >= len(reaperkv.RepairLadder) || step != reaperkv.RepairLadder[i] {
			return fmt.Errorf("%s.repair: [%s] is not a prefix of [%s]: each step is tried after the ones before it (want [], [rerun], [rerun, reboot] or [rerun, reboot, rebuild])",
				field, strings.Join(r.Repair, ", "), strings.Join(reaperkv.RepairLadder, ", "))
		}
	}
	if r.RepairGrace == 0 {
		r.RepairGrace = r.CriticalGrace
	}
	if r.RepairGrace < 0 {
		return fmt.Errorf("%s.repair_grace: must be a positive duration, got %s", field, r.RepairGrace.D())
	}
	return nil
}

// RepairGraceOf is how long a server is given to serve again after repair
// step step began: repair_grace for a rerun or a reboot, boot_grace for a
// rebuild (the server boots from a fresh disk and converges from
// scratch, as a new server does).
func (r *Role) RepairGraceOf(step string) time.Duration {
	if step == RepairRebuild {
		return r.BootGrace.D()
	}
	return r.RepairGrace.D()
}

// NextRepair is the step of the role's ladder after step ("" for the
// first), or "" when the ladder has none.
func (r *Role) NextRepair(step string) string {
	if step == "" {
		if len(r.Repair) == 0 {
			return ""
		}
		return r.Repair[0]
	}
	i := slices.Index(r.Repair, step)
	if i < 0 || i+1 >= len(r.Repair) {
		return ""
	}
	return r.Repair[i+1]
}
