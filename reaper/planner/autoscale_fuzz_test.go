package planner

import (
	"fmt"
	"testing"
	"time"

	"github.com/jiocloud/orchestrate/internal/store/reaperkv"
	"github.com/jiocloud/orchestrate/internal/store/schema"
	"github.com/jiocloud/orchestrate/reaper"
)

// FuzzAutoscaleDecision drives the planner's autoscaling decision (pure:
// no I/O) with arbitrary readings and counts: the nodes' reports (consul)
// or the role's value and host values (prometheus), the target, the
// plausible maximum, the tolerance, how many servers serve and report,
// min, max, the desired count and a stabilization window whose scale in
// is otherwise allowed. Whatever they are, the decision never panics,
// never leaves [min, max], never scales in when every reading is at or
// above the target, and a Prometheus value that cannot be a load of the
// role holds it as a metric in doubt. The seeds (testdata/fuzz/
// FuzzAutoscaleDecision, run by plain go test) are the cases of issue 26:
// a huge value at max, negative, NaN, ±Inf, 0, a tiny target, a product
// no int holds. `make test` fuzzes it for a bounded time.
func FuzzAutoscaleDecision(f *testing.F) {
	f.Fuzz(func(t *testing.T, prom bool, v0, v1, v2, v3, target, plausible, tolerance float64, serving, reported, lo, span, desired, past int) {
		norm := func(v, n int) int { return (v%n + n) % n }
		a := &reaper.Autoscale{Metric: reaper.MetricSource{Source: reaper.SourceConsul, Name: "load", PlausibleMax: plausible},
			Target: target, Tolerance: &tolerance, Min: norm(lo, 10) + 1}
		a.Max = a.Min + norm(span, 10)
		if prom {
			a.Metric = reaper.MetricSource{Source: reaper.SourcePrometheus, PlausibleMax: plausible,
				Prometheus: &reaper.PrometheusSource{URL: "http://127.0.0.1:9090", Query: "avg(load)", Timeout: reaper.Duration(time.Second)}}
		}
		a.ApplyDefaults()
		c := reaper.DefaultConfig()
		c.Roles = []reaper.Role{{Name: "web", Desired: a.Min, Autoscale: a, Boot: reaper.BootSpec{Flavor: "m1", Image: "debian", NameTemplate: "web{n}"}}}
		c.Roles[0].ApplyDefaults()
		if err := c.Validate(); err != nil {
			t.Skip(err) // refused at start: never planned with
		}
		want := a.Min + norm(desired, a.Max-a.Min+1)
		n := norm(serving, 12) + 1
		vals := []float64{v0, v1, v2, v3}
		in := reaper.Input{Now: t0, Config: c, Armed: true, Desired: map[string]int{"web": want},
			Scaling: schema.Scaling{Metrics: map[string]map[string]schema.MetricReport{}},
			// A whole window behind, no change for an hour: a scale in
			// is held by nothing but the readings.
			Autoscale: map[string]*reaperkv.AutoscaleReport{"web": window(t0.Add(-time.Hour), a.Min+norm(past, a.Max-a.Min+1))}}
		var readings []float64
		for i := range n {
			name := fmt.Sprintf("web%d", i+1)
			in.Servers = append(in.Servers, srv(name, day))
			in.Checks = append(in.Checks, pass(name))
			if i < norm(reported, n+1) {
				v := vals[i%len(vals)]
				in.Scaling.Metrics[name] = map[string]schema.MetricReport{"load": {Value: v, Time: t0}}
				readings = append(readings, v)
			}
		}
		if prom {
			in.Metrics = map[string]reaper.MetricReading{"web": {Value: v0, PerHost: map[string]float64{"web1": v1, "web2": v2, "web3": v3}}}
			readings = []float64{v0}
		}

		p := Plan(in)
		rep := p.Roles[0].Autoscale
		if rep == nil || rep.Last == nil {
			t.Fatal("no decision")
		}
		d := rep.Last
		where := fmt.Sprintf("decision %s %d -> %d (recommended %d): %s", d.Result, d.Desired, d.New, d.Recommended, d.Reason)
		if d.New < a.Min || d.New > a.Max || (d.Recommended != 0 && (d.Recommended < a.Min || d.Recommended > a.Max)) {
			t.Fatalf("outside min %d .. max %d: %s", a.Min, a.Max, where)
		}
		for _, sc := range p.Scale {
			if sc.To < a.Min || sc.To > a.Max {
				t.Fatalf("plan scales to %d, outside min %d .. max %d: %s", sc.To, a.Min, a.Max, where)
			}
		}
		atOrAbove := true
		for _, v := range readings {
			atOrAbove = atOrAbove && v >= target
		}
		if atOrAbove && (d.Result == reaperkv.ResultScaleIn || d.New < d.Desired) {
			t.Fatalf("scale in with every reading %v at or above target %v: %s", readings, target, where)
		}
		if prom && (!LoadLike(v0) || v0 > a.Metric.PlausibleMax) && (d.Result != reaperkv.ResultHold || DecisionWhy(*d) != WhyMetric) {
			t.Fatalf("prometheus value %v (plausible_max %v) is not in doubt: %s", v0, a.Metric.PlausibleMax, where)
		}
	})
}
