// Package reaperkv holds the reaper's records under <prefix>/reaper/ and
// their keys: the journal entries, the state report, the warm pool's
// records, the arm record, the aborted drains' cool-offs, the sealed
// node tokens and the roles' server groups. It does no I/O: the reaper
// writes them (reaper/daemon), internal/store reads them for `orchestrate
// status` and the planner.
package reaperkv
