package reaper

import (
	"sort"
	"strings"

	"github.com/jiocloud/orchestrate/internal/store"
)

// strays returns the Consul nodes that look like servers of the role (by
// name template or name_regex) but are in neither the Nova list nor the
// journal: live ones (no critical check) and dead ones (every check
// critical), each sorted.
func (pl *planner) strays(r *Role) (live, dead []string) {
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
		if _, ok := r.templateIndex(node); !ok && (r.nameRE == nil || !r.nameRE.MatchString(node)) {
			continue
		}
		checks := pl.byNode[node]
		critical := 0
		for _, c := range checks {
			if c.Status == checkCritical {
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

// templateIndex returns n when name is what the role's name template makes
// of some index n (digits only).
func (r *Role) templateIndex(name string) (string, bool) {
	mid, ok := strings.CutPrefix(name, r.namePrefix)
	if !ok {
		return "", false
	}
	if mid, ok = strings.CutSuffix(mid, r.nameSuffix); !ok || mid == "" || strings.Trim(mid, "0123456789") != "" {
		return "", false
	}
	return mid, true
}

// unlistedLiveNodes counts live stray nodes: machines the Nova list does
// not show. A dead machine's node fails serfHealth, so a passing one means
// the cloud data is incomplete, and creating would double the role. It
// returns one of them as an example.
func (pl *planner) unlistedLiveNodes(r *Role) (int, string) {
	live, _ := pl.strays(r)
	if len(live) == 0 {
		return 0, ""
	}
	return len(live), live[0]
}

// deregisterDead plans the deregistration of dead stray nodes: machines
// gone from Nova (deleted by hand, or before the reaper ran) whose nodes
// stay in the catalog, every check critical, for longer than boot_timeout.
func (pl *planner) deregisterDead(rs *roleServers) {
	_, dead := pl.strays(rs.role)
	for _, node := range dead {
		since := pl.since(pl.in.Memory.Critical, pl.plan.Memory.Critical, node)
		if pl.in.Now.Sub(since) < rs.role.BootTimeout.D() {
			continue
		}
		if why := pl.gate(rs, need{armed: true, unpaused: true}); why != "" {
			pl.block("%s: deregistration of dead node %s (no server in Nova) waits: %s", rs.role.Name, node, why)
			continue
		}
		e := pl.newEntry(rs.role, store.KindDelete, "dead node without a server in Nova")
		e.OldName = node
		pl.add(OpDeregister, e, e.Reason)
	}
}

// deleteDuplicates plans the deletion of servers a create made beside the
// one its entry keeps (a create that succeeded after its caller gave up).
// It reports whether the role had any: then nothing else of the role is
// planned this cycle, so the next one sees one server per entry.
func (pl *planner) deleteDuplicates(rs *roleServers) bool {
	for _, s := range rs.duplicates {
		if why := pl.gate(rs, need{armed: true, unpaused: true, victim: s}); why != "" {
			pl.block("%s: deletion of %s, a second server of entry %s, waits: %s", rs.role.Name, s.Name, s.Metadata[MetaJournal], why)
			continue
		}
		e := pl.newEntry(rs.role, store.KindDelete, "a second server made for entry "+s.Metadata[MetaJournal])
		e.NewName, e.NewID = s.Name, s.ID
		pl.add(OpDeleteDuplicate, e, e.Reason)
	}
	return len(rs.duplicates) > 0
}
