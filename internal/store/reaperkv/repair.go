package reaperkv

import (
	"fmt"
	"strings"
	"time"
)

// Repair before replace: a role's `repair` ladder (rerun, reboot,
// rebuild, any prefix of it) is tried on an unhealthy server before it is
// replaced. The ladder is one journal entry of kind repair, one phase per
// step, each written before the step's cloud call; after the last step
// the entry becomes the server's replacement (kind replace).

// Repair steps, in the order a ladder takes them.
const (
	// RepairRerun: the node's own watch re-runs its converge (the reaper
	// only gives it the step's grace; it cannot run Puppet).
	RepairRerun = "rerun"
	// RepairReboot: a hard reboot through Nova.
	RepairReboot = "reboot"
	// RepairRebuild: a rebuild through Nova from the role's image,
	// keeping the server's ID, name, metadata and user data.
	RepairRebuild = "rebuild"
)

// RepairLadder is every repair step, in order; a role's ladder is a
// prefix of it.
var RepairLadder = []string{RepairRerun, RepairReboot, RepairRebuild}

// KindRepair is a journal entry that repairs OldName in place.
const KindRepair EntryKind = "repair"

// Repair phases: one per step, each with its start in the entry's Repair.
const (
	PhaseRepairRerun   Phase = "repair-rerun"
	PhaseRepairReboot  Phase = "repair-reboot"
	PhaseRepairRebuild Phase = "repair-rebuild"
)

// RepairPhase is the phase of repair step step ("" for no step).
func RepairPhase(step string) Phase {
	switch step {
	case RepairRerun:
		return PhaseRepairRerun
	case RepairReboot:
		return PhaseRepairReboot
	case RepairRebuild:
		return PhaseRepairRebuild
	}
	return ""
}

// ServerRepairing is the state of a server its repair entry holds.
const ServerRepairing = "repairing"

// ActivityRepair is the history's kind of a repair step begun (the
// action's op); a repair that worked ends as a finish whose reason says
// which step repaired it.
const ActivityRepair = "repair"

// Results of a repair step, in its RepairStep and in the metric
// reaper_repairs_total{result}.
const (
	// RepairStarted: the step began (the cloud call, for a reboot or a
	// rebuild, was made or is about to be).
	RepairStarted = "started"
	// RepairRepaired: the server serves again within the step.
	RepairRepaired = "repaired"
	// RepairFailed: the step's grace ended (or the server went to ERROR)
	// with the server still not serving: the next step, or the
	// replacement, follows.
	RepairFailed = "failed"
	// RepairRefused: Nova refused the step's call (409, say): the next
	// step follows at once.
	RepairRefused = "refused"
	// RepairUnknown: the call ended without an answer (a timeout): Nova
	// may have carried it out; it is never asked again for the entry.
	RepairUnknown = "unknown"
	// RepairAbandoned: the ladder ended before the step's end (the server
	// was found suspect, left the list): it is replaced, or judged afresh.
	RepairAbandoned = "abandoned"
	// RepairSkipped: a step of the role's ladder that cannot help this
	// server was passed over (a rerun with no live agent, a rebuild of a
	// server not on the role's boot spec).
	RepairSkipped = "skipped"
)

// RepairState is a repair entry's ladder: the step in progress, since
// when, what the cloud said, and the steps before it.
type RepairState struct {
	// Step is the step in progress ("" once the ladder is over and the
	// entry replaces the server).
	Step string `json:"step,omitempty"`
	// Since is when Step began; Until when its grace ends (journalled,
	// so a new leader waits for the same end, and a changed
	// configuration does not change a step under way).
	Since time.Time `json:"since,omitzero"`
	Until time.Time `json:"until,omitzero"`
	// Asked is when Nova accepted the step's call (a reboot or rebuild);
	// Result is RepairRefused or RepairUnknown when it did not say yes,
	// with Error its answer.
	Asked  time.Time `json:"asked,omitzero"`
	Result string    `json:"result,omitempty"`
	Error  string    `json:"error,omitempty"`
	// Image is the image a rebuild asked for.
	Image string `json:"image,omitempty"`
	// Status is the server's Nova status when the step began: a server
	// that was in ERROR already stays so while Nova works on it.
	Status string `json:"status,omitempty"`
	// Tried are the steps before Step, in order, each with its end.
	Tried []RepairStep `json:"tried,omitempty"`
}

// RepairStep is one step a ladder took, and how it ended.
type RepairStep struct {
	Step   string    `json:"step"`
	Since  time.Time `json:"since"`
	Until  time.Time `json:"until"`
	Result string    `json:"result"`
	// Why says how it ended ("grace 5m0s over, web2 still critical").
	Why string `json:"why,omitempty"`
}

// Clone returns a copy of r (nil for nil) that shares nothing with it.
func (r *RepairState) Clone() *RepairState {
	if r == nil {
		return nil
	}
	c := *r
	c.Tried = append([]RepairStep(nil), r.Tried...)
	return &c
}

// Last is the step the ladder took last: Step in progress, else the last
// one tried ("" when none).
func (r *RepairState) Last() string {
	switch {
	case r == nil:
		return ""
	case r.Step != "":
		return r.Step
	case len(r.Tried) > 0:
		return r.Tried[len(r.Tried)-1].Step
	}
	return ""
}

// String is the ladder on one line: "reboot since 12:00:00Z (asked
// 12:00:01Z); tried rerun (failed)".
func (r *RepairState) String() string {
	if r == nil {
		return ""
	}
	var parts []string
	if r.Step != "" {
		s := fmt.Sprintf("%s since %s, grace until %s", r.Step, r.Since.UTC().Format(time.RFC3339), r.Until.UTC().Format(time.RFC3339))
		switch {
		case r.Result != "":
			s += fmt.Sprintf(" (%s: %s)", r.Result, r.Error)
		case !r.Asked.IsZero():
			s += " (Nova accepted it at " + r.Asked.UTC().Format(time.RFC3339) + ")"
		}
		parts = append(parts, s)
	}
	if len(r.Tried) > 0 {
		var tried []string
		for _, t := range r.Tried {
			tried = append(tried, t.Step+" ("+t.Result+")")
		}
		parts = append(parts, "tried "+strings.Join(tried, ", "))
	}
	return strings.Join(parts, "; ")
}
