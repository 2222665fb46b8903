package daemon

import (
	"context"
	"fmt"
	"maps"
	"strings"

	"github.com/jiocloud/orchestrate/internal/rollout"
	"github.com/jiocloud/orchestrate/internal/store"
	"github.com/jiocloud/orchestrate/reaper"
)

// The gauges the shipped alerting rules need beyond what the reaper's
// other metrics say (packaging/prometheus, docs/alerts.md): each role's
// serving count against its min_healthy, its hosts in a failed state, its
// rollout halted, and its instance refresh. Like every per-cycle gauge they
// are the leader's, as its last cycle saw them.

// fleetReading is what a cycle read for these gauges besides what the
// planner reads: the hosts in a failed state, and every role's rollout.
type fleetReading struct {
	// failed maps a host to the categories it failed in; categories lists
	// every category any host reports.
	failed     map[string][]string
	categories []string
	// halted maps a role with a rollout record to whether its rollout of
	// the current version is halted; nil when the rollouts could not be
	// read (the last good values stay).
	halted map[string]bool
}

// readFleet reads the hosts' failures from snap and every role's rollout
// (one more KV listing, of <prefix>/rollout/). A rollout that cannot be
// read is logged when the problem changes and costs the cycle nothing.
func (r *Reaper) readFleet(ctx context.Context, snap *store.Snapshot) fleetReading {
	fr := fleetReading{failed: map[string][]string{}, categories: snap.Categories()}
	for _, f := range snap.Failures() {
		fr.failed[f.Host] = append(fr.failed[f.Host], f.Category)
	}
	rollouts, err := r.store.Rollouts(ctx)
	problem := ""
	switch {
	case ctx.Err() != nil:
		return fr // stopping, or the lock lost: no problem of the records
	case err != nil:
		problem = err.Error()
	default:
		fr.halted = make(map[string]bool, len(rollouts))
		for role, ro := range rollouts {
			fr.halted[role] = snap.CurrentVersion != "" && rollout.Halted(ro, snap.CurrentVersion) != ""
		}
	}
	if r.metrics.rolloutProblem(problem) {
		if problem != "" {
			r.log.Warn("rollouts unreadable: reaper_rollout_halted keeps its last values", "err", problem)
		} else {
			r.log.Info("rollouts readable again")
		}
	}
	return fr
}

// fleetGauges are the gauges of one cycle, by role.
type fleetGauges struct {
	healthy, minHealthy map[string]int
	failed              map[[2]string]int // role, category
	halted              map[string]bool
	refresh             map[[2]string]int // role, state: 1
	refreshRemaining    map[string]int
	// rolloutErr is the last rollout read's error ("" when it was read).
	rolloutErr string
}

// rolloutProblem records the rollout read's problem ("" for none) and
// says whether it changed.
func (m *Metrics) rolloutProblem(problem string) bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	changed := problem != m.fleet.rolloutErr
	m.fleet.rolloutErr = problem
	return changed
}

// fleetCycle sets the gauges from a cycle's plan and reading; cfg gives
// each role's min_healthy.
func (m *Metrics) fleetCycle(cfg *reaper.Config, p *reaper.Plan, fr fleetReading) {
	m.mu.Lock()
	defer m.mu.Unlock()
	g := &m.fleet
	g.healthy, g.minHealthy = map[string]int{}, map[string]int{}
	g.failed, g.refresh, g.refreshRemaining = map[[2]string]int{}, map[[2]string]int{}, map[string]int{}
	for _, role := range cfg.Roles {
		g.minHealthy[role.Name] = role.MinHealthy
	}
	if fr.halted != nil {
		g.halted = map[string]bool{}
		for _, role := range cfg.Roles {
			g.halted[role.Name] = false
		}
		maps.Copy(g.halted, fr.halted)
	}
	for _, rr := range p.Roles {
		g.healthy[rr.Name] = rr.Healthy
		for _, c := range fr.categories {
			g.failed[[2]string{rr.Name, c}] = 0
		}
		for _, host := range rr.Members {
			for _, c := range fr.failed[host] {
				g.failed[[2]string{rr.Name, c}]++
			}
		}
		if rf := rr.Refresh; rf != nil {
			state := rf.State
			if state == "" {
				state = "requested"
			}
			g.refresh[[2]string{rr.Name, state}] = 1
			g.refreshRemaining[rr.Name] = rf.Remaining
		}
	}
}

// writeFleet writes the gauges; m.mu is held.
func (m *Metrics) writeFleet(sb *strings.Builder, perRole func(name, help string, vals map[string]string)) {
	g := &m.fleet
	itoa := func(n int) string { return fmt.Sprint(n) }
	perRole("reaper_role_healthy", "Servers of each role whose role checks pass (what min_healthy counts), as the last cycle saw them.", mapValues(g.healthy, itoa))
	perRole("reaper_role_min_healthy", "Each role's min_healthy, as configured.", mapValues(g.minHealthy, itoa))
	sb.WriteString("# HELP reaper_failed_hosts Servers of each role whose status record is failed in a category (orchestrate get-failures lists them), as the last cycle saw them.\n# TYPE reaper_failed_hosts gauge\n")
	for _, k := range sortedKeys(g.failed) {
		fmt.Fprintf(sb, "reaper_failed_hosts{role=%q,category=%q} %d\n", k[0], k[1], g.failed[k])
	}
	perRole("reaper_rollout_halted", "1 while the rollout of the current version to the role is halted (more hosts failed than its max_failures); orchestrate rollout resume ROLE starts it again.", mapValues(g.halted, func(b bool) string { return itoa(oneIfTrue(b)) }))
	sb.WriteString("# HELP reaper_refresh 1 for the state of each role's instance refresh (running, checkpoint, failed, cancelled, pinned, done, auto, held), while it has one.\n# TYPE reaper_refresh gauge\n")
	for _, k := range sortedKeys(g.refresh) {
		fmt.Fprintf(sb, "reaper_refresh{role=%q,state=%q} %d\n", k[0], k[1], g.refresh[k])
	}
	perRole("reaper_refresh_remaining", "Servers of a role its instance refresh has still to replace, while it has one.", mapValues(g.refreshRemaining, itoa))
}
