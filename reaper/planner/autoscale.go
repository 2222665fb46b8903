package planner

import (
	"fmt"
	"math"
	"sort"
	"strings"
	"time"

	"github.com/jiocloud/orchestrate/internal/store/reaperkv"
	"github.com/jiocloud/orchestrate/reaper"
)

// Decision codes: a stable word per kind of reason, so a decision is
// logged and kept in the history when it changes, not every cycle.
const (
	whyOverride    = "override"
	whyNotArmed    = "not-armed"
	whyPaused      = "paused"
	whyDoubt       = "list-in-doubt"
	WhyMetric      = "metric"
	whyNoServing   = "no-serving"
	whyAtCount     = "at-count"
	whyTolerance   = "within-tolerance"
	whyCooldown    = "cooldown"
	whyBackoff     = "create-backoff"
	whyNamed       = "named-scale-in"
	whyStabilizing = "stabilizing"
	whyHigherRec   = "higher-recommendation"
	whyInFlight    = "in-flight"
	whyScaled      = "scaled"
)

// maxScaleHistory bounds the decisions kept per role in the report.
const maxScaleHistory = 20

// gapIntervals: a report older than this many intervals (a new leader, a
// run of skipped cycles) breaks the stabilization window, which starts
// again: a scale in needs a whole window of readings behind it.
const gapIntervals = 3

// autoscale decides an autoscaled role's desired count for the next
// cycle, and keeps its report: the recommendations window, the last
// changes and the history.
func (pl *planner) autoscale(rs *roleServers) {
	r := rs.role
	a := r.Autoscale
	if a == nil {
		return
	}
	rep := pl.carryAutoscale(r)
	d := pl.decide(rs, rep)
	switch d.Result {
	case reaperkv.ResultScaleOut:
		rep.LastScaleOut = d.Time
	case reaperkv.ResultScaleIn:
		rep.LastScaleIn = d.Time
	}
	if d.New != d.Desired {
		pl.plan.Scale = append(pl.plan.Scale, reaper.ScaleChange{Role: r.Name, From: d.Desired, To: d.New, Index: pl.in.Scaling.DesiredIndex[r.Name], Reason: d.Reason})
	}
	if n := len(rep.History); n == 0 || rep.History[n-1].Result != d.Result || DecisionWhy(rep.History[n-1]) != DecisionWhy(d) || d.New != d.Desired {
		rep.History = append(rep.History, d)
		if len(rep.History) > maxScaleHistory {
			rep.History = rep.History[len(rep.History)-maxScaleHistory:]
		}
	}
	rep.Last = &d
	pl.autoscaled[r.Name] = rep
}

// decisionWhy is the code part of a decision's reason ("code: text").
func DecisionWhy(d reaperkv.ScaleDecision) string {
	code, _, _ := strings.Cut(d.Reason, ":")
	return code
}

// carryAutoscale starts this cycle's report of an autoscaled role from the
// last one: the window is kept, pruned to the stabilization window,
// unless the last report is older than gapIntervals cycles.
func (pl *planner) carryAutoscale(r *reaper.Role) *reaperkv.AutoscaleReport {
	a := r.Autoscale
	rep := &reaperkv.AutoscaleReport{Source: a.Metric.Source, Target: a.Target, Min: a.Min, Max: a.Max, WindowSince: pl.in.Now}
	rep.Metric = a.Metric.Name
	if a.Metric.Prometheus != nil {
		rep.Metric = a.Metric.Prometheus.Query
	}
	prev := pl.in.Autoscale[r.Name]
	if prev == nil {
		return rep
	}
	rep.LastScaleOut, rep.LastScaleIn = prev.LastScaleOut, prev.LastScaleIn
	rep.History = append([]reaperkv.ScaleDecision(nil), prev.History...)
	gap := prev.Last == nil || pl.in.Now.Sub(prev.Last.Time) > gapIntervals*pl.in.Config.Interval.D() || prev.Last.Time.After(pl.in.Now)
	if gap {
		return rep
	}
	rep.WindowSince = prev.WindowSince
	from := pl.in.Now.Add(-a.ScaleIn.Stabilization.D())
	for _, w := range prev.Window {
		if w.Time.After(from) {
			rep.Window = append(rep.Window, w)
		}
	}
	return rep
}

// hold is a decision that changes nothing; reset says the stabilization
// window starts again (the readings behind it were broken).
func (pl *planner) hold(rep *reaperkv.AutoscaleReport, d reaperkv.ScaleDecision, reset bool, why, format string, args ...any) reaperkv.ScaleDecision {
	if reset {
		rep.Window, rep.WindowSince = nil, pl.in.Now
	}
	d.Result, d.New = reaperkv.ResultHold, d.Desired
	d.Reason = why + ": " + fmt.Sprintf(format, args...)
	return d
}

// decide is target tracking with HPA's rules: recommended = ceil(serving
// x value / target), clamped to min and max; nothing within the
// tolerance; scale out at once, by at most max_step, not within its
// cooldown; scale in only to the highest recommendation over a whole
// stabilization window, by at most max_step, not within its cooldown,
// never while the role's value is at or above its target and never
// while the role has anything in flight. It holds (and the window starts
// again) whenever the reaper itself would hold: disarmed, paused, the
// role's Nova list in doubt, the metric in doubt (unreadable, too few
// reports, a value that cannot be a load).
func (pl *planner) decide(rs *roleServers, rep *reaperkv.AutoscaleReport) reaperkv.ScaleDecision {
	r := rs.role
	d := reaperkv.ScaleDecision{Time: pl.in.Now, Desired: pl.desired(r), Serving: pl.servingCount(rs)}
	// Read before the override: a count set by hand still scales in the
	// least loaded host, which needs each host's load.
	m := pl.metric(rs, d.Serving)
	d.Clamped, d.Ignored = firstFew(m.clamped), firstFew(m.ignored)
	if o, ok := pl.in.Scaling.Overrides[r.Name]; ok {
		rep.Override = &o
		d = pl.hold(rep, d, true, whyOverride, "the count was set by hand (%d, by %s at %s); `orchestrate scale %s --auto` gives it back to the autoscaler", o.Count, o.By, o.Time.UTC().Format(time.RFC3339), r.Name)
		d.Result = reaperkv.ResultOverride
		return d
	}
	if m.why == "" {
		d.Value, d.Reports = &m.value, m.reports
	}
	switch {
	case !pl.plan.Armed:
		return pl.hold(rep, d, true, whyNotArmed, "the reaper is not armed")
	case pl.plan.Paused:
		return pl.hold(rep, d, true, whyPaused, "the partition pause holds")
	case rs.doubt != "":
		return pl.hold(rep, d, true, whyDoubt, "%s", rs.doubt)
	case m.why != "":
		return pl.hold(rep, d, true, WhyMetric, "%s", m.why)
	case d.Serving == 0:
		return pl.hold(rep, d, true, whyNoServing, "no server of the role serves: nothing to measure")
	}
	var within bool
	d.Recommended, within = recommend(r.Autoscale, d.Serving, d.Desired, m)
	rep.Window = append(rep.Window, reaperkv.Recommendation{Time: d.Time, Count: d.Recommended})
	desc := describeReading(r.Autoscale, d, m)
	switch {
	case d.Recommended > d.Desired:
		return pl.scaleOutDecision(rs, rep, d, desc)
	case d.Recommended < d.Desired:
		return pl.scaleInDecision(rs, rep, d, desc)
	case within:
		return pl.hold(rep, d, false, whyTolerance, "%s (within %.0f%% of target)", desc, 100**r.Autoscale.Tolerance)
	}
	return pl.hold(rep, d, false, whyAtCount, "%s", desc)
}

// recommend is target tracking's count for a usable reading m of a role
// with serving servers (at least one) and a desired count: ceil(serving
// x value / target), worked out in floating point and clamped to [min,
// max] before it becomes a count, so a product no int holds is max, never
// a wrapped-around minimum. Within the tolerance, or while the role's
// value (or its lowest reading) is at or above the target, it is never
// below the desired count (clamped to [min, max]): no scale in on a load
// at target. Serving servers without a report yet (a new one) are taken,
// as HPA takes pods without metrics, to carry nothing when the load is
// above target and the target when below: neither a new server's silence
// nor a stale one's makes the role grow or shrink further. within says
// the value itself is within the tolerance.
func recommend(a *reaper.Autoscale, serving, desired int, m reading) (count int, within bool) {
	ratio := m.value / a.Target
	in := func(r float64) bool { return math.Abs(r-1) <= *a.Tolerance }
	adjusted := ratio
	if missing := serving - m.reports; a.Metric.Source == reaper.SourceConsul && missing > 0 {
		assumed := 0.0
		if ratio < 1 {
			assumed = a.Target
		}
		adjusted = (m.value*float64(m.reports) + assumed*float64(missing)) / float64(serving) / a.Target
	}
	keep := clamp(desired, a.Min, a.Max)
	if in(ratio) || in(adjusted) || (ratio > 1) != (adjusted > 1) || math.IsNaN(adjusted) {
		return keep, in(ratio)
	}
	// The epsilon keeps a product that is whole in exact arithmetic
	// (3 x 0.8 / 0.6 = 4) from rounding up past it.
	x := math.Ceil(float64(serving)*adjusted - 1e-9)
	count = a.Max
	if x < float64(a.Max) {
		count = max(a.Min, int(x)) // x is below max: an int holds it
	}
	if m.value >= a.Target || m.lowest >= a.Target {
		count = max(count, keep)
	}
	return count, false
}

// describeReading is a decision's account of its reading: the value, the
// servers it was read over, the target and the recommendation, and the
// reports clamped or ignored.
func describeReading(a *reaper.Autoscale, d reaperkv.ScaleDecision, m reading) string {
	desc := fmt.Sprintf("value %.4g over %d serving, target %.4g: recommends %d", m.value, d.Serving, a.Target, d.Recommended)
	if missing := d.Serving - m.reports; a.Metric.Source == reaper.SourceConsul && missing > 0 {
		desc = fmt.Sprintf("value %.4g over %d of %d serving (%d without a usable report), target %.4g: recommends %d", m.value, m.reports, d.Serving, missing, a.Target, d.Recommended)
	}
	if len(m.clamped) > 0 {
		desc += fmt.Sprintf("; %d report(s) above plausible_max %.4g taken at it (one node's report is one vote): %s", len(m.clamped), a.Metric.PlausibleMax, strings.Join(firstFew(m.clamped), ", "))
	}
	if len(m.ignored) > 0 {
		desc += fmt.Sprintf("; %d report(s) ignored, not a load (negative or not finite): %s", len(m.ignored), strings.Join(firstFew(m.ignored), ", "))
	}
	return desc
}

// scaleOutDecision decides on a recommendation above the desired count:
// at once, by at most max_step, unless its cooldown, the role's create
// backoff or a named scale-in still leaving holds it.
func (pl *planner) scaleOutDecision(rs *roleServers, rep *reaperkv.AutoscaleReport, d reaperkv.ScaleDecision, desc string) reaperkv.ScaleDecision {
	a := rs.role.Autoscale
	if since := d.Time.Sub(rep.LastScaleOut); since < a.ScaleOut.Cooldown.D() {
		return pl.hold(rep, d, false, whyCooldown, "%s; scale out cooldown %s, %s left", desc, a.ScaleOut.Cooldown.D(), (a.ScaleOut.Cooldown.D() - since).Round(time.Second))
	}
	if pl.backedOff(rs.role.Name) {
		return pl.hold(rep, d, false, whyBackoff, "%s; creates are backed off (quota, capacity or a failed create)", desc)
	}
	if named := pl.namedWaiting(rs); len(named) > 0 {
		return pl.hold(rep, d, false, whyNamed, "%s; hosts named for scale-in are still leaving (%s)", desc, strings.Join(named, ", "))
	}
	d.New = min(d.Recommended, d.Desired+a.ScaleOut.MaxStep)
	d.Result, d.Reason = reaperkv.ResultScaleOut, fmt.Sprintf("%s: %s; scale out %d -> %d", whyScaled, desc, d.Desired, d.New)
	return d
}

// scaleInDecision decides on a recommendation below the desired count:
// to the highest recommendation of a whole stabilization window, by at
// most max_step, not within its cooldown, never while the role has an
// operation in flight.
func (pl *planner) scaleInDecision(rs *roleServers, rep *reaperkv.AutoscaleReport, d reaperkv.ScaleDecision, desc string) reaperkv.ScaleDecision {
	a := rs.role.Autoscale
	stable := d.Recommended
	for _, w := range rep.Window {
		stable = max(stable, w.Count)
	}
	win := a.ScaleIn.Stabilization.D()
	if covered := d.Time.Sub(rep.WindowSince); covered < win {
		return pl.hold(rep, d, false, whyStabilizing, "%s; scale in waits for a whole stabilization window of readings (%s of %s)", desc, covered.Round(time.Second), win)
	}
	if stable >= d.Desired {
		return pl.hold(rep, d, false, whyHigherRec, "%s; the highest recommendation of the last %s is %d", desc, win, stable)
	}
	last := rep.LastScaleIn
	if rep.LastScaleOut.After(last) {
		last = rep.LastScaleOut
	}
	if since := d.Time.Sub(last); since < a.ScaleIn.Cooldown.D() {
		return pl.hold(rep, d, false, whyCooldown, "%s; scale in cooldown %s, %s left", desc, a.ScaleIn.Cooldown.D(), (a.ScaleIn.Cooldown.D() - since).Round(time.Second))
	}
	if len(rs.entries) > 0 {
		return pl.hold(rep, d, false, whyInFlight, "%s; the role has %d operation(s) in flight", desc, len(rs.entries))
	}
	d.New = max(stable, d.Desired-a.ScaleIn.MaxStep)
	d.Result, d.Reason = reaperkv.ResultScaleIn, fmt.Sprintf("%s: %s (highest over %s: %d); scale in %d -> %d", whyScaled, desc, win, stable, d.Desired, d.New)
	return d
}

func clamp(n, lo, hi int) int { return max(lo, min(hi, n)) }

// reading is a role's metric this cycle, as decide takes it.
type reading struct {
	// value is the role's per-node value; lowest the lowest node's value
	// that made it (the value itself for a role's value); reports how
	// many nodes' reports made it (source consul).
	value, lowest float64
	reports       int
	// why says why the metric is in doubt: no scaling either way ("" when
	// value is usable).
	why string
	// clamped lists the nodes' reports above plausible_max, taken at it;
	// ignored those that cannot be a load: "host (value)", by host.
	clamped, ignored []string
}

// loadLike: v can be a load (finite, not negative).
func LoadLike(v float64) bool { return v >= 0 && !math.IsInf(v, 1) }

// maxListed bounds the hosts a decision names in a list: its history is
// kept in the reaper's state key, which must stay small whatever the
// fleet's size.
const maxListed = 5

// firstFew is list, at most maxListed of it and how many more.
func firstFew(list []string) []string {
	if len(list) <= maxListed {
		return list
	}
	return append(list[:maxListed:maxListed], fmt.Sprintf("and %d more", len(list)-maxListed))
}

// metric is a role's value this cycle, with how many reports made it, or
// why it is in doubt. Each host's own value, when known, is kept for
// scale in's choice of the least loaded.
func (pl *planner) metric(rs *roleServers, serving int) reading {
	if rs.role.Autoscale.Metric.Source == reaper.SourcePrometheus {
		return pl.promMetric(rs.role)
	}
	return pl.consulMetric(rs, serving)
}

// promMetric is the role's value from its Prometheus query: in doubt
// when the query failed, or its value cannot be a load of the role
// (negative, not finite, above plausible_max).
func (pl *planner) promMetric(r *reaper.Role) reading {
	m := r.Autoscale.Metric
	rd, ok := pl.in.Metrics[r.Name]
	switch {
	case !ok:
		return reading{why: "no reading of the Prometheus query this cycle"}
	case rd.Err != "":
		return reading{why: rd.Err}
	case !LoadLike(rd.Value):
		return reading{why: fmt.Sprintf("the Prometheus query returned %v: not a load (negative or not finite)", rd.Value)}
	case rd.Value > m.PlausibleMax:
		return reading{why: fmt.Sprintf("the Prometheus query returned %.4g, above plausible_max %.4g: not a load one node of the role can carry", rd.Value, m.PlausibleMax)}
	}
	hosts := make(map[string]float64, len(rd.PerHost))
	for h, v := range rd.PerHost {
		if LoadLike(v) {
			hosts[h] = v
		}
	}
	pl.hostLoad[r.Name] = hosts
	return reading{value: rd.Value, lowest: rd.Value}
}

// consulMetric is the average of the fresh reports of the role's serving
// servers, each taken at most at plausible_max. A server's report is read
// from its host's own records: which role it counts for is the reaper's
// knowledge of the server (rs), never the role the report names, so a
// node cannot vote in another role. A report that cannot be a
// load (negative, not finite: none `orchestrate report-metric` writes) is
// no report. In doubt when fewer than half of the serving servers have a
// usable report.
func (pl *planner) consulMetric(rs *roleServers, serving int) reading {
	r := rs.role
	m := r.Autoscale.Metric
	fresh := map[string]float64{}
	var stale []string
	rd := reading{lowest: math.Inf(1)}
	sum := 0.0
	for _, s := range rs.all {
		if !pl.serves(rs, s) || pl.inEntry[s.ID] == reaper.StateDeleting {
			continue
		}
		rep, ok := pl.in.Scaling.Metrics[s.Name][m.Name]
		switch {
		case !ok:
			stale = append(stale, s.Name+" (none)")
			continue
		case rep.Time.After(pl.in.Now.Add(time.Minute)):
			// A report from the future: the node's clock is off, and the
			// report would stay fresh long after the node stopped.
			stale = append(stale, s.Name+" (dated in the future: its clock is off)")
			continue
		case pl.in.Now.Sub(rep.Time) > m.MaxAge.D():
			stale = append(stale, fmt.Sprintf("%s (%s old)", s.Name, pl.in.Now.Sub(rep.Time).Round(time.Second)))
			continue
		case !LoadLike(rep.Value):
			rd.ignored = append(rd.ignored, fmt.Sprintf("%s (%v)", s.Name, rep.Value))
			stale = append(stale, fmt.Sprintf("%s (%v: not a load)", s.Name, rep.Value))
			continue
		}
		v := rep.Value
		if v > m.PlausibleMax {
			rd.clamped = append(rd.clamped, fmt.Sprintf("%s (%.4g)", s.Name, v))
			v = m.PlausibleMax
		}
		fresh[s.Name] = v
		sum += v
		rd.lowest = min(rd.lowest, v)
	}
	pl.hostLoad[r.Name] = fresh
	sort.Strings(rd.clamped)
	sort.Strings(rd.ignored)
	rd.reports = len(fresh)
	if len(fresh) == 0 || 2*len(fresh) < serving {
		sort.Strings(stale)
		rd.why = fmt.Sprintf("only %d of %d serving servers reported %s within max_age %s (fewer than half): no scaling either way; missing: %s", len(fresh), serving, m.Name, m.MaxAge.D(), strings.Join(firstFew(stale), ", "))
		return rd
	}
	rd.value = sum / float64(len(fresh))
	if math.IsInf(sum, 1) {
		// Reports near the float's limit (a plausible_max set that
		// high): averaged without the sum that overflowed.
		rd.value = 0
		for _, v := range fresh {
			rd.value += v / float64(len(fresh))
		}
	}
	return rd
}

// namedWaiting lists the hosts named for the role's scale-in that are
// still its free servers.
func (pl *planner) namedWaiting(rs *roleServers) []string {
	var out []string
	for _, s := range rs.free {
		if _, ok := pl.in.Scaling.ScaleIn[rs.role.Name][s.Name]; ok {
			out = append(out, s.Name)
		}
	}
	sort.Strings(out)
	return out
}

// scaleInOrder orders the role's free servers for scale in: hosts named
// for it first (`orchestrate scale-in`), then worst state first, then the
// least loaded by the role's metric (where known), then the oldest, then
// by name.
// Protected hosts and servers in an unknown state are left out; the
// reasons they were are returned for the report.
func (pl *planner) scaleInOrder(rs *roleServers) (order []*reaper.Server, skipped []string) {
	named := pl.in.Scaling.ScaleIn[rs.role.Name]
	load := pl.hostLoad[rs.role.Name]
	for _, s := range rs.free {
		switch {
		case pl.statesOf[s.ID] == reaper.StateUnknown:
			continue
		case pl.protected(s.Name):
			skipped = append(skipped, s.Name+" is protected")
			continue
		}
		order = append(order, s)
	}
	loadOf := func(s *reaper.Server) float64 {
		if v, ok := load[s.Name]; ok {
			return v
		}
		return math.Inf(1) // unknown load: not taken for the least loaded
	}
	sort.SliceStable(order, func(i, j int) bool {
		a, b := order[i], order[j]
		_, na := named[a.Name]
		_, nb := named[b.Name]
		if na != nb {
			return na
		}
		if ra, rb := pl.statesOf[a.ID].Props().Rank, pl.statesOf[b.ID].Props().Rank; ra != rb {
			return ra < rb
		}
		if la, lb := loadOf(a), loadOf(b); la != lb {
			return la < lb
		}
		if !a.Created.Equal(b.Created) {
			return a.Created.Before(b.Created)
		}
		return a.Name < b.Name // never Nova's list order, which varies
	})
	return order, skipped
}

// protected: the host may not be chosen for scale in.
func (pl *planner) protected(name string) bool {
	_, ok := pl.in.Scaling.Protected[name]
	return ok
}
