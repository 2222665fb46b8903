package daemon_test

import (
	"fmt"
	"testing"
	"time"
)

// BenchmarkAutoscaleReaction measures, in reaper cycles (30 s each), the
// time from the cycle whose reading first crosses the target to the first
// new server serving and to the role serving at its new count, for the
// simulated cloud's build time (boot plus Puppet) as a parameter. A real
// agent and the simulated cloud in simulated time, as in the autoscaling
// tests: the total load steps from 1.2 to 3.0 on 2 servers (target 0.6), so the
// role must grow to 5 (2 -> 4 at once, 4 -> 5 after the 3 min cooldown).
func BenchmarkAutoscaleReaction(b *testing.B) {
	for _, boot := range []time.Duration{0, 30 * time.Second, 90 * time.Second, 5 * time.Minute} {
		b.Run(fmt.Sprintf("build=%s", boot), func(b *testing.B) {
			var first, full int
			for b.Loop() {
				w := newScaleWorld(b, scaleConfig, 2)
				w.sim.BootDelay = boot
				w.load.SetTotal(2 * 0.6)
				for range 3 {
					w.step()
				}
				w.load.SetTotal(3.0)
				first = w.stepUntil(60, "a new server serving", func() bool { return w.serving() > 2 })
				full = first + w.stepUntil(60, "5 servers serving", func() bool { return w.desired() == 5 && w.serving() == 5 })
			}
			b.ReportMetric(float64(first), "cycles-to-first-new-serving")
			b.ReportMetric(float64(full), "cycles-to-count-serving")
			b.ReportMetric(float64(full)*30, "sim-seconds-to-count")
		})
	}
}
