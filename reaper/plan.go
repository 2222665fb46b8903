package reaper

import (
	"fmt"
	"time"

	"github.com/jiocloud/orchestrate/internal/store/reaperkv"
	"github.com/jiocloud/orchestrate/internal/store/schema"
)

// Check is one Consul health check, as the planner needs it.
type Check struct {
	Node    string
	CheckID string
	Name    string
	Status  string
	// ServiceID is the service the check belongs to; empty for a node's
	// own checks (serfHealth, node maintenance).
	ServiceID string
	// Notes is the check's notes (converge's mirror of its outcome).
	Notes string
}

// Consul check statuses and IDs the planner reads.
const (
	CheckCritical = "critical"
	// maintNodeCheck is the check Consul uses for node maintenance mode.
	MaintNodeCheck = reaperkv.NodeMaintenanceCheck
	// maintServicePrefix starts service maintenance check IDs.
	MaintServicePrefix = "_service_maintenance:"
)

// Input is everything one planning cycle looks at. It is read, never
// changed, by Plan.
type Input struct {
	Now    time.Time
	Config *Config
	// Servers is the one Nova list of this cycle.
	Servers []Server
	// Checks is the one Consul health query of this cycle (every check).
	Checks []Check
	// Desired holds <prefix>/roles/<role>/desired (overrides the config).
	Desired map[string]int
	// Journal holds the unfinished entries.
	Journal []Entry
	// Armed: the start gate is open (the armed key holds an arm record).
	Armed bool
	// ArmKeyWritten: the armed key exists, whatever it holds: the gate was
	// opened or closed by hand (or by the reaper once), so the reaper does
	// not arm itself again. ArmProblem says why a value there does not arm.
	ArmKeyWritten bool
	ArmProblem    string
	// Validated holds hosts whose validation status is success for the
	// current version.
	Validated map[string]bool
	// ReportingValidation holds hosts with a validation status in any
	// state: a role with one of them among its servers reports validation,
	// and its servers serve only once validated.
	ReportingValidation map[string]bool
	// Recorded holds hosts with a version or status record; a new server
	// never gets such a name (it would inherit the records).
	Recorded map[string]bool
	// Suspect holds hosts whose consistent run failed on every attempt
	// for the current version (orchestrate converge marked them suspect).
	Suspect map[string]bool
	// ProvisionFailed holds hosts whose own provisioned record
	// (hosts/<host>/status/provisioned, never the older layout) says
	// failed: their first boot failed at the step Detail names.
	ProvisionFailed map[string]ProvisionFailure
	// HostRecords holds, by host, the highest modify index of the host's
	// own records (every key under <prefix>/hosts/<host>/, which only the
	// host itself and an operator may write): hosts with none are not in
	// it. Silent and orphaned hosts are judged on it.
	HostRecords map[string]uint64
	// TooManyRecords holds, by host, the number of its own records when
	// it is more than one transaction removes: an orphan's are then not
	// removed (written by hand: an operator's to look at).
	TooManyRecords map[string]int
	// Memory is the previous plan's.
	Memory Memory
	// TermStart is when this leader's term began (zero: long ago). For
	// absent_grace after it, a role that has servers creates none for a
	// missing one: a new leader has no memory of earlier lists, so a
	// server its first lists leave out is absent, not gone.
	TermStart time.Time
	// Destructive holds when recent destructive actions started.
	Destructive []time.Time
	// BackoffUntil: quota backoff (project-wide); no creates before it.
	BackoffUntil time.Time
	// PoolBackoffUntil: no standby is created before it (a quota or
	// capacity error backs off the warm pools first, and longer).
	PoolBackoffUntil time.Time
	// PoolFlush holds each role's pool flush request: every standby made
	// before its time is replaced, one at a time.
	PoolFlush map[string]reaperkv.PoolFlushRecord
	// PoolFlushProblems are flush requests that cannot be read (held
	// back, named in the state).
	PoolFlushProblems []string
	// PoolRecords are the standby records the cycle read, by host: a
	// stopped standby was ready when its record says so.
	PoolRecords map[string]reaperkv.StandbyRecord
	// RoleBackoff: per-role backoff after capacity ("No valid host") or
	// fatal create errors (a bad flavor or image); no creates of the role.
	RoleBackoff map[string]time.Time
	// DeleteBackoff: per journal entry, no delete before this time (the
	// cloud refused the last one).
	DeleteBackoff map[string]time.Time
	// Scaling is what the KV prefix holds for scaling: nodes' metric
	// reports, drain requests and answers, protected hosts, exhausted
	// capacity, counts set by hand and hosts named for scale in.
	Scaling schema.Scaling
	// Metrics holds each autoscaled role's reading of a source outside
	// Consul (Prometheus), by role.
	Metrics map[string]MetricReading
	// Autoscale holds each autoscaled role's last report: the window, the
	// last changes and the history its autoscaler goes on from.
	Autoscale map[string]*reaperkv.AutoscaleReport
	// DrainAborts holds the records of aborted drains, by host: the host
	// is not chosen for a scale-in or a max-age retirement before the
	// record's Until. DrainAbortProblems holds the records that cannot be
	// read (their hosts are held, and named in the plan).
	DrainAborts        map[string]reaperkv.DrainAbortRecord
	DrainAbortProblems map[string]string
	// Refresh holds each role's instance refresh request (`orchestrate
	// refresh`), by role; RefreshProblems says, by role, why a request
	// there cannot be read (the role's refresh is held, auto included).
	Refresh         map[string]reaperkv.RefreshRecord
	RefreshProblems map[string]string
	// Specs holds each role's boot spec record: the spec its servers are
	// built from and the one before (what a rollback rolls back to).
	Specs map[string]reaperkv.SpecRecord
	// SpecProblems says, by role, why the spec before the current one
	// cannot be built from any more (its user data file no longer holds
	// what it held): a rollback to it fails at once.
	SpecProblems map[string]string
	// Hooks holds the lifecycle hooks' requests and answers (hook/ and
	// hook-answer/ in KV).
	Hooks schema.Hooks
	// LaunchBackoff: per role, no create nor claim before this time (a
	// launch of the role was abandoned by its on_launch hook).
	LaunchBackoff map[string]time.Time
	// ZoneBackoff: per role and availability zone, no create there before
	// this time (the zone refused one for capacity); the role's other
	// zones take its creates.
	ZoneBackoff map[string]map[string]time.Time
	// ServerGroups are the roles' server group records, by role;
	// ServerGroupProblems the records that cannot be read (role: why):
	// the role's creates wait until one is looked at.
	ServerGroups        map[string]reaperkv.ServerGroupRecord
	ServerGroupProblems map[string]string
	// Holds are the hold records (reaper/hold/<host>), by host, expired
	// and released ones too (a host with any record is not held by
	// hold_failures again); HoldProblems the records that cannot be read
	// (host: why), which hold nothing and are named in the plan.
	Holds        map[string]reaperkv.HoldRecord
	HoldProblems map[string]string
}

// ProvisionFailure is a host's own record of a failed first boot.
type ProvisionFailure struct {
	// Detail names the failing step; Time is when the host wrote it (by
	// its own clock).
	Detail string
	Time   time.Time
}

// Memory is what a plan remembers for the next cycle: when each node was
// first seen in a condition that must last, without a break, before it
// counts. A new leader starts with none, so every condition gets its full
// grace again.
type Memory struct {
	// Critical: a counted check critical (also dead stray nodes).
	Critical map[string]time.Time
	// Absent: a booted server with no node or counted check.
	Absent map[string]time.Time
	// Error: a server in Nova ERROR whose node passes its checks.
	Error map[string]time.Time
	// Listed: when each server name was last in the Nova list, kept for
	// absent_grace after it left it unless the reaper deleted it.
	Listed map[string]time.Time
	// Stray: a Consul node named like a role's servers, not dead, in
	// neither the Nova list nor the journal.
	Stray map[string]time.Time
	// Faultless: a new server in Nova ERROR without a fault yet (Nova
	// saves the state, then the fault).
	Faultless map[string]time.Time
	// Served: by Nova server ID, when a server was first seen checked in
	// with every counted check passing. A server that served is out of its boot grace: its
	// death is a death, whatever its age.
	Served map[string]time.Time
	// Ready: by Nova server ID, since when a standby of a stopped warm
	// pool has been ready without a break (it is powered off once settled).
	Ready map[string]time.Time
	// Deleted: by server name, when the reaper deleted that server (or
	// last saw it listed after): the name is not given to a new server
	// for its role's absent_grace after it left the Nova list (see
	// NameQuarantine).
	Deleted map[string]time.Time
	// Partitioned is the start of the last cycle the partition pause held
	// for health (too much of a role or the fleet looked unhealthy). No
	// server's critical or absent time is counted from before it: nodes
	// rejoining one by one after a partition heals each get their whole
	// grace again, instead of the ones still on their way back being
	// replaced the moment the pause lifts.
	Partitioned time.Time
	// Moved: by host, the index of its own records (Input.HostRecords)
	// and when this leader first saw them at it: the records moved then
	// at the latest, by the reaper's clock, whatever the host's says.
	Moved map[string]MoveMark
	// Orphan: by host, since when it has had records but no server in
	// Nova, no Consul node and no journal entry, without a break.
	Orphan map[string]time.Time
	// LastRepair: by Nova server ID, the step a repair ladder last
	// reached (the one that made the server serve again, or the last
	// before its replacement), and when. A server that fails again soon
	// after starts its next ladder at the step after that one
	// (planner/repair.go).
	LastRepair map[string]RepairMark
}

// MoveMark is a host's records' index, and when it was first seen.
type MoveMark struct {
	Index uint64
	At    time.Time
}

// RepairMark is the step a repair ladder reached, and when.
type RepairMark struct {
	Step string
	At   time.Time
}

// NewMemory returns a Memory with every map made.
// A server the reaper deleted keeps its name from new servers for its
// role's absent_grace after it left the Nova list, as a server that
// vanished by another hand does: the old machine's Consul agent is a
// failed serf member for a while, and Consul lets another address reclaim
// a failed member's name only after it has been dead for 30 s
// (memberlist's DeadNodeReclaimTime in Consul); a new agent joining under
// the name before that is refused as a name conflict (seen in the lab: a
// db1 created 4 s after the old db1's delete). absent_grace is 5 minutes
// by default (the lab's 60 s); below about a minute a reused name may
// meet that conflict. NameQuarantine is the quarantine of a name no
// configured role matches.
const NameQuarantine = 2 * time.Minute

func NewMemory() Memory {
	return Memory{Critical: map[string]time.Time{}, Absent: map[string]time.Time{}, Error: map[string]time.Time{},
		Listed: map[string]time.Time{}, Stray: map[string]time.Time{}, Faultless: map[string]time.Time{}, Served: map[string]time.Time{},
		Ready: map[string]time.Time{}, LastRepair: map[string]RepairMark{}, Deleted: map[string]time.Time{},
		Moved: map[string]MoveMark{}, Orphan: map[string]time.Time{}}
}

// Op is one operation for the executor.
type Op string

// Operations.
const (
	// OpCreate writes Entry (phase creating) then creates NewName.
	OpCreate Op = "create"
	// OpAdopt records NewID, found by the server's journal metadata.
	OpAdopt Op = "adopt"
	// OpDrain puts OldName in maintenance mode and writes phase draining
	// (with the destructive-action budget, in one transaction).
	OpDrain Op = "drain"
	// OpMaintain re-asserts maintenance mode on a draining node.
	OpMaintain Op = "maintain"
	// OpDelete writes phase deleting, deletes OldID, waits until it is
	// gone, deregisters OldName from the catalog.
	OpDelete Op = "delete"
	// OpRollback deletes NewID (a failed replacement) and drops the entry.
	OpRollback Op = "rollback"
	// OpFinish drops a completed entry.
	OpFinish Op = "finish"
	// OpDeleteDuplicate deletes NewID, a second server made for one
	// journal entry; it writes no entry, and leaves the node name (shared
	// with the server the entry keeps) alone.
	OpDeleteDuplicate Op = "delete-duplicate"
	// OpForget removes the records of OldName, an orphaned host (records
	// under <prefix>/hosts/<host>/ and no server), in one transaction
	// that deletes each only if it is still at the index read
	// (RecordsIndex the highest): never a server, never another key.
	OpForget Op = "forget-records"
	// OpRestore takes OldName out of the reaper's maintenance mode and
	// drops the entry: the server it drained passes its checks again.
	OpRestore Op = "restore"
	// OpDeregister removes a dead node that has no server (no journal).
	OpDeregister Op = "deregister"
	// OpAbort ends OldName's drain without deleting it (its answer said
	// the work could not move, or none came, and its role says abort):
	// writes phase aborting, ends the node's maintenance, then drops the
	// entry with the drain request and records the host's cool-off, in
	// one transaction (with Restore, when set).
	OpAbort Op = "abort"
	// OpHook journals a lifecycle hook's wait (phase launch-hook or
	// terminate-hook, with its deadline) and writes its request in the
	// same transaction, then fires the hook's event (and, for a
	// terminate, re-asserts the node's maintenance).
	OpHook Op = reaperkv.ActivityHook
	// OpHookResult records the hook's result (an answer, or the default
	// at the deadline) and the entry's next phase, and removes the
	// request and its answer, in one transaction.
	OpHookResult Op = reaperkv.ActivityHookResult
)

// PoolClaimDone is a claim whose standby served (or whose entry ended).
type PoolClaimDone struct {
	Role  string             `json:"role"`
	Claim reaperkv.PoolClaim `json:"claim"`
}

// Action is one step the executor takes. Entry is the entry as it should be
// written before the step's cloud call.
type Action struct {
	Op     Op     `json:"op"`
	Entry  Entry  `json:"entry"`
	Reason string `json:"reason"`
	// Restore, on an OpAbort of a host named for scale-in, raises the
	// desired count back by one in the abort's transaction.
	Restore *ScaleChange `json:"restore,omitempty"`
	// Ended are the repair steps whose end this action records (the
	// step before a new one, the last before the replacement, the one
	// that repaired the server), for the metrics.
	Ended []reaperkv.RepairStep `json:"-"`
	// RecordsIndex, on an OpForget, is the highest modify index of the
	// host's records this cycle read: a record written since keeps them
	// all.
	RecordsIndex uint64 `json:"-"`
}

// Target is the server the action is about: the new one of a create,
// an adoption, a rollback or a launch hook, else the old one.
func (a Action) Target() string {
	switch {
	case a.Op == OpHook || a.Op == OpHookResult:
		if a.Entry.TerminateHook != nil {
			return a.Entry.OldName
		}
		return a.Entry.NewName
	case a.Op == OpCreate || a.Op == OpAdopt || a.Op == OpRollback || a.Entry.OldName == "":
		return a.Entry.NewName
	}
	return a.Entry.OldName
}

// String describes the action for logs and the state: op, role, server, reason.
func (a Action) String() string {
	return fmt.Sprintf("%s %s %s (%s)", a.Op, a.Entry.Role, a.Target(), a.Reason)
}

// maxAttention bounds the servers listed per role in the state key, which
// Consul limits to 512 KiB.
const MaxAttention = 50

// Plan is the planner's answer.
type Plan struct {
	Actions []Action `json:"actions"`
	// Blocked lists what the reaper would do but a safety rule stops.
	Blocked []string `json:"blocked,omitempty"`
	// Held is Blocked as data, line for line: each step held back, its
	// role, host and rule, and why.
	Held []reaperkv.PlanAction `json:"held,omitempty"`
	// Memory is for the next cycle.
	Memory Memory `json:"-"`
	// NextDeadline is the earliest instant after the plan's Now at which
	// a decision could change with no new data: a grace, a timeout, a
	// backoff or a drain running out. Zero when no timer runs. The daemon
	// schedules its next cycle no later than this (daemon/wake.go).
	NextDeadline time.Time             `json:"-"`
	Roles        []reaperkv.RoleReport `json:"roles"`
	Paused       bool                  `json:"paused"`
	PauseReason  string                `json:"pause_reason,omitempty"`
	Armed        bool                  `json:"armed"`
	// ArmNow: the start gate's condition was met this cycle; the executor
	// records it so the reaper stays armed.
	ArmNow bool `json:"arm_now,omitempty"`
	// NotArmedReason says why the gate is still closed.
	NotArmedReason string `json:"not_armed_reason,omitempty"`
	Backoff        bool   `json:"backoff"`
	// Unassigned counts servers no role claims.
	Unassigned int `json:"unassigned"`
	// Partial counts partial records in the Nova list (servers in a cell
	// Nova cannot reach): while there is one, the plan is paused.
	Partial int `json:"partial,omitempty"`
	// Scale holds the desired counts the autoscaler changes; the next
	// cycle acts on them.
	Scale []ScaleChange `json:"scale,omitempty"`
	// Standbys are the warm pools' standbys as this plan sees them, for
	// their records under <prefix>/reaper/pool/.
	Standbys []reaperkv.StandbyRecord `json:"standbys,omitempty"`
	// FlushSeen lists the pool flush requests this plan acknowledges
	// (stamped with its time); FlushDone those carried out.
	FlushSeen []PoolFlush `json:"-"`
	// Refreshes are the refresh requests to write back (the reaper's
	// progress in them) or remove (done), compare-and-set on the index
	// read, with the activity each is.
	Refreshes []RefreshWrite `json:"-"`
	FlushDone []PoolFlush    `json:"-"`
	// Claims are the claims whose standby served this cycle.
	Claims []PoolClaimDone `json:"claims,omitempty"`
	// CapacityClear lists the roles whose exhausted capacity is over: a
	// server created for them went ACTIVE.
	CapacityClear []string `json:"capacity_clear,omitempty"`
	// CooloffEnded are the aborted-drain records whose cool-off is over,
	// removed by the executor.
	CooloffEnded []reaperkv.DrainAbortRecord `json:"-"`
	// HookSweep are hook requests and answers no waiting hook holds (its
	// entry ended, or they were written by hand), removed by the executor
	// if still the ones read.
	HookSweep []HookRecord `json:"-"`
	// NewHolds are the holds the reaper takes itself this cycle
	// (hold_failures), written by the executor under the leader check.
	NewHolds []reaperkv.HoldRecord `json:"new_holds,omitempty"`
	// HoldMaintain are the held servers whose node lacks the hold's
	// maintenance: the executor registers it (after the actions, so it
	// follows the end of a drain the hold stopped). HoldEnd are the nodes
	// whose hold maintenance no honoured hold keeps: the executor ends it.
	HoldMaintain []reaperkv.HoldRecord `json:"hold_maintain,omitempty"`
	HoldEnd      []string              `json:"hold_end,omitempty"`
}

// HookRecord names a hook request (or, with Answer, an answer record)
// under hook/<role>/<host> as read, with its modify index.
type HookRecord struct {
	Role, Host string
	Answer     bool
	Index      uint64
}

// RefreshWrite is a refresh request as a plan leaves it: written back
// with the reaper's progress, or removed (Remove) once done. Activity,
// when set, is what changed, for the log and the history.
type RefreshWrite struct {
	Role     string
	Record   reaperkv.RefreshRecord
	Remove   bool
	Activity string
}
