package reaperkv

import (
	"fmt"
	"strings"
	"time"

	"github.com/jiocloud/orchestrate/internal/store/schema"
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

// The reaper's warm pool: standby servers of a role, built and converged
// but kept out of the role (their nodes stay in Consul maintenance) until
// the reaper claims one instead of creating a server. The leader publishes
// each standby under <prefix>/reaper/pool/<role>/<host>, so `orchestrate
// pool status` and the platform read the pool without the cloud client,
// and removes the key in the transaction that journals the standby's
// claim.
const (
	// ReaperPoolDir holds one key per standby, by role then host.
	ReaperPoolDir = "reaper/pool/"
	// ReaperPoolFlushDir holds the flush requests, one per role
	// (`orchestrate pool flush ROLE`).
	ReaperPoolFlushDir = "reaper/pool-flush/"
)

// StandbyNotesPrefix starts the notes of the node maintenance check
// (_node_maintenance) of a standby, whoever sets it: the reaper through
// the catalog, or the node's own agent (`consul maint -enable -reason
// "orchestrate standby: ..."`). hiera-services leaves a node whose
// maintenance says so out of every key: a standby is no member of its
// service, unlike a node an operator put in maintenance.
const StandbyNotesPrefix = "orchestrate standby:"

// PoolKey is the key of host's standby record in role's pool.
func PoolKey(prefix, role, host string) string {
	return ReaperKey(prefix, ReaperPoolDir+role+"/"+host)
}

// ParsePoolKey splits a key relative to <prefix>/ under ReaperPoolDir into
// role and host; ok is false for any other shape.
func ParsePoolKey(rel string) (role, host string, ok bool) {
	rest, found := strings.CutPrefix(rel, ReaperPoolDir)
	if !found {
		return "", "", false
	}
	role, host, ok = strings.Cut(rest, "/")
	if !ok || schema.ValidName("role", role) != nil || schema.ValidName("host", host) != nil {
		return "", "", false
	}
	return role, host, true
}

// PoolFlushKey is the key of role's flush request.
func PoolFlushKey(prefix, role string) string {
	return ReaperKey(prefix, ReaperPoolFlushDir+role)
}
