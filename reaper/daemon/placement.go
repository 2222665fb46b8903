package daemon

import (
	"context"
	"fmt"
	"sort"
	"strings"
	"time"

	"github.com/jiocloud/orchestrate/internal/store/reaperkv"
	"github.com/jiocloud/orchestrate/reaper"
)

// Placement's actions: each role's server group, found or made when a
// create needs it and recorded in KV so a new leader reuses it, and the
// backoff of a zone that refused a create for capacity.

// serverGroup returns the ID of role's server group for a create ("" for
// anti_affinity none): the recorded group while Nova has it; else one of
// the role's name (a leader made it and died before recording it, or the
// record was lost); else a new one, recorded (under the leader check)
// before Nova is asked for it. A group whose policy is not the configured
// one is used all the same and reported (planner: placementView), never
// replaced by a second one.
func (r *Reaper) serverGroup(ctx context.Context, t *leaderTerm, role *reaper.Role) (string, error) {
	policy := role.GroupPolicy()
	if policy == "" {
		return "", nil
	}
	rec, have := t.groups[role.Name]
	if !have {
		rec = reaperkv.ServerGroupRecord{Role: role.Name}
	}
	if rec.ID != "" {
		gctx, cancel := context.WithTimeout(ctx, callTimeout)
		g, err := r.cloud.ServerGroup(gctx, rec.ID)
		cancel()
		switch {
		case err == nil:
			r.noteGroupPolicy(t, role, g)
			return g.ID, nil
		case reaper.ClassOf(err) != reaper.NotFound:
			r.metrics.cloudError(err)
			return "", fmt.Errorf("read the server group %s of role %s: %w", rec.ID, role.Name, err)
		}
		r.log.Warn("the role's server group is gone (deleted by hand?): the next servers go into one found by its name, or a new one; the servers made before stay in no group",
			"role", role.Name, "group", rec.ID)
	}
	fctx, cancel := context.WithTimeout(ctx, callTimeout)
	found, err := r.cloud.FindServerGroups(fctx, role.GroupName())
	cancel()
	if err != nil {
		r.metrics.cloudError(err)
		return "", fmt.Errorf("look for the server group %s: %w", role.GroupName(), err)
	}
	if len(found) > 0 {
		g := r.pickGroup(role, found)
		return g.ID, r.recordGroup(ctx, t, rec, g)
	}
	return r.makeGroup(ctx, t, role, rec)
}

// makeGroup records the intent (a record without an ID: a leader that
// finds it looks for the group by name), then asks Nova for the group
// and records its ID.
func (r *Reaper) makeGroup(ctx context.Context, t *leaderTerm, role *reaper.Role, rec reaperkv.ServerGroupRecord) (string, error) {
	intent := reaperkv.ServerGroupRecord{Role: role.Name, Name: role.GroupName(), Policy: role.GroupPolicy(), Time: r.now().UTC(), Index: rec.Index}
	index, err := r.journal.PutServerGroup(ctx, t.session, intent)
	if err != nil {
		return "", fmt.Errorf("record the intent to make server group %s: %w", intent.Name, err)
	}
	intent.Index = index
	t.groups[role.Name] = intent
	cctx, cancel := context.WithTimeout(ctx, callTimeout)
	g, err := r.cloud.CreateServerGroup(cctx, intent.Name, intent.Policy)
	cancel()
	if err != nil {
		r.metrics.cloudError(err)
		return "", fmt.Errorf("make server group %s: %w", intent.Name, err)
	}
	r.log.Info("server group made for the role", "role", role.Name, "group", g.ID, "name", g.Name, "policy", g.Policy)
	return g.ID, r.recordGroup(ctx, t, intent, g)
}

// recordGroup writes group g as role's record, replacing rec (only if it
// is still the one read).
func (r *Reaper) recordGroup(ctx context.Context, t *leaderTerm, rec reaperkv.ServerGroupRecord, g reaper.ServerGroup) error {
	next := reaperkv.ServerGroupRecord{Role: rec.Role, ID: g.ID, Name: g.Name, Policy: g.Policy, Time: r.now().UTC(), Index: rec.Index}
	index, err := r.journal.PutServerGroup(ctx, t.session, next)
	if err != nil {
		return fmt.Errorf("record server group %s of role %s: %w", g.ID, rec.Role, err)
	}
	next.Index = index
	t.groups[rec.Role] = next
	if role := r.cfg.Role(rec.Role); role != nil {
		r.noteGroupPolicy(t, role, g)
	}
	return nil
}

// pickGroup chooses among the groups of the role's name (more than one
// was made by hand, or by leaders without records): the one with the
// configured policy, then the most members, then the lowest ID; more
// than one is logged, naming them all.
func (r *Reaper) pickGroup(role *reaper.Role, found []reaper.ServerGroup) reaper.ServerGroup {
	sort.Slice(found, func(i, j int) bool {
		a, b := found[i], found[j]
		if (a.Policy == role.GroupPolicy()) != (b.Policy == role.GroupPolicy()) {
			return a.Policy == role.GroupPolicy()
		}
		if len(a.Members) != len(b.Members) {
			return len(a.Members) > len(b.Members)
		}
		return a.ID < b.ID
	})
	if len(found) > 1 {
		ids := make([]string, len(found))
		for i, g := range found {
			ids[i] = g.ID
		}
		r.log.Warn("several server groups carry the role's group name: the role's servers go into the first; delete the others", "role", role.Name, "name", role.GroupName(), "groups", strings.Join(ids, ","))
	}
	return found[0]
}

// noteGroupPolicy logs, once per term and group, a group whose policy is
// not the configured one (the report says so every cycle).
func (r *Reaper) noteGroupPolicy(t *leaderTerm, role *reaper.Role, g reaper.ServerGroup) {
	if g.Policy == role.GroupPolicy() || t.groupWarned[g.ID] {
		return
	}
	t.groupWarned[g.ID] = true
	r.log.Warn("the role's server group has another policy than the configuration's: new servers still join it; delete the group for the reaper to make one with the configured policy",
		"role", role.Name, "group", g.ID, "policy", g.Policy, "configured", role.GroupPolicy())
}

// zoneRefusal reports whether err, of a create of role's in zone, backs
// off that zone only: the role has other zones, and the error is the
// zone's (no valid host there, a zone Nova does not offer).
func zoneRefusal(role *reaper.Role, zone string, err error) bool {
	return zone != "" && len(role.Zones()) > 1 && reaper.ZoneRefusal(err)
}

// zoneBackoffOf is the backoff of role's zone.
func (t *leaderTerm) zoneBackoffOf(role, zone string) *backoffState {
	if t.zoneBackoff[role] == nil {
		t.zoneBackoff[role] = map[string]*backoffState{}
	}
	return backoffIn(t.zoneBackoff[role], zone)
}

// zoneBackoffs is each role's zones' backoff ends, as the planner takes
// them.
func (t *leaderTerm) zoneBackoffs() map[string]map[string]time.Time {
	out := make(map[string]map[string]time.Time, len(t.zoneBackoff))
	for role, zones := range t.zoneBackoff {
		out[role] = backoffEnds(zones)
	}
	return out
}

// zonesClosed: every zone of role is backed off now.
func (t *leaderTerm) zonesClosed(role *reaper.Role, now time.Time) bool {
	for _, z := range role.Zones() {
		if b := t.zoneBackoff[role.Name][z]; b == nil || !now.Before(b.until) {
			return false
		}
	}
	return true
}

// backoffZone starts or extends the backoff of role's zone after a
// capacity refusal there; once every zone of the role is backed off the
// role's capacity is exhausted (its record written).
func (r *Reaper) backoffZone(ctx context.Context, t *leaderTerm, role *reaper.Role, zone string, err error) {
	d := t.zoneBackoffOf(role.Name, zone).bump(r.now(), r.cfg.QuotaBackoff.D(), r.cfg.QuotaBackoffMax.D(), err)
	r.log.Warn("create refused in an availability zone: backing off creates there; the role's other zones take them", "role", role.Name, "zone", zone, "for", d, "class", reaper.ClassOf(err).String(), "err", err)
	if t.zonesClosed(role, r.now()) {
		r.exhausted(ctx, t, role.Name, err)
	}
}

// zoneReport adds the zones backed off now, with why, to each role's
// placement report.
func (t *leaderTerm) zoneReport(roles []reaperkv.RoleReport, now time.Time) {
	for i := range roles {
		zones := t.zoneBackoff[roles[i].Name]
		p := roles[i].Placement
		if p == nil || len(zones) == 0 {
			continue
		}
		c := *p
		c.ZoneBackoff = nil
		for z, b := range zones {
			if now.Before(b.until) {
				if c.ZoneBackoff == nil {
					c.ZoneBackoff = map[string]reaperkv.RoleBackoff{}
				}
				c.ZoneBackoff[z] = reaperkv.RoleBackoff{Until: b.until, Reason: b.reason}
			}
		}
		roles[i].Placement = &c
	}
}
