package daemon_test

import (
	"fmt"
	"slices"
	"testing"
	"time"

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
