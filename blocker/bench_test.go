package blocker

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/consul/api"

	"github.com/jiocloud/orchestrate/internal/consultest"
)

// benchTrials is how many times each latency benchmark lets the fifth
// instance pass; p99 of 50 samples is their maximum.
const benchTrials = 50

// BenchmarkLatency measures the time from the Nth (5th) instance's check
// turning passing to the blocker's return, against a real agent:
//
//   - interval=500ms/no-backoff: polls every 500 ms (the default interval)
//     and the check passes 0-1 s after the blocker started;
//   - defaults: the default 500 ms doubling to 5 s, and the check passes
//     0-4 s after the blocker started, so some trials land in the 1 s and
//     2 s intervals of the backoff.
//
// The time includes the agent's HTTP API call that passes the check, its
// sync to the catalog and the blocker's DNS round trip.
//
//	go test -run '^$' -bench Latency -benchtime 1x ./blocker
func BenchmarkLatency(b *testing.B) {
	for _, bc := range []struct {
		name      string
		max       time.Duration
		passAfter time.Duration
	}{
		{"interval=500ms/no-backoff", DefaultInterval, time.Second},
		{"defaults", DefaultMaxInterval, 4 * time.Second},
	} {
		b.Run(bc.name, func(b *testing.B) {
			a := consultest.Start(b, consultest.Options{})
			for i := 1; i <= 5; i++ {
				register(b, a, service{id: fmt.Sprintf("web-%d", i), name: "web", port: 8000 + i, ttl: api.HealthPassing})
			}
			cfg := Config{DNS: a.DNSAddr, Domain: "consul.", Mode: Addressable, Timeout: time.Minute,
				Interval: DefaultInterval, MaxInterval: bc.max, Requirements: []Requirement{{Service: "web", Count: 5}}}
			var lat []time.Duration
			for range b.N {
				for range benchTrials {
					lat = append(lat, latencyTrial(b, a, cfg, rand.N(bc.passAfter)))
				}
			}
			slices.Sort(lat)
			q := func(p float64) time.Duration { return lat[int(p*float64(len(lat)-1)+0.5)] }
			b.ReportMetric(float64(q(0.5).Microseconds())/1000, "median-ms")
			b.ReportMetric(float64(q(0.99).Microseconds())/1000, "p99-ms")
			b.ReportMetric(float64(lat[len(lat)-1].Microseconds())/1000, "max-ms")
			b.ReportMetric(0, "ns/op")
		})
	}
}

func latencyTrial(b *testing.B, a *consultest.Agent, cfg Config, passAfter time.Duration) time.Duration {
	b.Helper()
	if err := a.Client.Agent().UpdateTTL("web-5-ttl", "", api.HealthCritical); err != nil {
		b.Fatal(err)
	}
	waitCatalog(b, a, "web", "", 4)
	bl, err := New(cfg, nil, nil, nil)
	if err != nil {
		b.Fatal(err)
	}
	type waited struct {
		at  time.Time
		err error
	}
	doneCh := make(chan waited, 1)
	go func() {
		_, err := bl.Wait(context.Background())
		doneCh <- waited{time.Now(), err}
	}()
	time.Sleep(passAfter)
	passed := time.Now()
	if err := a.Client.Agent().UpdateTTL("web-5-ttl", "", api.HealthPassing); err != nil {
		b.Fatal(err)
	}
	w := <-doneCh
	if w.err != nil {
		b.Fatalf("blocker: %v", w.err)
	}
	if w.at.Before(passed) {
		b.Fatalf("blocker returned before the fifth instance passed")
	}
	return w.at.Sub(passed)
}

// BenchmarkWaitingFootprint runs the real binary waiting, with the default
// intervals, for a service that never appears, and samples its resident
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
		cmd := exec.Command(bin, "--dns", a.DNSAddr, "--timeout", "0", "--quiet", "never-registered")
		if err := cmd.Start(); err != nil {
			b.Fatal(err)
		}
		pid := cmd.Process.Pid
		time.Sleep(2 * time.Second)
		ticks0, start := cpuTicks(b, pid), time.Now()
		var maxRSS int64
		for time.Since(start) < window {
			maxRSS = max(maxRSS, statusKiB(b, pid, "VmRSS"))
			time.Sleep(time.Second)
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
