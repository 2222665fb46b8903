package main

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"runtime"
	"strings"
	"time"
)

// suite is one `go test -bench` invocation.
type suite struct {
	what  string // what the row group measures
	pkg   string
	bench string
	extra []string
}

var suites = []suite{
	{what: "hiera-services (agent with default limits; alone, and following the catalog change feed a publisher serves) vs consul-template, 1,000 services x 5 instances, 50 runs and 50 changes each", pkg: "./hiera", bench: "Catalog1000x5", extra: []string{"-benchtime", "50x"}},
	{what: "the same at 5,000 services x 5 instances, 20 changes each", pkg: "./hiera", bench: "Catalog5000x5/(watch|health)", extra: []string{"-benchtime", "20x"}},
	// consul-template's once mode takes minutes at this size: two runs.
	{what: "once mode at 5,000 services x 5 instances, 2 runs each", pkg: "./hiera", bench: "Catalog5000x5/once", extra: []string{"-benchtime", "2x"}},
	{what: "hiera-services --watch on 8 default client agents, 500 services x 2, one check change every 200 ms", pkg: "./hiera", bench: "EightNodesTrickle", extra: []string{"-benchtime", "50x"}},
	{what: "the fleet's cost on the Consul server, 8/16/32 client agents, 1,000 services x 5: hiera-services --watch (default agents; alone, and following the catalog change feed) vs consul-template and its -dedup (raised connection limit); per registration, check change and burst of 20, net of idle (median of 3 at 8 nodes, the larger of 2 at 16 and 32)", pkg: "./hiera", bench: "FleetCost", extra: []string{"-benchtime", "1x"}},
	{what: "the eventual step on 8 default client agents running the generated watches, each node depending on mysql and declaring nothing more (--reads=): per iteration one unrelated registration, then one mysql instance; --splay 0 beside the default 5 s", pkg: "./internal/orchestrate", bench: "EightNodesEventual", extra: []string{"-benchtime", "5x"}},
	{what: "service-blocker: Nth instance passing -> exit, 50 trials each, polling (--no-watch) beside watching; load of one waiting blocker; an agent with 500 waiting", pkg: "./blocker", bench: ".", extra: []string{"-benchtime", "1x"}},
	{what: "reaper planner, 10,000 servers and nodes", pkg: "./reaper/planner", bench: "Plan10k", extra: []string{"-benchtime", "20x", "-benchmem"}},
	{what: "reaper, one full cycle, real agent + simulated cloud, 2,000 nodes", pkg: "./reaper/daemon", bench: "Cycle2000", extra: []string{"-benchtime", "10x", "-benchmem"}},
	{what: "autoscaler, total load 1.2 -> 3.0 on 2 servers (target 0.6/node: 5 needed), 30 s cycles in simulated time, by build time", pkg: "./reaper/daemon", bench: "AutoscaleReaction", extra: []string{"-benchtime", "1x"}},
	{what: "replacement of a critical node, decision -> replacement serving, without a warm pool (built) beside with one (a standby claimed), 30 s cycles in simulated time, by build time (1/3 boot, 2/3 Puppet)", pkg: "./reaper/daemon", bench: "ReplacementTime", extra: []string{"-benchtime", "1x"}},
	{what: "reaper wake-ups: a node's grace end -> the replacement's create, waking on change and at the plan's deadline (interval 30s, min_cycle_gap 1s) beside the fixed interval (3s here; x 10 for the default 30s); CPU a minute of the agent and the reaper with 2,000 nodes while 1% of checks flap (20 toggles a second, 60s a mode), fixed interval 30s beside waking (min_cycle_gap 5s)", pkg: "./reaper/daemon", bench: "^BenchmarkWake$", extra: []string{"-benchtime", "1x"}},
	{what: "instance refresh of a role of 12 (a new image, orchestrate refresh), request -> every server serving on it, without a warm pool beside with one of 2, by hourly budget and min-healthy share, 30 s cycles in simulated time, 90 s builds", pkg: "./reaper/daemon", bench: "RefreshTime", extra: []string{"-benchtime", "1x"}},
}

// row is one benchmark result line.
type row struct {
	group, name string
	figures     []string
}

// run runs every suite, echoing its output to stderr, then prints the
// table to stdout; it reports whether a suite failed.
func run(ctx context.Context) (failed bool) {
	var rows []row
	for _, s := range suites {
		fmt.Fprintf(os.Stderr, "== %s: go test -bench %s %s\n", s.what, s.bench, s.pkg)
		got, err := runSuite(ctx, s, os.Stderr)
		if err != nil {
			fmt.Fprintf(os.Stderr, "benchtable: %s: %v\n", s.pkg, err)
			failed = true
		}
		rows = append(rows, got...)
	}
	fmt.Println()
	fmt.Printf("Machine: %s, %d cores, %s, %s/%s, %s; %s\n\n", cpuModel(), runtime.NumCPU(), memTotal(), runtime.GOOS, runtime.GOARCH, goVersion(), time.Now().UTC().Format("2006-01-02"))
	fmt.Println("| what | benchmark | figures |")
	fmt.Println("|---|---|---|")
	for _, r := range rows {
		fmt.Printf("| %s | %s | %s |\n", r.group, r.name, strings.Join(r.figures, ", "))
	}
	return failed
}

// runSuite runs one go test -bench, echoing its output to log, and returns
// its result lines.
func runSuite(ctx context.Context, s suite, log io.Writer) ([]row, error) {
	args := append([]string{"test", "-run", "^$", "-bench", s.bench, "-timeout", "30m", "-count", "1"}, s.extra...)
	args = append(args, s.pkg)
	cmd := exec.CommandContext(ctx, "go", args...)
	var out bytes.Buffer
	cmd.Stdout = io.MultiWriter(&out, log)
	cmd.Stderr = log
	err := cmd.Run()
	var rows []row
	sc := bufio.NewScanner(&out)
	for sc.Scan() {
		if r, ok := parse(sc.Text()); ok {
			r.group = s.what
			rows = append(rows, r)
		}
	}
	if len(rows) == 0 && err == nil {
		err = fmt.Errorf("no benchmark results (skipped?)")
	}
	return rows, err
}

// parse reads "BenchmarkName-2  10  123 ns/op  4.5 median-ms ..." lines.
func parse(line string) (row, bool) {
	f := strings.Fields(line)
	if len(f) < 4 || !strings.HasPrefix(f[0], "Benchmark") {
		return row{}, false
	}
	name := strings.TrimPrefix(f[0], "Benchmark")
	if i := strings.LastIndexByte(name, '-'); i > 0 {
		name = name[:i]
	}
	r := row{name: name}
	for i := 2; i+1 < len(f); i += 2 {
		if f[i+1] == "ns/op" && f[i] == "0" {
			continue // benchmarks that report their own figures zero ns/op
		}
		r.figures = append(r.figures, f[i]+" "+f[i+1])
	}
	return r, true
}

func cpuModel() string {
	data, err := os.ReadFile("/proc/cpuinfo")
	if err != nil {
		return "unknown CPU"
	}
	for _, line := range strings.Split(string(data), "\n") {
		if k, v, ok := strings.Cut(line, ":"); ok && strings.TrimSpace(k) == "model name" {
			return strings.TrimSpace(v)
		}
	}
	return "unknown CPU"
}

func memTotal() string {
	data, err := os.ReadFile("/proc/meminfo")
	if err != nil {
		return "? GiB"
	}
	var kb int64
	for _, line := range strings.Split(string(data), "\n") {
		if strings.HasPrefix(line, "MemTotal:") {
			fmt.Sscanf(strings.TrimPrefix(line, "MemTotal:"), "%d", &kb)
		}
	}
	return fmt.Sprintf("%.0f GiB", float64(kb)/1024/1024)
}

func goVersion() string {
	out, err := exec.Command("go", "env", "GOVERSION").Output()
	if err != nil {
		return runtime.Version()
	}
	return strings.TrimSpace(string(out))
}
