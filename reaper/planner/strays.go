package planner

import (
	"fmt"
	"maps"
	"slices"
	"sort"
	"time"

	"github.com/jiocloud/orchestrate/internal/store/reaperkv"
	"github.com/jiocloud/orchestrate/reaper"
)

// strays returns the Consul nodes that look like servers of the role (by
// name template or name_regex) but are in neither the Nova list nor the
// journal: live ones (no critical check) and dead ones (every check
// critical), each sorted.
func (pl *planner) strays(r *reaper.Role) (live, dead []string) {
	if pl.serverless == nil {
		// Nodes with no server and no entry, found once per plan: usually
		// a handful among thousands.
		pl.serverless = []string{}
		for node := range pl.byNode {
			if !pl.used[node] && !pl.oldNames[node] {
				pl.serverless = append(pl.serverless, node)
			}
		}
	}
	for _, node := range pl.serverless {
		if !r.NamedLike(node) {
			continue
		}
		checks := pl.byNode[node]
		critical := 0
		for _, c := range checks {
			if c.Status == reaper.CheckCritical {
				critical++
			}
		}
		switch critical {
		case 0:
			live = append(live, node)
		case len(checks):
			dead = append(dead, node)
		}
	}
	sort.Strings(live)
	sort.Strings(dead)
	return live, dead
}

// rememberListed carries into the plan's memory the server names that
// left the Nova list less than their role's absent_grace ago, in neither
// the list nor the journal now (the names listed now were remembered by
// assignServers, and a delete the plan makes forgets its name).
func (pl *planner) rememberListed(roles []*roleServers) {
	for name, at := range pl.in.Memory.Deleted {
		if pl.used[name] {
			at = pl.in.Now // still listed: the quarantine starts when it leaves
		}
		quarantine := reaper.NameQuarantine
		for _, rs := range roles {
			if rs.role.NamedLike(name) {
				quarantine = rs.role.AbsentGrace.D()
				break
			}
		}
		if pl.in.Now.Sub(at) < quarantine {
			pl.plan.Memory.Deleted[name] = at
		}
	}
	for name, last := range pl.in.Memory.Listed {
		if pl.used[name] || pl.deleteAsked[name] {
			continue
		}
		for _, rs := range roles {
			if rs.role.NamedLike(name) && pl.in.Now.Sub(last) < rs.role.AbsentGrace.D() {
				pl.wakeAfter(last, rs.role.AbsentGrace.D())
				pl.plan.Memory.Listed[name] = last
				pl.vanishedOf(rs)[name] = last
				break
			}
		}
	}
}

// vanishedOf returns the role's names that left the list recently.
func (pl *planner) vanishedOf(rs *roleServers) map[string]time.Time {
	if rs.vanished == nil {
		rs.vanished = map[string]time.Time{}
	}
	return rs.vanished
}

// vanished returns a server name of the role that left the Nova list less
// than absent_grace ago, though the reaper did not delete it, and how long
// ago it was last listed: absence from a list, like absence from the
// catalog, is not yet death.
func (pl *planner) vanished(rs *roleServers) (string, time.Duration) {
	if len(rs.vanished) == 0 {
		return "", 0
	}
	names := slices.Sorted(maps.Keys(rs.vanished))
	return names[0], pl.in.Now.Sub(rs.vanished[names[0]]).Round(time.Second)
}

// doubtLists says, for each role, why its part of the Nova list may be
// incomplete: a server name of the role left the list less than
// absent_grace ago without the reaper deleting it, or a Consul node named
// like its servers and not dead is missing from the list and has been for
// less than absent_grace (a partition can hide a live machine's health as
// a partial list hides its server). A node missing for longer is taken for
// another project's machine that happens to match the role's names: it
// keeps its name from new servers (freeName) and holds nothing else,
// unless Nova listed partial records (one may be its server). A
// machine deleted by hand holds the role only until its node has been
// critical for critical_grace.
func (pl *planner) doubtLists(roles []*roleServers) {
	for _, rs := range roles {
		r := rs.role
		var young []string
		live, dead := pl.strays(r)
		rs.deadStrays = dead
		for _, node := range dead {
			if since, ok := pl.in.Memory.Critical[node]; !ok || pl.in.Now.Sub(since) < r.CriticalGrace.D() {
				if ok {
					pl.wakeAfter(since, r.CriticalGrace.D())
				}
				live = append(live, node)
			}
		}
		for _, node := range live {
			if since := pl.since(pl.in.Memory.Stray, pl.plan.Memory.Stray, node); pl.in.Now.Sub(since) < r.AbsentGrace.D() {
				pl.wakeAfter(since, r.AbsentGrace.D())
				young = append(young, node)
			}
		}
		switch name, ago := pl.vanished(rs); {
		case pl.plan.Partial > 0 && len(live) > 0:
			sort.Strings(live)
			rs.doubt = fmt.Sprintf("Nova listed %d partial record(s), and %d Consul node(s) named like its servers and not dead (e.g. %s) are missing from the list: a partial record may be one of them", pl.plan.Partial, len(live), live[0])
		case name != "":
			rs.doubt = fmt.Sprintf("%s left the Nova list %s ago without the reaper deleting it: the list may be partial", name, ago)
		case len(young) > 0:
			sort.Strings(young)
			rs.doubt = fmt.Sprintf("%d Consul node(s) named like its servers and not dead (e.g. %s) are missing from the Nova list, for less than absent_grace %s: the list may be incomplete", len(young), young[0], r.AbsentGrace.D())
		}
	}
}

// deregisterDead plans the deregistration of dead stray nodes: machines
// gone from Nova (deleted by hand, or before the reaper ran) whose nodes
// stay in the catalog, every check critical, for longer than boot_timeout.
func (pl *planner) deregisterDead(rs *roleServers) {
	for _, node := range rs.deadStrays {
		since := pl.since(pl.in.Memory.Critical, pl.plan.Memory.Critical, node)
		if pl.in.Now.Sub(since) < rs.role.BootTimeout.D() {
			pl.wakeAfter(since, rs.role.BootTimeout.D())
			continue
		}
		if why := pl.gate(rs, need{armed: true, unpaused: true}); why.holds() {
			pl.block(planStep{op: string(reaper.OpDeregister), role: rs.role.Name, host: node, reason: "dead node without a server in Nova"}, why,
				"%s: deregistration of dead node %s (no server in Nova) waits: %s", rs.role.Name, node, why)
			continue
		}
		e := pl.newEntry(rs.role, reaperkv.KindDelete, "dead node without a server in Nova")
		e.OldName = node
		pl.add(reaper.OpDeregister, e, e.Reason)
	}
}

// deleteDuplicates plans the deletion of servers a create made beside the
// one its entry keeps (a create that succeeded after its caller gave up).
// It reports whether the role had any: then nothing else of the role is
// planned this cycle, so the next one sees one server per entry.
func (pl *planner) deleteDuplicates(rs *roleServers) bool {
	for _, s := range rs.duplicates {
		if why := pl.gate(rs, need{armed: true, unpaused: true, victim: s}); why.holds() {
			pl.block(planStep{op: string(reaper.OpDeleteDuplicate), role: rs.role.Name, host: s.Name, reason: "a second server made for entry " + s.Metadata[reaper.MetaJournal]}, why,
				"%s: deletion of %s, a second server of entry %s, waits: %s", rs.role.Name, s.Name, s.Metadata[reaper.MetaJournal], why)
			continue
		}
		e := pl.newEntry(rs.role, reaperkv.KindDelete, "a second server made for entry "+s.Metadata[reaper.MetaJournal])
		e.NewName, e.NewID = s.Name, s.ID
		pl.add(reaper.OpDeleteDuplicate, e, e.Reason)
	}
	return len(rs.duplicates) > 0
}
