package planner

import (
	"maps"
	"slices"
	"time"

	"github.com/jiocloud/orchestrate/internal/store/reaperkv"
	"github.com/jiocloud/orchestrate/reaper"
)

// Silent and orphaned hosts (issue 31), judged on each host's own records
// (<prefix>/hosts/<host>/: its version, status, metrics, drain answer and
// heartbeat), which only the host itself and an operator may write: no
// node can make another look silent, moving or orphaned.
//
// Records move when the highest modify index among them rises: Consul's
// raft index, read by the reaper each cycle and timed by the reaper's
// clock, so a host's clock (skewed, or a time written by hand far in the
// future) changes nothing. A healthy idle host moves through its
// heartbeat, written by its watch each time the leader rings
// (heartbeat_interval).

// moved notes, for every host with records, when this leader first saw
// their current index (the memory is kept for hosts Nova does not list,
// so a list that misses a server for a cycle does not reset it).
func (pl *planner) moved() {
	for host, idx := range pl.in.HostRecords {
		m, ok := pl.in.Memory.Moved[host]
		if !ok || m.Index != idx {
			m = reaper.MoveMark{Index: idx, At: pl.in.Now}
		}
		pl.plan.Memory.Moved[host] = m
	}
}

// silent lists the role's servers that are silent: ACTIVE in Nova, in no
// journal entry, with records of their own that have not moved for the
// role's silent_after. A silent server is shown, never replaced for it
// (its health, if it fails, is the other rules' business). A server with
// no record of its own is left to the boot and absent rules.
func (pl *planner) silent(rs *roleServers) []reaperkv.HostMark {
	var out []reaperkv.HostMark
	for _, s := range rs.all {
		m, ok := pl.plan.Memory.Moved[s.Name]
		if !ok || s.Status != reaper.StatusActive {
			continue
		}
		if _, busy := pl.inEntry[s.ID]; busy {
			continue
		}
		if pl.in.Now.Sub(m.At) >= rs.role.SilentAfter.D() {
			out = append(out, reaperkv.HostMark{Host: s.Name, Since: m.At})
		} else {
			pl.wakeAfter(m.At, rs.role.SilentAfter.D())
		}
	}
	slices.SortFunc(out, func(a, b reaperkv.HostMark) int { return a.Since.Compare(b.Since) })
	return out
}

// orphans finds the hosts with records of their own and no server: not
// in the Nova list (soft-deleted servers included), in no journal entry,
// with no Consul node (a node is the stray rules' business), named like
// a configured role's servers (the first such role's). A host named like
// none (a bootstrap node, a Consul server, another system's) is never
// one. It returns them by role, sorted.
func (pl *planner) orphans(roles []*roleServers) map[string][]string {
	listed := make(map[string]bool, len(pl.in.Servers))
	for _, s := range pl.in.Servers {
		listed[s.Name] = true
	}
	for _, e := range pl.in.Journal {
		listed[e.NewName], listed[e.OldName] = true, true
	}
	out := map[string][]string{}
	for _, host := range slices.Sorted(maps.Keys(pl.in.HostRecords)) {
		if listed[host] || len(pl.byNode[host]) > 0 {
			continue
		}
		for _, rs := range roles {
			if rs.role.NamedLike(host) {
				out[rs.role.Name] = append(out[rs.role.Name], host)
				break
			}
		}
	}
	return out
}

// forgetOrphans plans the removal of the role's orphaned hosts' records
// once each has been orphaned for orphan_grace without a break, through
// the gate: armed, not paused, and the role's part of the Nova list not
// in doubt (a partial list, a server gone without the reaper). It returns
// the orphans for the report.
func (pl *planner) forgetOrphans(rs *roleServers, hosts []string) []reaperkv.HostMark {
	var out []reaperkv.HostMark
	for _, host := range hosts {
		since := pl.since(pl.in.Memory.Orphan, pl.plan.Memory.Orphan, host)
		until := since.Add(rs.role.OrphanGrace.D())
		out = append(out, reaperkv.HostMark{Host: host, Since: since, Until: until})
		if pl.in.Now.Before(until) {
			pl.wakeAt(until)
			continue
		}
		if n := pl.in.TooManyRecords[host]; n > 0 {
			pl.block(planStep{op: string(reaper.OpForget), role: rs.role.Name, host: host, reason: "orphaned records"}, held(reaperkv.HoldProblem, "%d records, more than one transaction removes", n),
				"%s: the records of orphaned host %s are not removed: it has %d of them, more than one transaction removes (written by hand? an operator's to look at)", rs.role.Name, host, n)
			continue
		}
		if why := pl.gate(rs, need{armed: true, unpaused: true}); why.holds() {
			pl.block(planStep{op: string(reaper.OpForget), role: rs.role.Name, host: host, reason: "orphaned records"}, why,
				"%s: removal of the records of orphaned host %s (no server in Nova since %s) waits: %s", rs.role.Name, host, since.UTC().Format(time.RFC3339), why)
			continue
		}
		e := pl.newEntry(rs.role, reaperkv.KindDelete, "orphaned records: no server in Nova, no Consul node, for orphan_grace "+rs.role.OrphanGrace.D().String())
		e.OldName = host
		pl.plan.Actions = append(pl.plan.Actions, reaper.Action{Op: reaper.OpForget, Entry: e, Reason: e.Reason, RecordsIndex: pl.in.HostRecords[host]})
	}
	return out
}

// capMarks keeps the report's lists bounded (the state key's size).
func capMarks(m []reaperkv.HostMark) []reaperkv.HostMark {
	if len(m) > reaper.MaxAttention {
		return m[:reaper.MaxAttention]
	}
	return m
}
