package reaper

import "github.com/jiocloud/orchestrate/internal/store/reaperkv"

// ServerState is what the planner makes of one server this cycle.
type ServerState string

// Server states, as the planner sees them: first what a server's own
// health says (classify), then the part it plays in a journal entry,
// which overrides it in reports.
const (
	StateHealthy         ServerState = reaperkv.ServerHealthy
	StateBooting         ServerState = reaperkv.ServerBooting
	StateCriticalInGrace ServerState = reaperkv.ServerCriticalInGrace
	// StateAbsentInGrace: booted, but no node or counted check, for less
	// than absent_grace.
	StateAbsentInGrace ServerState = reaperkv.ServerAbsentInGrace
	StateUnhealthy     ServerState = reaperkv.ServerUnhealthy
	// StateUnaccounted: past boot_timeout and never checked in.
	StateUnaccounted ServerState = reaperkv.ServerUnaccounted
	StateError       ServerState = reaperkv.ServerError
	// StateErrorInGrace: in Nova ERROR, but its node passes its checks,
	// for less than error_grace.
	StateErrorInGrace ServerState = reaperkv.ServerErrorInGrace
	StateMaintenance  ServerState = reaperkv.ServerMaintenance
	// StateSuspect: its consistent run failed on every attempt, in a role
	// with replace_suspect.
	StateSuspect ServerState = reaperkv.ServerSuspect
	// StateProvisionFailed: its first boot reported provisioned failed in
	// its own record, and it never served: a failed create, replaced (or
	// rolled back, backing off the role's creates), not waited for.
	StateProvisionFailed ServerState = reaperkv.ServerProvisionFailed
	// StateUnknown: Nova reports a status the reaper does not know
	// (UNKNOWN, or one newer than this code): never acted on.
	StateUnknown ServerState = reaperkv.ServerUnknown
	StateExpired ServerState = reaperkv.ServerExpired
	// StateDrifted is no classification but the reason of a replacement:
	// a serving server built from another boot spec (refresh: auto).
	StateDrifted ServerState = "drifted"
	// StateReplacing, StateNew and StateDeleting are the parts a server
	// plays in a journal entry: the old server of a replacement, the
	// server an entry creates, a server drained or deleted (and
	// StateRepairing, repair.go, the server a repair ladder holds).
	StateReplacing ServerState = reaperkv.ServerReplacing
	StateNew       ServerState = reaperkv.ServerNew
	StateDeleting  ServerState = reaperkv.ServerDeleting
)

// stateProps are the properties of a server state that the planner's
// steps ask about; one table, so a new state is one line.
type stateProps struct {
	// serving: counts as a working member of its role (an expired server
	// still serves until it is replaced).
	serving bool
	// looksUnhealthy: the state a partition or a Consul problem would also
	// produce; counts towards the partition pause.
	LooksUnhealthy bool
	// replace: at the desired count, a server in this state is replaced.
	Replace bool
	// rank orders servers worst first, for scale in and replacement.
	Rank int
}

// stateTable: a server in operator maintenance is the operator's: it is
// never replaced for it and is scaled in only after every serving server,
// since the operator may bring it back.
var stateTable = map[ServerState]stateProps{
	StateUnaccounted:     {LooksUnhealthy: true, Replace: true, Rank: 0},
	StateError:           {LooksUnhealthy: true, Replace: true, Rank: 1},
	StateErrorInGrace:    {serving: true, LooksUnhealthy: true, Rank: 3},
	StateUnhealthy:       {LooksUnhealthy: true, Replace: true, Rank: 2},
	StateSuspect:         {LooksUnhealthy: true, Replace: true, Rank: 2},
	StateProvisionFailed: {LooksUnhealthy: true, Replace: true, Rank: 1},
	StateCriticalInGrace: {LooksUnhealthy: true, Rank: 3},
	StateAbsentInGrace:   {LooksUnhealthy: true, Rank: 3},
	StateExpired:         {serving: true, Rank: 4},
	StateHealthy:         {serving: true, Rank: 4},
	StateMaintenance:     {Rank: 5},
	StateHeld:            {Rank: 5},
	StateUnknown:         {LooksUnhealthy: true, Rank: 5},
	StateBooting:         {Rank: 6},
}

// props returns a state's properties; a state not in the table (the entry
// parts) has none and ranks last.
func (st ServerState) Props() stateProps {
	if p, ok := stateTable[st]; ok {
		return p
	}
	return stateProps{Rank: 7}
}

// Serving reports whether a server in this state counts as serving.
func (st ServerState) Serving() bool { return st.Props().serving }
