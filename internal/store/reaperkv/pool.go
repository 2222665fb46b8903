package reaperkv

import (
	"fmt"
	"strings"
	"time"
)

// Standby states in a StandbyRecord.
const (
	// StandbyBuilding: Nova has not made it ACTIVE yet.
	StandbyBuilding = "building"
	// StandbyConverging: ACTIVE, its role's checks do not pass yet (or it
	// has not validated the current version, in a role that validates).
	StandbyConverging = "converging"
	// StandbyReady: it converged; a claim takes it.
	StandbyReady = "ready"
	// StandbyStopped: it was ready and is powered off (a pool with state
	// stopped); a claim starts it.
	StandbyStopped = "stopped"
	// StandbyFailed: Nova put it in ERROR, or it did not converge within
	// its role's boot_timeout; it is deleted and rebuilt.
	StandbyFailed = "failed"
)

// StandbyRecord is the value of <prefix>/reaper/pool/<role>/<host>.
type StandbyRecord struct {
	Role    string    `json:"role"`
	Host    string    `json:"host"`
	ID      string    `json:"id"`
	State   string    `json:"state"`
	Created time.Time `json:"created"`
}

// NodeMaintenanceCheck is the ID of Consul's node maintenance check.
const NodeMaintenanceCheck = "_node_maintenance"

// PoolReport is a role's warm pool in the reaper's report.
type PoolReport struct {
	// Size is the configured number of standbys; States counts them by
	// state (Standby*), Creating the standbys being created.
	Size     int            `json:"size"`
	States   map[string]int `json:"states"`
	Creating int            `json:"creating"`
	// Claims are the recent claims (a bounded number, newest last).
	Claims []PoolClaim `json:"claims,omitempty"`
	// Why says why the pool is not refilled now, when it is short.
	Why string `json:"why,omitempty"`
}

// PoolClaim is one claim of a standby: when it was made and how long the
// standby took to serve (zero while it has not yet).
type PoolClaim struct {
	Host    string        `json:"host"`
	Time    time.Time     `json:"time"`
	Serving time.Duration `json:"serving,omitempty"`
}

// String is a one-line summary: "2 ready, 1 converging of 3".
func (p *PoolReport) String() string {
	var parts []string
	for _, st := range []string{StandbyReady, StandbyStopped, StandbyConverging, StandbyBuilding, StandbyFailed} {
		if n := p.States[st]; n > 0 {
			parts = append(parts, fmt.Sprintf("%d %s", n, st))
		}
	}
	if p.Creating > 0 {
		parts = append(parts, fmt.Sprintf("%d being created", p.Creating))
	}
	if len(parts) == 0 {
		parts = []string{"empty"}
	}
	return strings.Join(parts, ", ") + fmt.Sprintf(" of %d", p.Size)
}

// PoolFlushRecord is the value of <prefix>/reaper/pool-flush/<role>: an
// operator's request that every standby of the role made before Time be
// replaced (`orchestrate pool flush ROLE`). The reaper removes it once no
// such standby is left.
type PoolFlushRecord struct {
	Time   time.Time `json:"time"`
	By     string    `json:"by"`
	Reason string    `json:"reason"`
	// Seen is when the reaper's leader first read the request, by its own
	// clock: the standbys made before it are replaced, so a request from a
	// host whose clock runs ahead does not rebuild the pool over and over.
	Seen time.Time `json:"seen,omitzero"`
	// Index is the key's modify index, as read (not stored): the reaper
	// removes the request only if it is still the one it carried out.
	Index uint64 `json:"-"`
}
