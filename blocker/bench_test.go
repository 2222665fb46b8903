package blocker

import (
	"context"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hashicorp/consul/api"

	"github.com/jiocloud/orchestrate/internal/consultest"
	"github.com/jiocloud/orchestrate/internal/testutil"
)

// benchTrials is how many times each latency benchmark lets the fifth
// instance pass; p99 of 50 samples is their maximum.
const benchTrials = 50

// trialGap separates the passes of one latency benchmark's trials, so that
// each is the only change in the catalog when it happens.
const trialGap = 100 * time.Millisecond

// BenchmarkLatency measures the time from the Nth (5th) instance's check
// turning passing to the blocker's return, against a real agent, with
// polling (--no-watch, as before watching) and watching, side by side:
//
//   - no-watch/interval=500ms: polls every 500 ms, and the check passes
//     0-1 s after the blocker started;
//   - no-watch/defaults, watch/defaults: the command's defaults (500 ms
//     doubling to 5 s; watching holds a blocking query and polls DNS only
//     every 5 s), and the check passes 0-4 s after the blocker started, so
//     polling trials land in the 1 s and 2 s intervals of the backoff;
//   - .../waited-30s: the same, the check passing 30-34 s after the
//     blocker started, where polling sleeps its 5 s maximum.
//
// The trials of a benchmark run at once, each with a blocker of its own
// waiting for a service of its own (web-0 ... web-99, five instances, the
// fifth critical), so trials that waited 30 s take 30 s in all, not 25
// minutes; the two waited-30s benchmarks share one batch, their trials
// alternating. Each blocker starts so that its check passes when its trial
// is due, and the passes come trialGap apart, one at a time. The time
// includes the agent's HTTP API call that passes the check, its sync to
// the catalog, and the blocker's wake-up and DNS round trip.
//
//	go test -run '^$' -bench Latency -benchtime 1x ./blocker
func BenchmarkLatency(b *testing.B) {
	a := consultest.Start(b, consultest.Options{})
	for i := range 2 * benchTrials {
		for j := 1; j <= 5; j++ {
			register(b, a, service{id: fmt.Sprintf("web-%d-%d", i, j), name: fmt.Sprintf("web-%d", i), port: 8000 + j, ttl: api.HealthPassing})
		}
	}
	config := func(watch bool, maxInterval time.Duration) Config {
		return Config{DNS: a.DNSAddr, Domain: "consul.", Mode: Addressable, Watch: watch, Timeout: 2 * time.Minute,
			Interval: DefaultInterval, MaxInterval: maxInterval}
	}
	const spread = 4 * time.Second
	for _, bc := range []struct {
		name   string
		cfg    Config
		spread time.Duration
	}{
		{"no-watch/interval=500ms", config(false, DefaultInterval), time.Second},
		{"no-watch/defaults", config(false, DefaultMaxInterval), spread},
		{"watch/defaults", config(true, DefaultMaxInterval), spread},
	} {
		b.Run(bc.name, func(b *testing.B) {
			var lat []time.Duration
			for range b.N {
				lat = append(lat, latencyTrials(b, a, slices.Repeat([]Config{bc.cfg}, benchTrials), 0, bc.spread)...)
			}
			reportLatency(b, lat)
		})
	}

	// Both waited-30s benchmarks from one batch, run by whichever comes
	// first (-bench may select either alone).
	var polled, watched []time.Duration
	waited := func(b *testing.B) {
		if polled != nil {
			return
		}
		var cfgs []Config
		for range benchTrials {
			cfgs = append(cfgs, config(false, DefaultMaxInterval), config(true, DefaultMaxInterval))
		}
		for i, l := range latencyTrials(b, a, cfgs, 30*time.Second, spread) {
			if i%2 == 0 {
				polled = append(polled, l)
			} else {
				watched = append(watched, l)
			}
		}
	}
	b.Run("no-watch/defaults/waited-30s", func(b *testing.B) { waited(b); reportLatency(b, polled) })
	b.Run("watch/defaults/waited-30s", func(b *testing.B) { waited(b); reportLatency(b, watched) })
}

func reportLatency(b *testing.B, lat []time.Duration) {
	lat = slices.Sorted(slices.Values(lat))
	q := func(p float64) time.Duration { return lat[int(p*float64(len(lat)-1)+0.5)] }
	b.ReportMetric(float64(q(0.5).Microseconds())/1000, "median-ms")
	b.ReportMetric(float64(q(0.99).Microseconds())/1000, "p99-ms")
	b.ReportMetric(float64(lat[len(lat)-1].Microseconds())/1000, "max-ms")
	b.ReportMetric(0, "ns/op")
}

// latencyTrials runs one blocker per cfgs[i] at once, blocker i waiting for
// web-i:5, and passes web-i's fifth check waited+rand[0,spread) after
// blocker i started, trialGap after the previous trial's pass. It returns
// each trial's time from its pass to its blocker's return.
func latencyTrials(b *testing.B, a *consultest.Agent, cfgs []Config, waited, spread time.Duration) []time.Duration {
	b.Helper()
	n := len(cfgs)
	for i := range n {
		if err := a.Client.Agent().UpdateTTL(fmt.Sprintf("web-%d-5-ttl", i), "", api.HealthCritical); err != nil {
			b.Fatal(err)
		}
	}
	for i := range n {
		waitCatalog(b, a, fmt.Sprintf("web-%d", i), "", 4)
	}
	t0 := time.Now().Add(waited + spread)
	passAt := make([]time.Time, n)
	type outcome struct {
		at  time.Time
		err error
	}
	doneCh := make([]chan outcome, n)
	for i, c := range cfgs {
		passAt[i] = t0.Add(time.Duration(i) * trialGap)
		startAt := passAt[i].Add(-waited - rand.N(spread))
		doneCh[i] = make(chan outcome, 1)
		c.Requirements = []Requirement{{Service: fmt.Sprintf("web-%d", i), Count: 5}}
		var consul *api.Client
		if c.Watch {
			consul = benchClient(b, a.HTTPAddr, nil)
		}
		bl, err := New(c, consul, nil, nil)
		if err != nil {
			b.Fatal(err)
		}
		go func() {
			time.Sleep(time.Until(startAt)) // its start on the schedule
			_, err := bl.Wait(context.Background())
			doneCh[i] <- outcome{time.Now(), err}
		}()
	}
	passed := make([]time.Time, n)
	for i := range n {
		time.Sleep(time.Until(passAt[i])) // the schedule of checks turning passing
		passed[i] = time.Now()
		if err := a.Client.Agent().UpdateTTL(fmt.Sprintf("web-%d-5-ttl", i), "", api.HealthPassing); err != nil {
			b.Fatal(err)
		}
	}
	lat := make([]time.Duration, n)
	for i := range n {
		w := <-doneCh[i]
		if w.err != nil {
			b.Fatalf("blocker %d: %v", i, w.err)
		}
		if w.at.Before(passed[i]) {
			b.Fatalf("blocker %d returned before its fifth instance passed", i)
		}
		lat[i] = w.at.Sub(passed[i])
	}
	return lat
}

// benchClient is a Consul API client for addr as the command builds one
// (api.DefaultConfig, no token), its connections from src when not nil: a
// loopback address of its own stands for another node, so hundreds of
// blockers stay within the agent's default per-client connection limit
// (limits.http_max_conns_per_client, 200) as they would across hosts.
func benchClient(b *testing.B, addr string, src net.IP) *api.Client {
	b.Helper()
	cfg := api.DefaultConfig()
	cfg.Address, cfg.Scheme, cfg.Token, cfg.TokenFile = addr, "http", "", ""
	if src != nil {
		d := &net.Dialer{LocalAddr: &net.TCPAddr{IP: src}, Timeout: 5 * time.Second}
		cfg.Transport = &http.Transport{DialContext: d.DialContext, MaxIdleConnsPerHost: 2}
	}
	c, err := api.NewClient(cfg)
	if err != nil {
		b.Fatal(err)
	}
	return c
}

// BenchmarkWaitingFootprint runs the real binary waiting, with the default
// intervals and watching its agent's HTTP API, for a service that never
// appears, and samples its resident
// memory every second and its CPU time over the window (after a 2 s
// warm-up). BLOCKER_BENCH_WAIT sets the window (default 20s).
//
//	BLOCKER_BENCH_WAIT=20s go test -run '^$' -bench Footprint -benchtime 1x ./blocker
func BenchmarkWaitingFootprint(b *testing.B) {
	window := 20 * time.Second
	if s := os.Getenv("BLOCKER_BENCH_WAIT"); s != "" {
		d, err := time.ParseDuration(s)
		if err != nil {
			b.Fatalf("BLOCKER_BENCH_WAIT: %v", err)
		}
		window = d
	}
	bin := binary(b)
	a := consultest.Start(b, consultest.Options{})
	hz := clockTicks(b)
	for range b.N {
		cmd := exec.Command(bin, "--dns", a.DNSAddr, "--consul-addr", a.HTTPAddr, "--timeout", "0", "--quiet", "never-registered")
		if err := cmd.Start(); err != nil {
			b.Fatal(err)
		}
		pid := cmd.Process.Pid
		time.Sleep(2 * time.Second) // past its start: the steady state is measured
		ticks0, start := cpuTicks(b, pid), time.Now()
		var maxRSS int64
		for time.Since(start) < window {
			maxRSS = max(maxRSS, statusKiB(b, pid, "VmRSS"))
			time.Sleep(time.Second) // RSS sampled once a second
		}
		ticks1, elapsed := cpuTicks(b, pid), time.Since(start)
		hwm := statusKiB(b, pid, "VmHWM")
		cmd.Process.Kill()
		cmd.Wait()
		b.ReportMetric(float64(maxRSS)/1024, "rss-MiB")
		b.ReportMetric(float64(hwm)/1024, "peak-rss-MiB")
		b.ReportMetric(100*float64(ticks1-ticks0)/float64(hz)/elapsed.Seconds(), "cpu-%")
		b.ReportMetric(elapsed.Seconds(), "window-s")
		b.ReportMetric(0, "ns/op")
	}
}

func clockTicks(b *testing.B) int64 {
	out, err := exec.Command("getconf", "CLK_TCK").Output()
	if err != nil {
		return 100 // the Linux USER_HZ on every common architecture
	}
	n, err := strconv.ParseInt(strings.TrimSpace(string(out)), 10, 64)
	if err != nil || n <= 0 {
		b.Fatalf("getconf CLK_TCK: %q", out)
	}
	return n
}

// cpuTicks is utime+stime of pid, from /proc/PID/stat.
func cpuTicks(b *testing.B, pid int) int64 {
	data, err := os.ReadFile(filepath.Join("/proc", strconv.Itoa(pid), "stat"))
	if err != nil {
		b.Fatal(err)
	}
	// Fields after the parenthesised command name; utime and stime are
	// fields 14 and 15 of the whole line.
	rest := string(data[strings.LastIndexByte(string(data), ')')+2:])
	f := strings.Fields(rest)
	u, _ := strconv.ParseInt(f[11], 10, 64)
	s, _ := strconv.ParseInt(f[12], 10, 64)
	return u + s
}

// statusKiB reads a "Key: N kB" line of /proc/PID/status.
func statusKiB(b *testing.B, pid int, key string) int64 {
	data, err := os.ReadFile(filepath.Join("/proc", strconv.Itoa(pid), "status"))
	if err != nil {
		b.Fatal(err)
	}
	for _, l := range strings.Split(string(data), "\n") {
		if v, ok := strings.CutPrefix(l, key+":"); ok {
			n, _ := strconv.ParseInt(strings.Fields(v)[0], 10, 64)
			return n
		}
	}
	b.Fatalf("no %s in /proc/%d/status", key, pid)
	return 0
}

// BenchmarkWaitingLoad counts on the wire what one waiting blocker asks of
// its agent while the catalog does not change (the service has one
// instance, the blocker wants two): DNS queries through a counting DNS
// forwarder, HTTP requests through a counting proxy, over a 30 s window
// after a 10 s warm-up in which polling's backoff reaches its maximum. The
// three blockers run at once, each behind its own forwarder and proxy:
// polling with the defaults (--no-watch), watching with the defaults (5 s
// max interval, 5 min wait), and watching with a 10 s wait, which shows
// the one request per wait that a 30 s window cannot show for 5 min.
// Counts, not times: they do not depend on the machine's load.
//
//	go test -run '^$' -bench WaitingLoad -benchtime 1x ./blocker
func BenchmarkWaitingLoad(b *testing.B) {
	const warmup, window = 10 * time.Second, 30 * time.Second
	a := consultest.Start(b, consultest.Options{})
	register(b, a, service{id: "load-1", name: "load", port: 8101})
	waitCatalog(b, a, "load", "", 1)
	cases := []struct {
		name  string
		watch bool
		wait  time.Duration
	}{
		{"no-watch/defaults", false, 0},
		{"watch/defaults", true, 0},
		{"watch/wait=10s", true, 10 * time.Second},
	}
	type counter struct {
		dns  *dnsForwarder
		http *httpCounter
	}
	counters := make([]counter, len(cases))
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	for i, c := range cases {
		counters[i] = counter{forwardDNS(b, a.DNSAddr, 0), countHTTP(b, a.HTTPAddr)}
		var consul *api.Client
		if c.watch {
			consul = benchClient(b, counters[i].http.Addr, nil)
		}
		bl, err := New(Config{DNS: counters[i].dns.Addr, Domain: "consul.", Mode: Addressable, Watch: c.watch, WatchWait: c.wait,
			Interval: DefaultInterval, MaxInterval: DefaultMaxInterval, Requirements: []Requirement{{Service: "load", Count: 2}}}, consul, nil, nil)
		if err != nil {
			b.Fatal(err)
		}
		wg.Go(func() { bl.Wait(ctx) })
	}
	time.Sleep(warmup) // past the blockers' start: the window counts the steady state
	type count struct{ dns, http int64 }
	at := func() []count {
		cs := make([]count, len(counters))
		for i, c := range counters {
			cs[i] = count{c.dns.Queries(), c.http.Requests()}
		}
		return cs
	}
	first := at()
	time.Sleep(window) // the window measured
	last := at()
	cancel()
	wg.Wait()
	perMin := func(n int64) float64 { return float64(n) / window.Minutes() }
	for i, c := range cases {
		b.Run(c.name, func(b *testing.B) {
			b.ReportMetric(float64(first[i].dns), "dns-q-warmup")
			b.ReportMetric(float64(first[i].http), "http-req-warmup")
			b.ReportMetric(perMin(last[i].dns-first[i].dns), "dns-q/min")
			b.ReportMetric(perMin(last[i].http-first[i].http), "http-req/min")
			b.ReportMetric(0, "ns/op")
		})
	}
}

// BenchmarkAgent500Waiting measures a client agent (and its server) while
// 500 blockers wait on it at once, as 500 booting nodes' Puppet runs would
// on their agents' shared servers, here all on one agent: the agent's and
// the server's CPU (% of one core, from /proc/PID/stat over 10 s) and
// resident memory, idle, then with 500 blockers watching (500 blocking
// queries held), then with 500 polling (--no-watch). The blockers want two
// instances of one of ten services that have one each, so none is met,
// and run in this process with the command's defaults; each watching one
// connects from one of five loopback addresses, standing for other nodes,
// so the agent's default limit of 200 connections per client address
// holds (a blocker that could not watch fails the benchmark). The
// blockers start 4 ms apart, as nodes booting together.
//
//	go test -run '^$' -bench Agent500Waiting -benchtime 1x ./blocker
func BenchmarkAgent500Waiting(b *testing.B) {
	const blockers, window = 500, 10 * time.Second
	server := consultest.Start(b, consultest.Options{})
	agent := consultest.Start(b, consultest.Options{JoinLAN: server.SerfLANAddr()})
	for i := range 10 {
		register(b, agent, service{id: fmt.Sprintf("svc-%d-1", i), name: fmt.Sprintf("svc-%d", i), port: 8201})
	}
	for i := range 10 {
		waitCatalog(b, agent, fmt.Sprintf("svc-%d", i), "", 1)
	}
	hz := clockTicks(b)
	type usage struct{ agentCPU, serverCPU, agentRSS, serverRSS, agentFDs float64 }
	measure := func(b *testing.B) usage {
		a0, s0, t0 := cpuTicks(b, agent.Pid()), cpuTicks(b, server.Pid()), time.Now()
		time.Sleep(window) // the window measured
		a1, s1, d := cpuTicks(b, agent.Pid()), cpuTicks(b, server.Pid()), time.Since(t0)
		pct := func(t int64) float64 { return 100 * float64(t) / float64(hz) / d.Seconds() }
		fds, _ := os.ReadDir(filepath.Join("/proc", strconv.Itoa(agent.Pid()), "fd"))
		return usage{pct(a1 - a0), pct(s1 - s0), float64(statusKiB(b, agent.Pid(), "VmRSS")) / 1024,
			float64(statusKiB(b, server.Pid(), "VmRSS")) / 1024, float64(len(fds))}
	}
	waiting := func(b *testing.B, watch bool) usage {
		var logs testutil.SyncBuffer
		log := slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelWarn}))
		ctx, cancel := context.WithCancel(context.Background())
		var wg sync.WaitGroup
		for k := range blockers {
			var consul *api.Client
			if watch {
				consul = benchClient(b, agent.HTTPAddr, net.IPv4(127, 0, 0, byte(2+k%5)))
			}
			bl, err := New(Config{DNS: agent.DNSAddr, Domain: "consul.", Mode: Addressable, Watch: watch,
				Interval: DefaultInterval, MaxInterval: DefaultMaxInterval,
				Requirements: []Requirement{{Service: fmt.Sprintf("svc-%d", k%10), Count: 2}}}, consul, log, nil)
			if err != nil {
				b.Fatal(err)
			}
			wg.Go(func() { bl.Wait(ctx) })
			time.Sleep(4 * time.Millisecond) // 4 ms apart, as nodes booting together
		}
		// Polling's backoff reaches its 5 s maximum 7.5 s after the start.
		time.Sleep(8 * time.Second)
		u := measure(b)
		cancel()
		wg.Wait()
		if n := strings.Count(logs.String(), "cannot watch"); n > 0 {
			b.Fatalf("%d blockers could not watch:\n%s", n, shorten(logs.String(), 2000))
		}
		return u
	}
	report := func(b *testing.B, u usage) {
		b.ReportMetric(u.agentCPU, "agent-cpu-%")
		b.ReportMetric(u.agentRSS, "agent-rss-MiB")
		b.ReportMetric(u.agentFDs, "agent-fds")
		b.ReportMetric(u.serverCPU, "server-cpu-%")
		b.ReportMetric(u.serverRSS, "server-rss-MiB")
		b.ReportMetric(0, "ns/op")
	}
	idle := measure(b)
	b.Run("idle", func(b *testing.B) { report(b, idle) })
	b.Run("watch", func(b *testing.B) { report(b, waiting(b, true)) })
	b.Run("no-watch", func(b *testing.B) { report(b, waiting(b, false)) })
}
