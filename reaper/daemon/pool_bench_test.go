package daemon_test

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/jiocloud/orchestrate/internal/store"
	"github.com/jiocloud/orchestrate/internal/store/reaperkv"
	"github.com/jiocloud/orchestrate/reaper"
)

// BenchmarkReplacementTime measures the time from the reaper's decision to
// replace a critical node to its replacement serving, without a warm pool
// (the replacement is built: Nova boot, then Puppet) and with one (a ready
// standby is claimed), side by side, for the build time as a parameter
// (a third boot, two thirds Puppet). A real agent and the simulated cloud
// in simulated time: each step is one 30 s reaper cycle, so the figures
// are cycles and simulated seconds, independent of the machine's load.
func BenchmarkReplacementTime(b *testing.B) {
	for _, build := range []time.Duration{30 * time.Second, 90 * time.Second, 5 * time.Minute} {
		for _, size := range []int{0, 1} {
			b.Run(fmt.Sprintf("build=%s/pool=%d", build, size), func(b *testing.B) {
				var cycles int
				for b.Loop() {
					cycles = replacementCycles(b, build, size)
				}
				b.ReportMetric(float64(cycles), "cycles-decision-to-serving")
				b.ReportMetric(float64(cycles)*30, "sim-seconds-decision-to-serving")
			})
		}
	}
}

// replacementCycles kills web2 in a role of 3 (with a pool of size, once
// full) and counts the cycles from the one that decided its replacement
// (a create or a claim) to the one after which the replacement serves.
func replacementCycles(b *testing.B, build time.Duration, size int) int {
	w := newPoolWorld(b, size, build/3, build-build/3)
	if size > 0 {
		w.stepUntil(60, "a full pool", func() bool { return w.ready() == size })
	}
	w.kill("web2")
	var newName string
	w.stepUntil(20, "the replacement decided", func() bool {
		for _, a := range w.lastPlan.Actions {
			if (a.Op == reaper.OpCreate || a.Op == reaper.OpClaim) && a.Entry.OldName == "web2" {
				newName = a.Entry.NewName
				return true
			}
		}
		return false
	})
	return w.stepUntil(60, "the replacement serving", func() bool { return slices.Contains(w.serving(), newName) })
}

// BenchmarkRefreshTime measures an instance refresh of a role of 12 (a
// new image, `orchestrate refresh`), from the request to every server
// serving on the new spec, without a warm pool and with one of 2 standbys
// (claimed on the spec once rebuilt): with the default hourly budget
// (max_actions_per_hour 10, each replacement spends one) and the role's
// default batch (90% kept serving: one at a time); with a budget of 100;
// and with a budget of 100 and a request keeping 75% (batches of 3,
// max_in_flight 3). A real agent and the simulated cloud in simulated
// time: 30 s cycles, a build of 90 s (a third boot, two thirds Puppet), a
// drain of 1 min; the figures are cycles, simulated minutes and the fewest
// servers serving at any cycle's end.
func BenchmarkRefreshTime(b *testing.B) {
	for _, v := range []struct{ budget, minHealthy int }{{10, 0}, {100, 0}, {100, 75}} {
		for _, size := range []int{0, 2} {
			label := v.minHealthy
			if label == 0 {
				label = 90 // the role's refresh_min_healthy_percent
			}
			b.Run(fmt.Sprintf("servers=12/budget=%d/min-healthy=%d/pool=%d", v.budget, label, size), func(b *testing.B) {
				var cycles, least int
				for b.Loop() {
					cycles, least = refreshCycles(b, size, v.budget, v.minHealthy)
				}
				b.ReportMetric(float64(cycles), "cycles")
				b.ReportMetric(float64(cycles)*30/60, "sim-minutes")
				b.ReportMetric(float64(least), "least-serving")
			})
		}
	}
}

// refreshCycles builds a role of 12 (and its pool of size), changes its
// image and asks for a refresh keeping minHealthy% (0: the role's 90%),
// with max_actions_per_hour budget; it returns the cycles to every server
// serving on the new spec and the fewest serving at any cycle's end
// meanwhile.
func refreshCycles(b *testing.B, size, budget, minHealthy int) (cycles, least int) {
	build := 90 * time.Second
	cfg := strings.Replace(poolConfigOf(size, reaper.PoolRunning), "desired: 3", "desired: 12", 1) +
		"    on_drain_timeout: delete\n" // the world's nodes run no drain handler
	cfg = strings.Replace(cfg, "roles:", fmt.Sprintf("max_actions_per_hour: %d\nroles:", budget), 1)
	if minHealthy > 0 {
		cfg = strings.Replace(cfg, "roles:", "max_in_flight: 3\nroles:", 1)
	}
	w := newPoolWorldOf(b, cfg, build/3, build-build/3)
	w.stepUntil(120, "the role of 12 serving, the pool full", func() bool {
		return len(w.serving()) == 12 && w.ready() == size && len(journalKeys(w.t, w.c)) == 0
	})
	w.cfg.Roles[0].Boot.Image = "debian-13"
	w.newLeader()
	s, err := store.New(w.c, prefix)
	if err != nil {
		b.Fatal(err)
	}
	if err := s.PutRefresh(context.Background(), "web", reaperkv.RefreshRecord{Time: w.clock(), By: "bench", Reason: "new image", MinHealthyPercent: minHealthy}, 0); err != nil {
		b.Fatal(err)
	}
	least = 12
	cycles = w.stepUntil(400, "every server serving on the new spec", func() bool {
		least = min(least, len(w.serving()))
		return w.onSpec() == 12 && len(w.serving()) == 12 && len(journalKeys(w.t, w.c)) == 0
	})
	return cycles, least
}

// onSpec counts the role's members built from its boot spec as configured.
func (w *poolWorld) onSpec() int {
	n, spec := 0, w.cfg.Roles[0].Boot.Digest()
	for _, s := range w.sim.Servers() {
		if _, standby := s.Metadata[reaper.MetaStandby]; !standby && s.Metadata[reaper.MetaSpec] == spec {
			n++
		}
	}
	return n
}
