package reaper

import "github.com/jiocloud/orchestrate/internal/store/reaperkv"

// The warm pool, as the planner keeps it. A standby is a server of a role
// with the standby mark (MetaStandby) in Nova and in no journal entry that
// claimed it: it is no member of its role (no count, no min_healthy, no
// pause, no budget), its node is kept in Consul maintenance, and when the
// role needs a server (a replacement, a count below desired, a scale out)
// a ready standby is claimed instead of a server created. The claim is a
// journal entry like a create: the standby's pool record goes in the
// transaction that writes the entry, so no other entry can claim it, and a
// leader killed at any step of the claim leaves an entry the next leader
// finishes.

// Op values of the warm pool.
const (
	// OpClaim writes Entry (phase claiming, NewID the standby) and removes
	// the standby's pool record in one transaction, clears its standby
	// mark in Nova, ends its node's maintenance, and writes phase booting.
	OpClaim Op = "claim"
	// OpStandbyStop writes the standby's pool record as stopped (under
	// the leader check) and powers it off: a pool with state stopped keeps
	// its ready standbys off until a claim starts one.
	OpStandbyStop Op = "standby-stop"
	// OpStandbyMaintain puts a standby's node (OldName) in maintenance
	// (it writes no entry): a standby is never returned by DNS.
	OpStandbyMaintain Op = "standby-maintain"
)

// PoolFlush is a role's pool flush request, as a plan acknowledges or
// ends it.
type PoolFlush struct {
	Role   string
	Record reaperkv.PoolFlushRecord
}
