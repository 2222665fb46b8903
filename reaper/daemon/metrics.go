package daemon

import (
	"fmt"
	"io"
	"maps"
	"net/http"
	"slices"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/jiocloud/orchestrate/internal/cli"
	"github.com/jiocloud/orchestrate/internal/store/reaperkv"
	"github.com/jiocloud/orchestrate/reaper"
	"github.com/jiocloud/orchestrate/reaper/planner"
)

// Metrics is the reaper's Prometheus exposition, written by hand (text
// format 0.0.4) to keep the dependency set small.
type Metrics struct {
	// mu guards every field below.
	mu     sync.Mutex
	leader bool
	// leaderLost counts leaderships that ended without this reaper
	// stopping (the lock lost, the session expired or destroyed);
	// leaderTerms the leaderships of the last hour, as the last report
	// carried them (every instance's).
	leaderLost  map[string]int // why
	leaderTerms int
	paused      bool
	armed       bool
	dryRun      bool
	backoffSecs float64
	roleBackoff map[string]float64
	// silent: per role, its silent hosts; orphaned: the orphaned hosts.
	silent      map[string]int
	orphaned    int
	zoneBackoff map[[2]string]float64 // role, zone
	nodes       map[[2]string]int     // role, state
	actions     map[[2]string]int     // op, result
	cycles      int
	cycleErrors int
	// wakeups counts the cycles begun, by cause (wake.go); watchErrors
	// the blocking queries of the watches that failed, by watch.
	wakeups     map[string]int
	watchErrors map[string]int
	lastCycle   time.Time
	cycleSecs   float64
	cloudErrors map[string]int // class
	// Per role: desired count, capacity exhausted, and the autoscaler's
	// last value and recommendation (roles without one are absent).
	desired     map[string]int
	drifted     map[string]int
	exhausted   map[string]bool
	scaleValue  map[string]float64
	recommended map[string]int
	// Per autoscaled role: the cycles whose decision held because its
	// metric was in doubt (a counter), and the nodes' reports its last
	// decision clamped to plausible_max and ignored (not a load).
	metricDoubt map[string]int
	clamped     map[string]int
	ignored     map[string]int
	// Per role with a warm pool: its size, its standbys by state, and
	// the claims whose standby served (count, and seconds from claim to
	// serving, summed).
	poolSize  map[string]int
	standbys  map[[2]string]int // role, state
	claims    map[string]int
	claimSecs map[string]float64
	// Aborted drains by role and cause (a counter), and each role's hosts
	// cooling off after one (as the last cycle saw them).
	drainAborts map[[2]string]int
	cooling     map[string]int
	// held counts each role's servers held for a human (as the last
	// cycle honoured them).
	held map[string]int
	// history counts the activities written to the history, by kind, and
	// historyErrors its failed writes and events.
	history       map[string]int
	historyErrors map[string]int
	// hooksAsked counts the lifecycle hooks asked (role, hook), hookResults
	// the results taken (role, hook, result, answer or timeout), and
	// hookEventErrors the hook events not fired.
	hooksAsked      map[[2]string]int
	hookResults     map[[4]string]int
	hookEventErrors int
	// repairs counts the repair steps begun and ended (role, step,
	// result).
	repairs map[[3]string]int
	// fleet holds the gauges the alerting rules need (fleetmetrics.go).
	fleet fleetGauges
}

// NewMetrics returns empty metrics.
func NewMetrics() *Metrics {
	return &Metrics{nodes: map[[2]string]int{}, actions: map[[2]string]int{}, cloudErrors: map[string]int{},
		claims: map[string]int{}, claimSecs: map[string]float64{}, metricDoubt: map[string]int{}, drainAborts: map[[2]string]int{}, cooling: map[string]int{}, held: map[string]int{},
		history: map[string]int{}, historyErrors: map[string]int{}, hooksAsked: map[[2]string]int{}, hookResults: map[[4]string]int{},
		repairs: map[[3]string]int{}, wakeups: map[string]int{}, watchErrors: map[string]int{}}
}

// wakeup counts a cycle begun for cause.
func (m *Metrics) wakeup(cause string) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.wakeups[cause]++
}

// watchError counts a failed blocking query of watch.
func (m *Metrics) watchError(watch string) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.watchErrors[watch]++
}

// Wakeups returns the cycles begun for cause (the
// reaper_cycle_wakeups_total counter).
func (m *Metrics) Wakeups(cause string) int {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.wakeups[cause]
}

// writeWakeups writes the wake-up and watch error counters; m.mu is held.
func (m *Metrics) writeWakeups(sb *strings.Builder) {
	sb.WriteString("# HELP reaper_cycle_wakeups_total Cycles begun as leader, by cause: start (a leadership's first), interval (the interval ran out with no change), change (a change in Consul health or KV), timer (a grace, timeout, backoff or drain ran out).\n# TYPE reaper_cycle_wakeups_total counter\n")
	for _, cause := range []string{wakeStart, wakeInterval, wakeChange, wakeTimer} {
		fmt.Fprintf(sb, "reaper_cycle_wakeups_total{cause=%q} %d\n", cause, m.wakeups[cause])
	}
	sb.WriteString("# HELP reaper_watch_errors_total Failed blocking queries of the watches that wake the cycle on a change (health, kv); each backs off, the interval's cycles go on.\n# TYPE reaper_watch_errors_total counter\n")
	for _, w := range []string{"health", "kv"} {
		fmt.Fprintf(sb, "reaper_watch_errors_total{watch=%q} %d\n", w, m.watchErrors[w])
	}
}

// hookAsked counts a lifecycle hook asked.
func (m *Metrics) hookAsked(role, hook string) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.hooksAsked[[2]string{role, hook}]++
}

// hookResult counts a hook's result taken, from an answer or at its
// deadline.
func (m *Metrics) hookResult(role, hook, result string, timeout bool) {
	by := "answer"
	if timeout {
		by = "timeout"
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	m.hookResults[[4]string{role, hook, result, by}]++
}

// hookEventFailed counts a hook event the agent refused or did not take.
func (m *Metrics) hookEventFailed() {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.hookEventErrors++
}

// repairStep counts a repair step begun (result started) or ended.
func (m *Metrics) repairStep(role, step, result string) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.repairs[[3]string{role, step, result}]++
}

// writeRepairs writes the repair ladders' counter; m.mu is held.
func (m *Metrics) writeRepairs(sb *strings.Builder) {
	sb.WriteString("# HELP reaper_repairs_total Repair steps (rerun, reboot, rebuild) begun (result started) and ended (repaired, failed, refused, abandoned), by role.\n# TYPE reaper_repairs_total counter\n")
	keys := slices.Collect(maps.Keys(m.repairs))
	slices.SortFunc(keys, func(a, b [3]string) int {
		return strings.Compare(strings.Join(a[:], "\x00"), strings.Join(b[:], "\x00"))
	})
	for _, k := range keys {
		fmt.Fprintf(sb, "reaper_repairs_total{role=%q,step=%q,result=%q} %d\n", k[0], k[1], k[2], m.repairs[k])
	}
}

// writeHooks writes the lifecycle hooks' counters; m.mu is held.
func (m *Metrics) writeHooks(sb *strings.Builder) {
	sb.WriteString("# HELP reaper_hooks_asked_total Lifecycle hooks asked (on_launch, on_terminate), by role and hook.\n# TYPE reaper_hooks_asked_total counter\n")
	for _, k := range sortedKeys(m.hooksAsked) {
		fmt.Fprintf(sb, "reaper_hooks_asked_total{role=%q,hook=%q} %d\n", k[0], k[1], m.hooksAsked[k])
	}
	sb.WriteString("# HELP reaper_hook_results_total Lifecycle hook results taken, by role, hook, result (continue, abandon) and by (answer, or timeout: the default).\n# TYPE reaper_hook_results_total counter\n")
	for _, k := range sortedKeys4(m.hookResults) {
		fmt.Fprintf(sb, "reaper_hook_results_total{role=%q,hook=%q,result=%q,by=%q} %d\n", k[0], k[1], k[2], k[3], m.hookResults[k])
	}
	fmt.Fprintf(sb, "# HELP reaper_hook_event_errors_total Hook events (reaper-hook) the agent refused or did not take; the request in KV stands.\n# TYPE reaper_hook_event_errors_total counter\nreaper_hook_event_errors_total %d\n", m.hookEventErrors)
}

// historyAdded counts an activity written to the history.
func (m *Metrics) historyAdded(kind string) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.history[kind]++
}

// historyFailed counts a failed history write ("write") or event
// ("event").
func (m *Metrics) historyFailed(what string) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.historyErrors[what]++
}

// drainAborted counts an aborted drain of role's server, by cause.
func (m *Metrics) drainAborted(role, cause string) {
	m.mu.Lock()
	m.drainAborts[[2]string{role, cause}]++
	m.mu.Unlock()
}

func (m *Metrics) setLeader(v bool) {
	m.mu.Lock()
	m.leader = v
	m.mu.Unlock()
}

// lostLeadership counts a leadership that ended without the reaper
// stopping.
func (m *Metrics) lostLeadership(why string) {
	m.mu.Lock()
	if m.leaderLost == nil {
		m.leaderLost = map[string]int{}
	}
	m.leaderLost[why]++
	m.mu.Unlock()
}

func (m *Metrics) setLeaderTerms(n int) {
	m.mu.Lock()
	m.leaderTerms = n
	m.mu.Unlock()
}

func (m *Metrics) action(op reaper.Op, result string) {
	m.mu.Lock()
	m.actions[[2]string{string(op), result}]++
	m.mu.Unlock()
}

func (m *Metrics) cloudError(err error) {
	m.mu.Lock()
	m.cloudErrors[reaper.ClassOf(err).String()]++
	m.mu.Unlock()
}

// zones records each role's zones' backoffs, as seconds left.
func (m *Metrics) zones(left map[[2]string]time.Duration) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.zoneBackoff = make(map[[2]string]float64, len(left))
	for k, d := range left {
		m.zoneBackoff[k] = max(d.Seconds(), 0)
	}
}

// cycle records a cycle that planned (and acted unless dry run).
func (m *Metrics) cycle(p *reaper.Plan, dryRun bool, backoff time.Duration, roleBackoff map[string]time.Duration, took time.Duration, now time.Time) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.ran(dryRun, took, now)
	m.backoffSecs = max(backoff.Seconds(), 0)
	m.roleBackoff = map[string]float64{}
	for role, d := range roleBackoff {
		m.roleBackoff[role] = max(d.Seconds(), 0)
	}
	m.paused, m.armed = p.Paused, p.Armed
	m.silent, m.orphaned = map[string]int{}, 0
	for _, r := range p.Roles {
		m.silent[r.Name] = r.SilentCount
		m.orphaned += r.OrphanedCount
	}
	m.nodes = map[[2]string]int{}
	m.desired, m.exhausted, m.scaleValue, m.recommended = map[string]int{}, map[string]bool{}, map[string]float64{}, map[string]int{}
	m.clamped, m.ignored = map[string]int{}, map[string]int{}
	m.poolSize, m.standbys = map[string]int{}, map[[2]string]int{}
	m.cooling, m.held = map[string]int{}, map[string]int{}
	m.drifted = map[string]int{}
	for _, c := range p.Claims {
		m.claims[c.Role]++
		m.claimSecs[c.Role] += c.Claim.Serving.Seconds()
	}
	for _, r := range p.Roles {
		if r.Pool != nil {
			m.poolSize[r.Name] = r.Pool.Size
			for _, st := range []string{reaperkv.StandbyBuilding, reaperkv.StandbyConverging, reaperkv.StandbyReady, reaperkv.StandbyStopped, reaperkv.StandbyFailed} {
				m.standbys[[2]string{r.Name, st}] = r.Pool.States[st]
			}
		}
		for st, n := range r.States {
			m.nodes[[2]string{r.Name, string(st)}] = n
		}
		m.desired[r.Name] = r.Desired
		m.drifted[r.Name] = r.Drifted + r.SpecUnknown
		m.cooling[r.Name] = len(r.DrainAborts)
		m.held[r.Name] = len(r.Held)
		m.exhausted[r.Name] = r.Capacity != nil && !slices.Contains(p.CapacityClear, r.Name)
		if a := r.Autoscale; a != nil && a.Last != nil {
			m.recommended[r.Name] = a.Last.Recommended
			if a.Last.Value != nil {
				m.scaleValue[r.Name] = *a.Last.Value
			}
			m.clamped[r.Name], m.ignored[r.Name] = len(a.Last.Clamped), len(a.Last.Ignored)
			if _, ok := m.metricDoubt[r.Name]; !ok {
				m.metricDoubt[r.Name] = 0
			}
			if planner.DecisionWhy(*a.Last) == planner.WhyMetric {
				m.metricDoubt[r.Name]++
			}
		}
	}
}

// cycleSkipped records a cycle that took no action on data it could not
// read; the last good cycle's gauges stay.
func (m *Metrics) cycleSkipped(dryRun bool, took time.Duration, now time.Time) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.ran(dryRun, took, now)
	m.cycleErrors++
}

// Cycles is how many cycles this reaper has run as leader (the
// reaper_cycles_total counter).
func (m *Metrics) Cycles() int {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.cycles
}

// ran counts a cycle and records its timing; m.mu is held.
func (m *Metrics) ran(dryRun bool, took time.Duration, now time.Time) {
	m.cycles++
	m.lastCycle = now
	m.cycleSecs = took.Seconds()
	m.dryRun = dryRun
}

// oneIfTrue is a boolean as a gauge's value.
func oneIfTrue(b bool) int {
	if b {
		return 1
	}
	return 0
}

// WriteTo writes the exposition.
func (m *Metrics) WriteTo(w io.Writer) (int64, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	var sb strings.Builder
	gauge := func(name, help string, v any) {
		fmt.Fprintf(&sb, "# HELP %s %s\n# TYPE %s gauge\n%s %v\n", name, help, name, name, v)
	}
	b := cli.Build()
	fmt.Fprintf(&sb, "# HELP reaper_build_info The running reaper's build: version, commit and Go version (always 1).\n# TYPE reaper_build_info gauge\nreaper_build_info{version=%q,commit=%q,goversion=%q} 1\n", b.Version, b.Commit, b.GoVersion)
	gauge("reaper_leader", "1 when this reaper holds the leader lock.", oneIfTrue(m.leader))
	sb.WriteString("# HELP reaper_leadership_lost_total Leaderships of this reaper that ended without it stopping, by cause (lock lost, session expired or destroyed).\n# TYPE reaper_leadership_lost_total counter\n")
	for _, why := range []string{leaderLostLock, leaderLostSession} {
		fmt.Fprintf(&sb, "reaper_leadership_lost_total{cause=%q} %d\n", why, m.leaderLost[why])
	}
	gauge("reaper_leader_terms_last_hour", "Leaderships begun in the last hour, by any reaper, as the leader's last report carries them; above 1 the lock changed hands.", m.leaderTerms)
	gauge("reaper_paused", "1 when destructive actions are paused (too many servers look unhealthy at once).", oneIfTrue(m.paused))
	gauge("reaper_armed", "1 when the start gate is open (the reaper may destroy).", oneIfTrue(m.armed))
	gauge("reaper_dry_run", "1 when the reaper only logs what it would do.", oneIfTrue(m.dryRun))
	gauge("reaper_quota_backoff_seconds", "Seconds left of the quota or capacity backoff (0: none).", m.backoffSecs)
	sb.WriteString("# HELP reaper_role_backoff_seconds Seconds left of a role's create backoff after a capacity (no valid host) or fatal create error.\n# TYPE reaper_role_backoff_seconds gauge\n")
	for _, r := range slices.Sorted(maps.Keys(m.roleBackoff)) {
		fmt.Fprintf(&sb, "reaper_role_backoff_seconds{role=%q} %v\n", r, m.roleBackoff[r])
	}
	sb.WriteString("# HELP reaper_silent_hosts Servers Nova lists whose host's own records (heartbeat included) have not moved for the role's silent_after.\n# TYPE reaper_silent_hosts gauge\n")
	for _, r := range slices.Sorted(maps.Keys(m.silent)) {
		fmt.Fprintf(&sb, "reaper_silent_hosts{role=%q} %d\n", r, m.silent[r])
	}
	gauge("reaper_orphaned_hosts", "Hosts named like a role's servers with records of their own and no server in Nova nor Consul node; their records are removed after orphan_grace.", m.orphaned)
	sb.WriteString("# HELP reaper_zone_backoff_seconds Seconds left of the create backoff of one availability zone of a role, after the zone refused a create for capacity (the role's other zones take its creates).\n# TYPE reaper_zone_backoff_seconds gauge\n")
	for _, k := range slices.SortedFunc(maps.Keys(m.zoneBackoff), func(a, b [2]string) int { return strings.Compare(a[0]+"\x00"+a[1], b[0]+"\x00"+b[1]) }) {
		fmt.Fprintf(&sb, "reaper_zone_backoff_seconds{role=%q,zone=%q} %v\n", k[0], k[1], m.zoneBackoff[k])
	}
	gauge("reaper_last_cycle_duration_seconds", "Duration of the last cycle.", m.cycleSecs)
	ts := 0.0
	if !m.lastCycle.IsZero() {
		ts = float64(m.lastCycle.UnixNano()) / 1e9
	}
	gauge("reaper_last_cycle_timestamp_seconds", "Unix time of the last cycle.", ts)
	fmt.Fprintf(&sb, "# HELP reaper_cycles_total Cycles run as leader.\n# TYPE reaper_cycles_total counter\nreaper_cycles_total %d\n", m.cycles)
	fmt.Fprintf(&sb, "# HELP reaper_cycle_errors_total Cycles that took no action because Consul or the cloud could not be read.\n# TYPE reaper_cycle_errors_total counter\nreaper_cycle_errors_total %d\n", m.cycleErrors)
	sb.WriteString("# HELP reaper_nodes Servers by role and state, as the last cycle saw them.\n# TYPE reaper_nodes gauge\n")
	for _, k := range sortedKeys(m.nodes) {
		fmt.Fprintf(&sb, "reaper_nodes{role=%q,state=%q} %d\n", k[0], k[1], m.nodes[k])
	}
	sb.WriteString("# HELP reaper_actions_total Actions by operation and result (done, pending: accepted by the cloud, not carried out yet; failed, skipped, dry_run).\n# TYPE reaper_actions_total counter\n")
	for _, k := range sortedKeys(m.actions) {
		fmt.Fprintf(&sb, "reaper_actions_total{op=%q,result=%q} %d\n", k[0], k[1], m.actions[k])
	}
	perRole := func(name, help string, vals map[string]string) {
		fmt.Fprintf(&sb, "# HELP %s %s\n# TYPE %s gauge\n", name, help, name)
		for _, r := range slices.Sorted(maps.Keys(vals)) {
			fmt.Fprintf(&sb, "%s{role=%q} %s\n", name, r, vals[r])
		}
	}
	perRole("reaper_desired", "The desired count of each role, as the last cycle read it.", mapValues(m.desired, func(n int) string { return fmt.Sprint(n) }))
	perRole("reaper_role_drifted_servers", "Servers of each role not known to be built from its boot spec as configured now: built from another image, flavor, networks, key or user data, or with no recorded spec.", mapValues(m.drifted, func(n int) string { return fmt.Sprint(n) }))
	perRole("reaper_capacity_exhausted", "1 while creates of the role fail for quota or capacity (no valid host); the reason is in <prefix>/capacity/<role>.", mapValues(m.exhausted, func(b bool) string { return fmt.Sprint(oneIfTrue(b)) }))
	m.writeAutoscale(&sb, perRole)
	m.writePool(&sb, perRole)
	m.writeDrainAborts(&sb, perRole)
	m.writeHistory(&sb)
	m.writeHooks(&sb)
	m.writeRepairs(&sb)
	m.writeWakeups(&sb)
	m.writeFleet(&sb, perRole)
	sb.WriteString("# HELP reaper_cloud_errors_total Cloud errors by class.\n# TYPE reaper_cloud_errors_total counter\n")
	for _, c := range slices.Sorted(maps.Keys(m.cloudErrors)) {
		fmt.Fprintf(&sb, "reaper_cloud_errors_total{class=%q} %d\n", c, m.cloudErrors[c])
	}
	n, err := io.WriteString(w, sb.String())
	return int64(n), err
}

// writeAutoscale writes each autoscaled role's last decision (its metric,
// its recommendation, the reports it clamped or ignored) and the counter of
// decisions held for a metric in doubt; m.mu is held.
func (m *Metrics) writeAutoscale(sb *strings.Builder, perRole func(name, help string, vals map[string]string)) {
	perRole("reaper_autoscale_value", "An autoscaled role's metric as its last decision used it.", mapValues(m.scaleValue, func(v float64) string { return fmt.Sprint(v) }))
	perRole("reaper_autoscale_recommended", "An autoscaled role's recommended count at its last decision.", mapValues(m.recommended, func(n int) string { return fmt.Sprint(n) }))
	perRole("reaper_autoscale_reports_clamped", "Nodes' reports an autoscaled role's last decision took at its plausible_max (one node's report is one vote).", mapValues(m.clamped, func(n int) string { return fmt.Sprint(n) }))
	perRole("reaper_autoscale_reports_ignored", "Nodes' reports an autoscaled role's last decision ignored: negative or not finite, not a load.", mapValues(m.ignored, func(n int) string { return fmt.Sprint(n) }))
	sb.WriteString("# HELP reaper_autoscale_metric_in_doubt_total Cycles whose autoscaling decision held because the role's metric was in doubt (unreadable, too few usable reports, a value that cannot be a load).\n# TYPE reaper_autoscale_metric_in_doubt_total counter\n")
	for _, r := range slices.Sorted(maps.Keys(m.metricDoubt)) {
		fmt.Fprintf(sb, "reaper_autoscale_metric_in_doubt_total{role=%q} %d\n", r, m.metricDoubt[r])
	}
}

// writePool writes each warm pool's configured size, its standbys by state
// and the time its claimed standbys took to serve; m.mu is held.
func (m *Metrics) writePool(sb *strings.Builder, perRole func(name, help string, vals map[string]string)) {
	perRole("reaper_pool_size", "A role's warm pool size, as configured.", mapValues(m.poolSize, func(n int) string { return fmt.Sprint(n) }))
	sb.WriteString("# HELP reaper_pool_standbys A role's warm pool standbys by state (building, converging, ready, failed), as the last cycle saw them.\n# TYPE reaper_pool_standbys gauge\n")
	for _, k := range sortedKeys(m.standbys) {
		fmt.Fprintf(sb, "reaper_pool_standbys{role=%q,state=%q} %d\n", k[0], k[1], m.standbys[k])
	}
	sb.WriteString("# HELP reaper_pool_claim_seconds Time from the claim of a warm pool standby to its serving, by role.\n# TYPE reaper_pool_claim_seconds summary\n")
	for _, r := range slices.Sorted(maps.Keys(m.claims)) {
		fmt.Fprintf(sb, "reaper_pool_claim_seconds_sum{role=%q} %v\nreaper_pool_claim_seconds_count{role=%q} %d\n", r, m.claimSecs[r], r, m.claims[r])
	}
}

// writeDrainAborts writes the aborted drains' counter and cool-off gauge;
// m.mu is held.
func (m *Metrics) writeDrainAborts(sb *strings.Builder, perRole func(name, help string, vals map[string]string)) {
	sb.WriteString("# HELP reaper_drain_aborts_total Drains of a scale-in or max-age retirement aborted (the server stays), by role and cause: failed (the answer said the work could not move) or timeout (no answer by drain_timeout).\n# TYPE reaper_drain_aborts_total counter\n")
	for _, k := range sortedKeys(m.drainAborts) {
		fmt.Fprintf(sb, "reaper_drain_aborts_total{role=%q,cause=%q} %d\n", k[0], k[1], m.drainAborts[k])
	}
	perRole("reaper_drain_cooloff_hosts", "A role's hosts whose drain was aborted and that are not chosen for a scale-in or a max-age retirement until their drain_cooloff ends.", mapValues(m.cooling, func(n int) string { return fmt.Sprint(n) }))
	perRole("reaper_held_hosts", "A role's servers held for a human (orchestrate hold, hold_failures): out of service, out of the reaper's reach, in no count.", mapValues(m.held, func(n int) string { return fmt.Sprint(n) }))
}

// mapValues formats each value of m.
func mapValues[V any](m map[string]V, f func(V) string) map[string]string {
	out := make(map[string]string, len(m))
	for k, v := range m {
		out[k] = f(v)
	}
	return out
}

func sortedKeys(m map[[2]string]int) [][2]string {
	keys := make([][2]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Slice(keys, func(i, j int) bool {
		if keys[i][0] != keys[j][0] {
			return keys[i][0] < keys[j][0]
		}
		return keys[i][1] < keys[j][1]
	})
	return keys
}

// sortedKeys4 is sortedKeys for keys of four labels.
func sortedKeys4(m map[[4]string]int) [][4]string {
	keys := slices.Collect(maps.Keys(m))
	slices.SortFunc(keys, func(a, b [4]string) int {
		return strings.Compare(strings.Join(a[:], "\x00"), strings.Join(b[:], "\x00"))
	})
	return keys
}

// ServeHTTP serves /metrics.
func (m *Metrics) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	w.Header().Set("Content-Type", "text/plain; version=0.0.4; charset=utf-8")
	m.WriteTo(w)
}

// writeHistory writes the activity history's counters.
func (m *Metrics) writeHistory(sb *strings.Builder) {
	sb.WriteString("# HELP reaper_history_activities_total Activities written to the reaper's history (<prefix>/history/reaper), by kind.\n# TYPE reaper_history_activities_total counter\n")
	for _, k := range slices.Sorted(maps.Keys(m.history)) {
		fmt.Fprintf(sb, "reaper_history_activities_total{kind=%q} %d\n", k, m.history[k])
	}
	sb.WriteString("# HELP reaper_history_errors_total Failed writes of the history (what=write: kept for the next cycle) and failed events (what=event).\n# TYPE reaper_history_errors_total counter\n")
	for _, w := range []string{"write", "event"} {
		fmt.Fprintf(sb, "reaper_history_errors_total{what=%q} %d\n", w, m.historyErrors[w])
	}
}
