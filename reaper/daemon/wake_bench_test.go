package daemon_test

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/hashicorp/consul/api"
	"github.com/jiocloud/orchestrate/internal/consultest"
	"github.com/jiocloud/orchestrate/internal/testutil"
	"github.com/jiocloud/orchestrate/reaper"
	"github.com/jiocloud/orchestrate/reaper/daemon"
	"github.com/jiocloud/orchestrate/reaper/simcloud"
)

// BenchmarkWake measures what waking the cycle on change and at the plan's
// deadline buys and costs, beside the fixed interval (wake_on_change:
// false), on a real agent and the simulated cloud:
//
//   - latency: a node turns critical; from its grace's end (critical for
//     critical_grace, 1s) to the cloud's create call for its replacement,
//     median and p99 (the slowest, with 20 trials) of WAKE_BENCH_TRIALS
//     trials (half as many for the fixed interval). Waking runs with the
//     default interval (30s) and min_cycle_gap 1s (not the default 5s:
//     the grace must be at least the gap, or the gap, not the timer, is
//     measured; a real grace is minutes); the fixed interval runs at 3s,
//     so a trial takes seconds, not a minute: its figures are also given
//     in intervals (x 30s for the default). Each trial starts a fresh
//     reaper on a fresh KV and cloud and turns the node critical at a
//     phase spread over 3s after its first cycle (the fixed interval's
//     length; for waking, a third of the failures fall within the gap of
//     that cycle and wait for the gap), as a real failure falls anywhere.
//   - load: 2,000 nodes in 4 roles (dry run, interval 30s) while 1% of
//     the checks (20) flap, each toggled once a second, for
//     WAKE_BENCH_LOAD (default 60s) per mode: the agent's CPU seconds a
//     minute (/proc/<pid>/stat), the reaper's (this process's getrusage,
//     less a baseline run of the same flapping without a reaper: the
//     reaper runs in-process), and its cycles a minute.
func BenchmarkWake(b *testing.B) {
	trials := envInt(b, "WAKE_BENCH_TRIALS", 20)
	load := envDuration(b, "WAKE_BENCH_LOAD", 60*time.Second)
	b.Run("latency/wake-gap-1s", func(b *testing.B) {
		for b.Loop() {
			reportLatency(b, wakeLatencies(b, trials, "interval: 30s\nmin_cycle_gap: 1s", 30*time.Second, 3*time.Second), 30*time.Second)
		}
	})
	b.Run("latency/fixed-interval-3s", func(b *testing.B) {
		for b.Loop() {
			reportLatency(b, wakeLatencies(b, trials/2, "interval: 3s\nwake_on_change: false", 3*time.Second, 3*time.Second), 3*time.Second)
		}
	})
	b.Run("load-2000-nodes-1pct-flapping", func(b *testing.B) {
		for b.Loop() {
			wakeLoad(b, load)
		}
	})
}

// reportLatency reports the median and slowest latencies, in ms and in
// intervals.
func reportLatency(b *testing.B, ds []time.Duration, interval time.Duration) {
	slices.Sort(ds)
	med, p99 := ds[len(ds)/2], ds[(len(ds)*99+99)/100-1]
	b.ReportMetric(float64(med.Milliseconds()), "grace-end-to-create-p50-ms")
	b.ReportMetric(float64(p99.Milliseconds()), "grace-end-to-create-p99-ms")
	b.ReportMetric(med.Seconds()/interval.Seconds(), "p50-intervals")
	b.ReportMetric(float64(len(ds)), "trials")
}

// wakeLatencies runs n trials with the configuration's timing lines; the
// trials turn the node critical at phases spread over spread after the
// first cycle.
func wakeLatencies(b *testing.B, n int, timing string, interval, spread time.Duration) []time.Duration {
	const grace = time.Second
	agent := consultest.Start(b, consultest.Options{HCL: agentHCL})
	cfgText := `
dry_run: false
prefix: ` + prefix + `
` + timing + `
session_ttl: 2s
lock_delay: 1s
listen: ""
roles:
  - name: web
    desired: 3
    boot_grace: 1s
    critical_grace: 1s
    boot: {flavor: m1, image: debian, name_template: "web{n}"}
`
	var out []time.Duration
	for i := range n {
		phase := time.Duration(0)
		if spread > 0 {
			phase = spread * time.Duration(i) / time.Duration(n)
		}
		out = append(out, wakeTrial(b, agent.Client, parseConfig(b, cfgText), interval, phase)-grace)
	}
	return out
}

// wakeTrial starts a reaper on three healthy web servers, waits for its
// first cycle and phase more, turns web2 critical, and returns the time
// from then to the create of its replacement.
func wakeTrial(b *testing.B, c *api.Client, cfg *reaper.Config, interval, phase time.Duration) time.Duration {
	b.Helper()
	ctx := context.Background()
	if _, err := c.KV().DeleteTree(prefix+"/", nil); err != nil {
		b.Fatal(err)
	}
	sim := simcloud.New()
	for i := 1; i <= 3; i++ {
		name := fmt.Sprintf("web%d", i)
		sim.Add(reaper.Server{Name: name, Created: time.Now().Add(-24 * time.Hour), Metadata: map[string]string{reaper.MetaRole: "web"}})
		if err := simcloud.RegisterNode(ctx, c, name, "web", api.HealthPassing); err != nil {
			b.Fatal(err)
		}
	}
	arm(b, c)
	clock := &createClock{Cloud: sim}
	r, stop := runBenchReaper(b, cfg, c, clock)
	defer stop()
	waitFor(b, 20*time.Second, "the first cycle", func() bool { return r.Metrics().Cycles() >= 1 })
	time.Sleep(phase)
	began := time.Now()
	if err := simcloud.RegisterNode(ctx, c, "web2", "web", api.HealthCritical); err != nil {
		b.Fatal(err)
	}
	waitFor(b, 3*interval+10*time.Second, "the replacement's create", func() bool { return !clock.firstAfter(began).IsZero() })
	return clock.firstAfter(began).Sub(began)
}

// runBenchReaper runs a reaper until stop is called, which waits for it.
func runBenchReaper(b *testing.B, cfg *reaper.Config, c *api.Client, cloud reaper.Cloud) (*daemon.Reaper, func()) {
	b.Helper()
	r, err := daemon.New(cfg, c, cloud, slog.New(slog.NewTextHandler(io.Discard, nil)))
	if err != nil {
		b.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- r.Run(ctx) }()
	return r, func() {
		cancel()
		if err := <-done; err != nil {
			b.Errorf("reaper run: %v", err)
		}
	}
}

// wakeLoad registers 2,000 nodes, then flaps 20 of their checks for d
// without a reaper (the baseline), with one on the fixed interval, and
// with one waking on change, and reports each one's CPU a minute.
func wakeLoad(b *testing.B, d time.Duration) {
	const perRole = 500
	roles := []string{"db", "lb", "controller", "compute"}
	agent := consultest.Start(b, consultest.Options{HCL: agentHCL})
	c := agent.Client
	sim := simcloud.New()
	var nodes []string
	for _, r := range roles {
		for i := 1; i <= perRole; i++ {
			name := fmt.Sprintf("%s%d", r, i)
			sim.Add(reaper.Server{Name: name, Created: time.Now().Add(-time.Hour), Metadata: map[string]string{reaper.MetaRole: r}})
			nodes = append(nodes, name)
		}
	}
	registerAll(b, c, nodes, api.HealthPassing)
	var flapping []string
	for i := 0; i < len(nodes); i += 100 { // 1%
		flapping = append(flapping, nodes[i])
	}
	var cfgText strings.Builder
	cfgText.WriteString("dry_run: true\nprefix: " + prefix + "\ninterval: 30s\nsession_ttl: 10s\nlock_delay: 1s\nlisten: \"\"\n%s\nroles:\n")
	for _, r := range roles {
		fmt.Fprintf(&cfgText, "  - name: %s\n    desired: %d\n    critical_grace: 1h\n    boot: {flavor: m1, image: debian, name_template: \"%s{n}\"}\n", r, perRole, r)
	}
	perMin := func(cpu float64, took time.Duration) float64 { return cpu / took.Minutes() }
	run := func(mode string) (reaperCPU, agentCPU float64, cycles int, took time.Duration) {
		var r *daemon.Reaper
		stop := func() {}
		if mode != "" {
			r, stop = runBenchReaper(b, parseConfig(b, fmt.Sprintf(cfgText.String(), mode)), c, sim)
			waitFor(b, 60*time.Second, "the first cycle", func() bool { return r.Metrics().Cycles() >= 1 })
		}
		before, agentBefore, start := processCPU(b), testutil.ProcCPUSeconds(agent.Pid()), time.Now()
		cyclesBefore := 0
		if r != nil {
			cyclesBefore = r.Metrics().Cycles()
		}
		flap(b, c, flapping, d)
		took = time.Since(start)
		reaperCPU, agentCPU = processCPU(b)-before, testutil.ProcCPUSeconds(agent.Pid())-agentBefore
		if r != nil {
			cycles = r.Metrics().Cycles() - cyclesBefore
		}
		stop()
		return reaperCPU, agentCPU, cycles, took
	}
	baseCPU, baseAgent, _, baseTook := run("")
	for _, m := range []struct{ name, line string }{{"fixed", "wake_on_change: false"}, {"wake", "wake_on_change: true"}} {
		cpu, agentCPU, cycles, took := run(m.line)
		b.ReportMetric(perMin(cpu, took)-perMin(baseCPU, baseTook), m.name+"-reaper-cpu-s/min")
		b.ReportMetric(perMin(agentCPU, took), m.name+"-agent-cpu-s/min")
		b.ReportMetric(float64(cycles)/took.Minutes(), m.name+"-cycles/min")
	}
	b.ReportMetric(perMin(baseAgent, baseTook), "no-reaper-agent-cpu-s/min")
}

// registerAll registers the nodes with status, eight at a time.
func registerAll(b *testing.B, c *api.Client, nodes []string, status string) {
	jobs := make(chan string)
	var wg sync.WaitGroup
	var mu sync.Mutex
	var first error
	for range 8 {
		wg.Go(func() {
			for name := range jobs {
				role := strings.TrimRight(name, "0123456789")
				if err := simcloud.RegisterNode(context.Background(), c, name, role, status); err != nil {
					mu.Lock()
					first = cmpErr(first, err)
					mu.Unlock()
				}
			}
		})
	}
	for _, n := range nodes {
		jobs <- n
	}
	close(jobs)
	wg.Wait()
	if first != nil {
		b.Fatal(first)
	}
}

func cmpErr(a, b error) error {
	if a != nil {
		return a
	}
	return b
}

// flap toggles the nodes' checks for d, one node each 1s/len(nodes), so
// each flips once a second.
func flap(b *testing.B, c *api.Client, nodes []string, d time.Duration) {
	tick := time.NewTicker(time.Second / time.Duration(len(nodes)))
	defer tick.Stop()
	critical := map[string]bool{}
	for i, end := 0, time.Now().Add(d); time.Now().Before(end); i++ {
		<-tick.C
		n := nodes[i%len(nodes)]
		critical[n] = !critical[n]
		status := api.HealthPassing
		if critical[n] {
			status = api.HealthCritical
		}
		if err := simcloud.RegisterNode(context.Background(), c, n, strings.TrimRight(n, "0123456789"), status); err != nil {
			b.Fatal(err)
		}
	}
	for n, crit := range critical {
		if crit {
			if err := simcloud.RegisterNode(context.Background(), c, n, strings.TrimRight(n, "0123456789"), api.HealthPassing); err != nil {
				b.Fatal(err)
			}
		}
	}
}

// processCPU is this process's user and system CPU seconds (getrusage).
func processCPU(b *testing.B) float64 {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		b.Fatal(err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano()).Seconds()
}

// waitFor polls cond until it holds or limit passes (then fails b).
func waitFor(b *testing.B, limit time.Duration, what string, cond func() bool) {
	b.Helper()
	for start := time.Now(); !cond(); time.Sleep(10 * time.Millisecond) {
		if time.Since(start) > limit {
			b.Fatalf("timed out after %s waiting for %s", limit, what)
		}
	}
}

// envInt and envDuration read a benchmark's knob from the environment.
func envInt(b *testing.B, name string, def int) int {
	v := os.Getenv(name)
	if v == "" {
		return def
	}
	n, err := strconv.Atoi(v)
	if err != nil || n < 2 {
		b.Fatalf("%s=%q: want a whole number of at least 2", name, v)
	}
	return n
}

func envDuration(b *testing.B, name string, def time.Duration) time.Duration {
	v := os.Getenv(name)
	if v == "" {
		return def
	}
	d, err := time.ParseDuration(v)
	if err != nil || d <= 0 {
		b.Fatalf("%s=%q: want a positive duration", name, v)
	}
	return d
}
