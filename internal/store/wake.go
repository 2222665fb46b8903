package store

import (
	"strings"

	"github.com/jiocloud/orchestrate/internal/store/reaperkv"
	"github.com/jiocloud/orchestrate/internal/store/schema"
)

// WakesReaper reports whether a change to key (a full key under prefix)
// may change one of the reaper's decisions at once, so that its KV watch
// starts a cycle early for it: the desired version and counts, the arm
// record, holds, pool flush and refresh requests, drain and hook answers,
// protections, and the hosts' validation and provisioning records.
//
// Keys the reaper writes every cycle (its state report, journal, history,
// heartbeat) must never wake it, or it would wake itself at each cycle's
// end; nor do the records that move all the time and matter only over
// minutes (load reports, heartbeat answers, Puppet runs' status, running
// versions): its interval reads those.
func WakesReaper(prefix, key string) bool {
	rel := schema.RelKey(prefix, key)
	if rel == key && prefix != "" {
		return false // not under prefix
	}
	switch {
	case rel == keyCurrentVersion:
		return true
	case rel == reaperkv.ReaperArmedKey,
		strings.HasPrefix(rel, reaperkv.ReaperHoldDir),
		strings.HasPrefix(rel, reaperkv.ReaperPoolFlushDir),
		strings.HasPrefix(rel, reaperkv.ReaperRefreshDir):
		return true
	}
	parts := strings.Split(rel, "/")
	switch parts[0] {
	case dirRoles, dirDrain, dirProtect, dirHookAnswer:
		return true
	case dirStatus:
		// The layout before node restriction: status/<category>/<state>/<host>.
		return len(parts) > 1 && wakingCategory(parts[1])
	case hostRecordsDir:
		// hosts/<host>/drain, hosts/<host>/status/<category>.
		if len(parts) == 3 && parts[2] == hostDrain {
			return true
		}
		return len(parts) == 4 && parts[2] == hostStatus && wakingCategory(parts[3])
	}
	return false
}

// wakingCategory: a host's validation decides whether it serves (a
// replacement's end); a failed provisioning, whether it will ever check in.
func wakingCategory(c string) bool {
	return c == CategoryValidation || c == CategoryProvisioned
}
