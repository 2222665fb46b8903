package planner

import (
	"fmt"
	"math"
	"strings"
	"time"

	"github.com/jiocloud/orchestrate/internal/store/reaperkv"
	"github.com/jiocloud/orchestrate/reaper"
)

// Placement spreads a role over its availability zones: each create (a
// member or a standby) goes to the open zone (not backed off after a
// capacity refusal) with the fewest, in config order on a tie; a claim
// takes the ready standby in the zone with the fewest serving members; a
// scale-in takes serving servers from the fullest zone first. Existing
// servers are never moved: placement chooses where new servers go and
// which surplus one leaves, and every step still asks the gate.

// placed counts the servers this plan adds to a role, by zone: members
// (creates and claims) and standbys apart.
type placed struct {
	members, standbys map[string]int
}

// zoneCounts are the role's servers by zone, as a create counts them:
// members that serve and are not on their way out (the old server of a
// replacement, a server drained) plus those its open entries bring and
// that do not serve yet (by their server's zone, else the zone the entry
// asked for), plus this plan's creates and claims; with standby, the
// role's standbys and standby creates instead. Computed afresh for each
// choice: the plan's own steps change it.
func (pl *planner) zoneCounts(rs *roleServers, standby bool) map[string]int {
	counts := map[string]int{}
	if standby {
		for _, s := range rs.standbys {
			counts[s.Zone]++
		}
	} else {
		for _, s := range rs.all {
			if part := pl.inEntry[s.ID]; pl.serves(rs, s) && part != reaper.StateReplacing && part != reaper.StateDeleting {
				counts[s.Zone]++
			}
		}
	}
	for _, e := range rs.entries {
		if e.Kind == reaperkv.KindDelete || e.Standby != standby {
			continue
		}
		newS := pl.createdFor(e.ID)
		if newS == nil && e.NewID != "" {
			newS = pl.byID[e.NewID]
		}
		zone := e.Zone
		if newS != nil {
			if !standby && pl.serves(rs, newS) {
				continue // counted as a member above
			}
			if newS.Zone != "" {
				zone = newS.Zone
			}
		}
		counts[zone]++
	}
	add := rs.placed.members
	if standby {
		add = rs.placed.standbys
	}
	for z, n := range add {
		counts[z] += n
	}
	return counts
}

// zoneBackedOff: creates of role in zone wait for its backoff.
func (pl *planner) zoneBackedOff(role, zone string) bool {
	return pl.in.Now.Before(pl.in.ZoneBackoff[role][zone])
}

// pickZone is the zone a new server of the role goes to: the open zone
// with the fewest (see zoneCounts), the first in the role's list on a
// tie; "" when the role has no zones, or every one is backed off (which
// the gate says first).
func (pl *planner) pickZone(rs *roleServers, standby bool) string {
	zones := rs.role.Zones()
	if len(zones) == 0 {
		return ""
	}
	counts := pl.zoneCounts(rs, standby)
	best := ""
	for _, z := range zones {
		if pl.zoneBackedOff(rs.role.Name, z) {
			continue
		}
		if best == "" || counts[z] < counts[best] {
			best = z
		}
	}
	return best
}

// place sets the zone of entry e, a create of a member or a standby, and
// counts it for the rest of the plan.
func (pl *planner) place(rs *roleServers, e *reaper.Entry) {
	e.Zone = pl.pickZone(rs, e.Standby)
	pl.countPlaced(rs, e.Zone, e.Standby)
}

// countPlaced counts a server this plan adds in zone.
func (pl *planner) countPlaced(rs *roleServers, zone string, standby bool) {
	if zone == "" {
		return
	}
	m := &rs.placed.members
	if standby {
		m = &rs.placed.standbys
	}
	if *m == nil {
		*m = map[string]int{}
	}
	(*m)[zone]++
}

// replaceZone: a create recorded in the journal whose zone is no longer
// one of the role's, or is backed off, goes to another zone (a create
// written before zones were configured gets one).
func (pl *planner) replaceZone(rs *roleServers, e *reaper.Entry) {
	if len(rs.role.Zones()) == 0 || (rs.role.HasZone(e.Zone) && !pl.zoneBackedOff(rs.role.Name, e.Zone)) {
		return
	}
	pl.place(rs, e)
}

// zonesClosed says why no create of the role may start: every one of its
// zones is backed off after a capacity refusal; "" otherwise.
func (pl *planner) zonesClosed(rs *roleServers) string {
	zones := rs.role.Zones()
	if len(zones) == 0 {
		return ""
	}
	var until []string
	for _, z := range zones {
		t, ok := pl.in.ZoneBackoff[rs.role.Name][z]
		if !ok || !pl.in.Now.Before(t) {
			return ""
		}
		until = append(until, z+" until "+t.UTC().Format(time.RFC3339))
	}
	return "every availability zone of the role is backed off after a capacity refusal: " + strings.Join(until, ", ")
}

// preferZone returns, of the role's ready standbys (oldest first), the one
// in the zone with the fewest serving members, the oldest on a tie; the
// first when the role has no zones.
func (pl *planner) preferZone(rs *roleServers, ready []*reaper.Server) *reaper.Server {
	if len(ready) == 0 {
		return nil
	}
	if len(rs.role.Zones()) == 0 {
		return ready[0]
	}
	counts := pl.zoneCounts(rs, false)
	best := ready[0]
	for _, s := range ready[1:] {
		if counts[s.Zone] < counts[best.Zone] {
			best = s
		}
	}
	return best
}

// spreadScaleIn reorders a scale-in's candidates so that, among those that
// serve and were not named by an operator, of one rank, the next victim
// is from the fullest zone (a server outside the role's zones first), in
// the order they had within a zone (least loaded, then oldest). Named
// hosts and servers that do not serve keep their places.
func (pl *planner) spreadScaleIn(rs *roleServers, order []*reaper.Server) []*reaper.Server {
	if len(rs.role.Zones()) == 0 {
		return order
	}
	named := pl.in.Scaling.ScaleIn[rs.role.Name]
	spreadable := func(s *reaper.Server) bool {
		_, n := named[s.Name]
		return !n && pl.serves(rs, s)
	}
	counts := pl.zoneCounts(rs, false)
	fullness := func(s *reaper.Server) int {
		if !rs.role.HasZone(s.Zone) {
			return math.MaxInt
		}
		return counts[s.Zone]
	}
	out := append([]*reaper.Server(nil), order...)
	for i := 0; i < len(out); {
		j := i + 1
		rank := pl.statesOf[out[i].ID].Props().Rank
		for j < len(out) && spreadable(out[j]) == spreadable(out[i]) && pl.statesOf[out[j].ID].Props().Rank == rank {
			j++
		}
		if spreadable(out[i]) {
			run := out[i:j]
			for k := range run {
				best := k
				for m := k + 1; m < len(run); m++ {
					if fullness(run[m]) > fullness(run[best]) {
						best = m
					}
				}
				v := run[best]
				copy(run[k+1:best+1], run[k:best])
				run[k] = v
				counts[v.Zone]--
			}
		}
		i = j
	}
	return out
}

// placementView is the role's placement in the report: its serving
// servers by zone, and its server group as recorded (or why its record
// cannot be read); nil for a role with neither zones nor a group.
func (pl *planner) placementView(rs *roleServers) *reaperkv.PlacementReport {
	r := rs.role
	if len(r.Zones()) == 0 && r.GroupPolicy() == "" {
		return nil
	}
	p := &reaperkv.PlacementReport{GroupProblem: pl.in.ServerGroupProblems[r.Name]}
	if len(r.Zones()) > 0 {
		p.Zones = map[string]int{}
		for _, z := range r.Zones() {
			p.Zones[z] = 0
		}
		for _, s := range rs.all {
			if s.Zone != "" && pl.serves(rs, s) {
				p.Zones[s.Zone]++
			}
		}
	}
	if g, ok := pl.in.ServerGroups[r.Name]; ok {
		p.Group = &g
	}
	if r.GroupPolicy() != "" && p.Group != nil && p.Group.Policy != r.GroupPolicy() && p.GroupProblem == "" {
		p.GroupProblem = fmt.Sprintf("server group %s %s has policy %s, the configuration says %s (anti_affinity %s): new servers still join it; delete the group (`openstack server group delete %s`) for the reaper to make one with the configured policy", p.Group.Name, p.Group.ID, p.Group.Policy, r.GroupPolicy(), r.AntiAffinity, p.Group.ID)
	}
	return p
}
