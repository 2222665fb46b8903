package reaperkv

import (
	"fmt"
	"time"

	"github.com/jiocloud/orchestrate/internal/store/schema"
)

// The reaper's journal entries and its state report are values under
// <prefix>/reaper/; their formats live here, with the keys, so that
// `orchestrate status` reads them without linking the reaper (and its
// cloud client).

// EntryKind is what a journal entry does.
type EntryKind string

// Journal entry kinds.
const (
	// KindCreate adds a server because the role is below its desired count.
	KindCreate EntryKind = "create"
	// KindReplace replaces one server (unhealthy, unaccounted, expired).
	KindReplace EntryKind = "replace"
	// KindDelete removes a surplus server (scale in), or deregisters a dead
	// node that has no server.
	KindDelete EntryKind = "delete"
)

// Phase is the step a journal entry is at. An entry is written in a phase
// before the cloud call that phase makes.
type Phase string

// Journal entry phases.
const (
	// PhaseCreating: about to create (or creating) NewName.
	PhaseCreating Phase = "creating"
	// PhaseBooting: NewID exists; waiting for it to check in passing.
	PhaseBooting Phase = "booting"
	// PhaseDraining: OldName is in maintenance mode until DrainUntil.
	PhaseDraining Phase = "draining"
	// PhaseDeleting: about to delete (or deleting) OldID.
	PhaseDeleting Phase = "deleting"
	// PhaseRollback: about to delete NewID, a replacement that failed.
	PhaseRollback Phase = "rollback"
	// PhaseClaiming: NewID is a standby of the role's warm pool taken by
	// this entry (its pool record was removed with the entry's write);
	// about to clear its standby mark in Nova and end its maintenance.
	PhaseClaiming Phase = "claiming"
	// PhaseAborting: the drain of OldName failed or was not answered and
	// its role says abort: about to end its maintenance, then drop the
	// entry with its drain request and record the host's cool-off (see
	// DrainAbortRecord). A leader finishes an aborting entry as an abort,
	// never as a delete.
	PhaseAborting Phase = "aborting"
	// PhaseLaunchHook: NewName serves; its role's on_launch hook holds the
	// entry (LaunchHook) until an answer or its deadline, before the entry
	// finishes or the old server is drained.
	PhaseLaunchHook Phase = "launch-hook"
	// PhaseTerminateHook: OldName's drain is over; its role's on_terminate
	// hook holds the entry (TerminateHook) until an answer or its
	// deadline, before the delete. The node stays in maintenance.
	PhaseTerminateHook Phase = "terminate-hook"
)

// JournalEntry is the value of <prefix>/reaper/journal/<id>: an operation
// that spans cloud calls and cycles, persisted so another leader can
// finish or undo it.
type JournalEntry struct {
	ID     string    `json:"id"`
	Kind   EntryKind `json:"kind"`
	Role   string    `json:"role"`
	Reason string    `json:"reason"`
	Mode   string    `json:"mode,omitempty"`
	Phase  Phase     `json:"phase"`
	// NewName and NewID are the server an entry creates; OldName and
	// OldID the one it replaces or deletes.
	NewName string `json:"new_name,omitempty"`
	NewID   string `json:"new_id,omitempty"`
	OldName string `json:"old_name,omitempty"`
	OldID   string `json:"old_id,omitempty"`
	// Started is when the entry was made; Updated its last phase change.
	Started    time.Time `json:"started"`
	Updated    time.Time `json:"updated"`
	DrainUntil time.Time `json:"drain_until,omitzero"`
	// DeleteAsked is when Nova first accepted the delete of the server this
	// phase deletes (the old one; the new one in a rollback) while it still
	// had it: the planner looks for it again each cycle, and after
	// cloud_timeout asks again with backoff.
	DeleteAsked time.Time `json:"delete_asked,omitzero"`
	// Attempts counts create calls made for this entry.
	Attempts int    `json:"attempts,omitempty"`
	Error    string `json:"error,omitempty"`
	// Fault is Nova's message for a new server it put in ERROR; a rollback
	// with one backs off the role's creates.
	Fault string `json:"fault,omitempty"`
	// Provision is the detail of the new server's own failed provisioned
	// record (the first-boot step that failed); a rollback with one backs
	// off the role's creates, as a fault does.
	Provision string `json:"provision,omitempty"`
	// Standby: the entry creates (or deletes) a standby of the role's warm
	// pool, not a member of the role: it counts neither towards the role's
	// count nor against max_in_flight.
	Standby bool `json:"standby,omitempty"`
	// Claimed is when the entry claimed NewID from the warm pool instead of
	// creating a server (zero for a create); the claim's timeout runs from it.
	Claimed time.Time `json:"claimed,omitzero"`
	// Abortable: the entry retires OldName while it serves (a scale-in of
	// a server not replaced for its health, or a max-age replacement): a
	// drain that fails or is not answered ends as its role's
	// on_drain_failure and on_drain_timeout say. An entry without it
	// (a replacement for health, or one written before the field) deletes
	// at the drain's deadline whatever the answer.
	Abortable bool `json:"abortable,omitempty"`
	// Abort is the record of the aborted drain, set with phase aborting.
	Abort *DrainAbortRecord `json:"abort,omitempty"`
	// Spec is the digest of the boot spec the entry builds its server
	// from when it is not the role's as configured (a rollback's); empty:
	// the configuration's.
	Spec string `json:"spec,omitempty"`
	// LaunchHook and TerminateHook are the entry's lifecycle hooks (its
	// role's on_launch for NewName, on_terminate for OldName), from the
	// request to the result: journalled, so a new leader goes on waiting
	// until the same deadline, and a hook is asked once per entry.
	LaunchHook    *HookState `json:"launch_hook,omitempty"`
	TerminateHook *HookState `json:"terminate_hook,omitempty"`
	// Zone is the availability zone the entry's create asks for (the
	// role's zone with the fewest serving members when it was planned);
	// a capacity refusal backs off that zone of the role.
	Zone string `json:"zone,omitempty"`
	// Repair is the entry's repair ladder (kind repair, and a replacement
	// its ladder ended in): the step in progress and those tried.
	Repair *RepairState `json:"repair,omitempty"`
}

// Server states in the reaper's report, in the order `orchestrate status`
// lists them. The reaper's planner gives each its meaning.
const (
	ServerHealthy         = "healthy"
	ServerExpired         = "expired"
	ServerBooting         = "booting"
	ServerNew             = "new"
	ServerCriticalInGrace = "critical-in-grace"
	ServerAbsentInGrace   = "absent-in-grace"
	ServerUnhealthy       = "unhealthy"
	ServerUnaccounted     = "unaccounted"
	ServerError           = "error"
	ServerErrorInGrace    = "error-in-grace"
	ServerMaintenance     = "maintenance"
	// ServerSuspect: its consistent run failed on every attempt, in a role
	// with replace_suspect.
	ServerSuspect = "suspect"
	// ServerProvisionFailed: its first boot reported provisioned failed
	// (its own record) and it never served: a failed create.
	ServerProvisionFailed = "provision-failed"
	// ServerUnknown: Nova reports a state the reaper does not know
	// (UNKNOWN: its cell did not answer); never acted on.
	ServerUnknown   = "unknown"
	ServerReplacing = "replacing"
	ServerDeleting  = "deleting"
)

// RoleReport is one role in the report.
type RoleReport struct {
	Name    string `json:"name"`
	Desired int    `json:"desired"`
	Count   int    `json:"count"`
	Healthy int    `json:"healthy"`
	// States counts the role's servers by state (one of the Server* names).
	States map[string]int `json:"states"`
	// Attention lists servers that are not healthy (a bounded number).
	Attention []ServerReport `json:"attention,omitempty"`
	// Members names every server of the role (standbys of its warm pool
	// are not members), sorted: `orchestrate scale-in` refuses a host that
	// is not one of them.
	Members []string `json:"members,omitempty"`
	// Autoscale is the role's autoscaling, when it has a policy.
	Autoscale *AutoscaleReport `json:"autoscale,omitempty"`
	// Capacity is set while the role's creates fail for quota or capacity.
	Capacity *schema.CapacityRecord `json:"capacity,omitempty"`
	// Pool is the role's warm pool, when it has one; its standbys are in
	// none of the counts above.
	Pool *PoolReport `json:"pool,omitempty"`
	// DrainAborts are the role's hosts whose drain was aborted and that
	// are not chosen for a scale-in or a max-age retirement until theirs
	// ends.
	DrainAborts []DrainAbortRecord `json:"drain_aborts,omitempty"`
	// Spec is the digest of the boot spec the role's servers are built
	// from (reaper.BootSpec.Digest): the configuration's, or the one a
	// rollback rolls back or is pinned to. Drifted counts the role's
	// servers built from another spec; SpecUnknown those with no recorded spec (built
	// before the reaper recorded one, or not by the reaper).
	Spec        string `json:"spec,omitempty"`
	Drifted     int    `json:"drifted,omitempty"`
	SpecUnknown int    `json:"spec_unknown,omitempty"`
	// Refresh is where the role's instance refresh stands (nil: none
	// running, requested or pinned).
	Refresh *RefreshReport `json:"refresh,omitempty"`
	// Placement is the role's spread over availability zones and its
	// server group, when it has either.
	Placement *PlacementReport `json:"placement,omitempty"`
	// Silent are the role's servers Nova lists whose host's own records
	// have not moved for silent_after (a bounded number, oldest first);
	// Orphaned the hosts named like its servers with records and no
	// server, whose records are removed at Until.
	Silent   []HostMark `json:"silent,omitempty"`
	Orphaned []HostMark `json:"orphaned,omitempty"`
	// SilentCount and OrphanedCount count them all.
	SilentCount   int `json:"silent_count,omitempty"`
	OrphanedCount int `json:"orphaned_count,omitempty"`
	// Held are the role's servers held for a human (hold.go), as
	// honoured this cycle; MaxHeld the role's cap on them, and
	// MinHealthy its floor (`orchestrate hold` refuses a hold that would
	// take the role's last serving server, or go below it).
	Held       []HoldRecord `json:"held,omitempty"`
	MaxHeld    int          `json:"max_held"`
	MinHealthy int          `json:"min_healthy,omitempty"`
}

// HostMark is a silent or orphaned host in the report.
type HostMark struct {
	Host string `json:"host"`
	// Since: a silent host's records last moved then (at the latest, by
	// the reaper's clock; a new leader starts counting anew); an
	// orphaned host has been so since then.
	Since time.Time `json:"since"`
	// Until: when an orphaned host's records are removed (its grace
	// ends), if the gate allows.
	Until time.Time `json:"until,omitzero"`
}

// AutoscaleReport is an autoscaled role's part of the report, and the
// leader's memory of it: a new leader takes the recommendations window,
// the last changes and the history from the last report.
type AutoscaleReport struct {
	// Source is consul or prometheus; Metric the reported name or the
	// query.
	Source string  `json:"source"`
	Metric string  `json:"metric"`
	Target float64 `json:"target"`
	Min    int     `json:"min"`
	Max    int     `json:"max"`
	// Override is the count set by hand that holds the autoscaler.
	Override *schema.Override `json:"override,omitempty"`
	// Window holds the recommendations of the scale-in stabilization
	// window, unbroken since WindowSince: a scale in needs a whole window.
	Window      []Recommendation `json:"window,omitempty"`
	WindowSince time.Time        `json:"window_since,omitzero"`
	// LastScaleOut and LastScaleIn are the last changes, for cooldowns.
	LastScaleOut time.Time `json:"last_scale_out,omitzero"`
	LastScaleIn  time.Time `json:"last_scale_in,omitzero"`
	// Last is this cycle's decision; History the last changes of decision.
	Last    *ScaleDecision  `json:"last,omitempty"`
	History []ScaleDecision `json:"history,omitempty"`
}

// Recommendation is one cycle's recommended count.
type Recommendation struct {
	Time  time.Time `json:"time"`
	Count int       `json:"count"`
}

// Autoscaling decisions.
const (
	ResultScaleOut = "scale-out"
	ResultScaleIn  = "scale-in"
	ResultHold     = "hold"
	// ResultOverride: the count was set by hand; the autoscaler holds.
	ResultOverride = "override"
)

// ScaleDecision is one autoscaling decision: what was measured, what it
// recommends, and what was done.
type ScaleDecision struct {
	Time time.Time `json:"time"`
	// Value is the role's metric (nil: none could be used).
	Value *float64 `json:"value,omitempty"`
	// Serving is how many servers serve; Reports how many of their fresh
	// reports made the value (source consul).
	Serving int `json:"serving"`
	Reports int `json:"reports,omitempty"`
	// Desired is the count before, Recommended the target tracking's
	// count (clamped to min and max), New the count after.
	Desired     int    `json:"desired"`
	Recommended int    `json:"recommended"`
	New         int    `json:"new"`
	Result      string `json:"result"`
	Reason      string `json:"reason"`
	// Clamped lists the reports taken at the role's plausible_max
	// instead of their value, Ignored the reports that cannot be a load
	// (negative, not finite), each "host (value)" (source consul): one
	// node's report is one vote.
	Clamped []string `json:"clamped,omitempty"`
	Ignored []string `json:"ignored,omitempty"`
}

// ServerReport is one server in the report.
type ServerReport struct {
	Name    string    `json:"name"`
	ID      string    `json:"id"`
	State   string    `json:"state"`
	Created time.Time `json:"created"`
}

// ServerStateOrder is the order the report's states are listed in.
var ServerStateOrder = []string{ServerHealthy, ServerExpired, ServerBooting, ServerNew, ServerCriticalInGrace,
	ServerAbsentInGrace, ServerUnhealthy, ServerUnaccounted, ServerSuspect, ServerProvisionFailed, ServerErrorInGrace, ServerError, ServerUnknown, ServerMaintenance, ServerHeld, ServerRepairing, ServerReplacing, ServerDeleting}

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
	RoleBackoff map[string]RoleBackoff `json:"role_backoff,omitempty"`
	// LaunchBackoff holds the roles whose creates and claims are held
	// back after a launch their on_launch hook abandoned (a new leader
	// goes on from it).
	LaunchBackoff map[string]RoleBackoff `json:"launch_backoff,omitempty"`
	Roles         []RoleReport           `json:"roles"`
	Unassigned    int                    `json:"unassigned_servers"`
	Planned       []string               `json:"planned"`
	Blocked       []string               `json:"blocked,omitempty"`
	// Actions are Planned and Blocked as data, in that order: always
	// present ([]) from a reaper that writes them. A report without it
	// (nil after decoding) is from an older reaper.
	Actions []PlanAction   `json:"actions"`
	Journal []JournalEntry `json:"journal,omitempty"`
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
	// Step is the backoff's current step (the next doubles it).
	Step time.Duration `json:"step,omitempty"`
}

// RefreshReport is a role's instance refresh in the reaper's report.
type RefreshReport struct {
	// State is a RefreshRecord state; "auto" for a role's own refresh
	// (refresh: auto, no request).
	State string `json:"state"`
	// Spec is the digest the refresh rolls to; Rollback says it is the
	// spec before the configured one.
	Spec     string `json:"spec"`
	Rollback bool   `json:"rollback,omitempty"`
	// OnSpec counts the role's servers serving on Spec, of Desired;
	// Remaining those still to replace.
	OnSpec    int `json:"on_spec"`
	Desired   int `json:"desired"`
	Remaining int `json:"remaining"`
	// MinHealthyPercent is the share kept serving; Batch the servers
	// replaced at a time.
	MinHealthyPercent int `json:"min_healthy_percent"`
	Batch             int `json:"batch"`
	// Checkpoint is the next checkpoint (percent; 0: none left).
	Checkpoint int `json:"checkpoint,omitempty"`
	// Why says what holds it, or what it waits for.
	Why string `json:"why,omitempty"`
}

// String is the report's one line.
func (r *RefreshReport) String() string {
	what := "refresh"
	if r.Rollback {
		what = "rollback"
	}
	s := fmt.Sprintf("%s %s to spec %.12s: %d of %d serving on it, %d to replace, batch %d (min healthy %d%%)",
		what, r.State, r.Spec, r.OnSpec, r.Desired, r.Remaining, r.Batch, r.MinHealthyPercent)
	if r.Checkpoint > 0 {
		s += fmt.Sprintf(", next checkpoint %d%%", r.Checkpoint)
	}
	if r.Why != "" {
		s += ": " + r.Why
	}
	return s
}

// HoldWhy is why the reaper holds back an action, as a word a program can
// branch on: the gate's reasons (reaper/planner/gate.go), max_in_flight,
// and the waits no gate decides.
type HoldWhy string

// Why an action is held back.
const (
	// HoldDisarmed: the action destroys something and the reaper is not
	// armed.
	HoldDisarmed HoldWhy = "disarmed"
	// HoldPaused: the partition pause holds (too much of the fleet or a
	// role looks unhealthy at once).
	HoldPaused HoldWhy = "paused"
	// HoldInDoubt: the role's part of the Nova list is in doubt.
	HoldInDoubt HoldWhy = "in_doubt"
	// HoldUnknownState: Nova reports the server in a state the reaper does
	// not know.
	HoldUnknownState HoldWhy = "unknown_state"
	// HoldBackoff: the create backoff holds (quota, capacity or a failed
	// create), or the warm pools' own.
	HoldBackoff HoldWhy = "backoff"
	// HoldLaunchBackoff: a launch of the role was abandoned by its
	// on_launch hook.
	HoldLaunchBackoff HoldWhy = "launch_backoff"
	// HoldCapacity: every zone the role may use is out of capacity, or
	// its server group record cannot be read.
	HoldCapacity HoldWhy = "capacity"
	// HoldPartialList: Nova listed partial records.
	HoldPartialList HoldWhy = "partial_list"
	// HoldBudgetCycle: max_creates_per_cycle is reached.
	HoldBudgetCycle HoldWhy = "budget_cycle"
	// HoldBudgetHour: max_actions_per_hour is reached.
	HoldBudgetHour HoldWhy = "budget_hour"
	// HoldLastHealthy: the server is its role's last healthy one.
	HoldLastHealthy HoldWhy = "last_healthy"
	// HoldMinHealthy: the role would go below min_healthy.
	HoldMinHealthy HoldWhy = "min_healthy"
	// HoldInFlight: max_in_flight operations are already open.
	HoldInFlight HoldWhy = "in_flight"
	// HoldMaxHeld: the role holds max_held servers already.
	HoldMaxHeld HoldWhy = "max_held"
	// HoldRefreshHalted: the role's instance refresh failed or was
	// cancelled, and waits for an operator.
	HoldRefreshHalted HoldWhy = "refresh_halted"
	// HoldWaiting: a grace, a timeout, a cool-off or an answer runs.
	HoldWaiting HoldWhy = "waiting"
	// HoldProblem: a record the step needs cannot be read or is not the
	// reaper's to act on; an operator's to look at.
	HoldProblem HoldWhy = "problem"
)

// IsBudget says whether the hold is a spent budget (max_actions_per_hour
// or max_creates_per_cycle).
func (w HoldWhy) IsBudget() bool {
	return w == HoldBudgetHour || w == HoldBudgetCycle
}

// Op names in PlanAction beside the reaper's operations (reaper.Op).
const (
	// PlanScale is a desired count the autoscaler changes.
	PlanScale = ActivityScale
	// PlanReplace, PlanRepair, PlanScaleIn, PlanHold, PlanRefresh and
	// PlanRetire name a step held back before it has an operation: a
	// replacement, a repair step, a scale-in, a hold of a server, an
	// instance refresh, a max-age retirement.
	PlanReplace = "replace"
	PlanRepair  = "repair"
	PlanScaleIn = "scale-in"
	PlanHold    = "hold"
	PlanRefresh = "refresh"
	PlanRetire  = "retire"
	// PlanFlush is a warm pool flush request held back.
	PlanFlush = "pool-flush"
)

// PlanAction is one action of the reaper's last cycle, planned or held
// back, as data: what `orchestrate status` assigns to roles and hosts.
type PlanAction struct {
	// Op is the reaper's operation (create, delete, drain, rollback,
	// deregister, ...; reaper.Op), scale for a desired count the
	// autoscaler changes, or for a step held back before it has one, the
	// Plan* name of the step.
	Op   string `json:"op"`
	Role string `json:"role"`
	// Host is the server the action is about ("" when none: a create not
	// yet named, a role's count).
	Host string `json:"host,omitempty"`
	// Reason is the rule that chose the action (unhealthy, surplus, ...).
	Reason string `json:"reason"`
	// Held: a rule holds the action back; Why says which, WhyText in
	// words.
	Held    bool    `json:"held"`
	Why     HoldWhy `json:"why,omitempty"`
	WhyText string  `json:"why_text,omitempty"`
	// Text is the action's line as in the report's planned or blocked.
	Text string `json:"text"`
}
