package orchestrate

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/consul/api"

	"github.com/jiocloud/orchestrate/internal/consultest"
	"github.com/jiocloud/orchestrate/internal/testutil"
	"github.com/jiocloud/orchestrate/watch"
)

// fleetSpec is one node of a test fleet: its dependencies file and what
// else its Puppet reads (nil: it declares nothing, no --reads).
type fleetSpec struct {
	deps  string
	reads []string
}

// fleetNode is a client agent running the watches watch-config generates
// for its node; --exec appends the time each run starts to runs.
type fleetNode struct {
	name      string
	agent     *consultest.Agent
	out, runs string
	agentLog  func() string
}

// startFleet starts a client agent per spec joined to server, each
// running the generated watches (handlers inheriting the agent's
// environment, as in production) with the given hiera-services
// arguments (a --splay, say).
func startFleet(tb testing.TB, server *consultest.Agent, specs []fleetSpec, hieraArgs ...string) []*fleetNode {
	tb.Helper()
	bin := testutil.BuildCommands(tb, "orchestrate", "hiera-services")
	var nodes []*fleetNode
	for i, s := range specs {
		dir := tb.TempDir()
		n := &fleetNode{name: fmt.Sprintf("node%d", i), out: filepath.Join(dir, "hiera", "services.yaml"), runs: filepath.Join(dir, "runs")}
		deps := filepath.Join(dir, "deps.yaml")
		if err := os.WriteFile(deps, []byte(s.deps), 0o644); err != nil {
			tb.Fatal(err)
		}
		args := []string{"watch-config", "--host", n.name, "--hiera-services", filepath.Join(bin, "hiera-services"), "--orchestrate", filepath.Join(bin, "orchestrate"),
			"--out", n.out, "--dependencies", deps, "--exec", "date +%s.%N >> " + n.runs}
		if s.reads != nil {
			args = append(args, "--reads="+strings.Join(s.reads, ","))
		}
		for _, a := range hieraArgs {
			args = append(args, "--hiera-arg="+a)
		}
		var stdout, stderr bytes.Buffer
		if code := Run(context.Background(), args, IO{Stdin: strings.NewReader(""), Stdout: &stdout, Stderr: &stderr}); code != 0 {
			tb.Fatalf("watch-config %q: exit %d\n%s", args, code, stderr.String())
		}
		var cfg struct {
			Watches []watch.Watch `json:"watches"`
		}
		if err := json.Unmarshal(stdout.Bytes(), &cfg); err != nil {
			tb.Fatal(err)
		}
		hcl, err := watch.AgentConfig(cfg.Watches)
		if err != nil {
			tb.Fatal(err)
		}
		n.agent = consultest.Start(tb, consultest.Options{NodeName: n.name, JoinLAN: server.SerfLANAddr(), HCL: string(hcl), HandlerEnv: true})
		n.agentLog = func() string { log, _ := os.ReadFile(n.agent.LogPath); return string(log) }
		nodes = append(nodes, n)
	}
	return nodes
}

// starts returns the start times of the node's runs of --exec.
func (n *fleetNode) starts() []float64 {
	data, _ := os.ReadFile(n.runs)
	var out []float64
	for _, l := range strings.Fields(string(data)) {
		if f, err := strconv.ParseFloat(l, 64); err == nil {
			out = append(out, f)
		}
	}
	return out
}

func (n *fleetNode) count() int { return len(n.starts()) }

func (n *fleetNode) holds(s string) bool {
	data, _ := os.ReadFile(n.out)
	return strings.Contains(string(data), s)
}

// counts returns every node's number of runs.
func counts(nodes []*fleetNode) []int {
	out := make([]int, len(nodes))
	for i, n := range nodes {
		out[i] = n.count()
	}
	return out
}

// settle waits until every node's file holds s, then a whole splay and a
// margin, so every run the change made due has started and finished.
func settle(tb testing.TB, nodes []*fleetNode, s string, splay time.Duration) {
	tb.Helper()
	for _, n := range nodes {
		testutil.Eventually(tb, 30*time.Second, n.name+"'s file holding "+s, func() bool { return n.holds(s) }, n.agentLog)
	}
	time.Sleep(splay + 2*time.Second)
}

func registerAt(tb testing.TB, c *api.Client, node, addr, svc string, port int, status string) {
	tb.Helper()
	_, err := c.Catalog().Register(&api.CatalogRegistration{Node: node, Address: addr,
		Service: &api.AgentService{ID: svc, Service: svc, Port: port},
		Check:   &api.AgentCheck{Node: node, CheckID: "check-" + svc, Name: "check " + svc, Status: status, ServiceID: svc}}, nil)
	if err != nil {
		tb.Fatal(err)
	}
}

// TestEightNodesRunOnlyForWhatTheyRead: a Consul server and eight client
// agents with default limits, each running the watches watch-config
// generates, with a 2 s splay. Three nodes depend on mysql and declare
// nothing more (--reads=), three depend on keystone and read memcached,
// two depend on mysql and declare nothing (the whole-file trigger). Each
// node runs --exec exactly once at start (its watches all fire then),
// then once per change of what it reads: an unrelated registration runs
// it on no declaring node and once on each whole-file node; a new mysql
// instance, once on each mysql node; memcached registering, once on each
// node that reads it and each whole-file node; a second memcached
// instance, once on each node that reads it (--reads watches it);
// keystone's check failing, once on each keystone node (the whole-file
// nodes watch no keystone health).
func TestEightNodesRunOnlyForWhatTheyRead(t *testing.T) {
	server := consultest.Start(t, consultest.Options{NodeName: "server"})
	registerAt(t, server.Client, "db1", "10.0.0.5", "mysql", 3306, api.HealthPassing)
	registerAt(t, server.Client, "ks1", "10.0.1.5", "keystone", 5000, api.HealthPassing)
	mysqlOnly := fleetSpec{deps: "mysql: {functional: 1}\n", reads: []string{}}
	keystone := fleetSpec{deps: "keystone: {functional: 1}\n", reads: []string{"memcached"}}
	whole := fleetSpec{deps: "mysql: {functional: 1}\n"}
	const splay = 2 * time.Second
	nodes := startFleet(t, server, []fleetSpec{mysqlOnly, mysqlOnly, mysqlOnly, keystone, keystone, keystone, whole, whole}, "--splay="+splay.String())
	settle(t, nodes, `"services::mysql::address": ["10.0.0.5"]`, splay)
	if got := counts(nodes); !slices.Equal(got, []int{1, 1, 1, 1, 1, 1, 1, 1}) {
		t.Fatalf("runs at start: %v, want one on each node", got)
	}
	for _, step := range []struct {
		what   string
		change func()
		holds  string
		want   []int // new runs per node
	}{
		{"a service nobody reads registers", func() { registerAt(t, server.Client, "u1", "10.0.9.1", "unrelated", 80, api.HealthPassing) },
			`"services::unrelated::address": ["10.0.9.1"]`, []int{0, 0, 0, 0, 0, 0, 1, 1}},
		// A new instance of a service already registered does not move
		// the service list: only the nodes watching mysql render it.
		{"a mysql instance registers", func() { registerAt(t, server.Client, "db2", "10.0.0.6", "mysql", 3306, api.HealthPassing) },
			`"services::mysql::address": ["10.0.0.5", "10.0.0.6"]`, []int{1, 1, 1, 0, 0, 0, 1, 1}},
		{"memcached registers", func() { registerAt(t, server.Client, "mc1", "10.0.2.5", "memcached", 11211, api.HealthPassing) },
			`"services::memcached::address": ["10.0.2.5"]`, []int{0, 0, 0, 1, 1, 1, 1, 1}},
		// The nodes that read memcached watch it (--reads).
		{"a second memcached instance registers", func() { registerAt(t, server.Client, "mc2", "10.0.2.6", "memcached", 11211, api.HealthPassing) },
			`"services::memcached::address": ["10.0.2.5", "10.0.2.6"]`, []int{0, 0, 0, 1, 1, 1, 0, 0}},
	} {
		before := counts(nodes)
		step.change()
		var seeing []*fleetNode
		for i, n := range nodes {
			if step.want[i] > 0 {
				seeing = append(seeing, n)
			}
		}
		settle(t, seeing, step.holds, splay)
		after := counts(nodes)
		for i := range nodes {
			if after[i]-before[i] != step.want[i] {
				t.Errorf("%s: new runs per node %v, want %v", step.what, diff(after, before), step.want)
				break
			}
		}
	}
	// Only the check: no registration. The keystone nodes watch its
	// health (a dependency); the others have no watch that fires.
	before := counts(nodes)
	registerAt(t, server.Client, "ks1", "10.0.1.5", "keystone", 5000, api.HealthCritical)
	settle(t, nodes[3:6], `"orchestrate::dependencies_met": false`, splay)
	if got, want := diff(counts(nodes), before), []int{0, 0, 0, 1, 1, 1, 0, 0}; !slices.Equal(got, want) {
		t.Errorf("keystone's check failing: new runs per node %v, want %v", got, want)
	}
}

// inOneSecond is the largest number of the start times within one second
// of each other.
func inOneSecond(starts []float64) int {
	s := slices.Sorted(slices.Values(starts))
	most := 0
	for i := range s {
		j := i
		for j < len(s) && s[j]-s[i] < 1 {
			j++
		}
		most = max(most, j-i)
	}
	return most
}

func diff(after, before []int) []int {
	out := make([]int, len(after))
	for i := range after {
		out[i] = after[i] - before[i]
	}
	return out
}

// BenchmarkEightNodesEventual: eight client agents with default limits,
// each running the generated watches for a node that depends on mysql and
// declares nothing more (--reads=), --exec standing in for the eventual
// step. Each iteration registers an unrelated service (no node may run)
// and then a mysql instance (each node runs once). Reported for each
// --splay: the spread of the eight runs' start times (last - first), the
// delay from the registration to the first and the last start, the runs
// per node per relevant change, the runs for unrelated ones and the most
// runs starting within one second, means over the iterations. With the
// default splay the starts spread over the window; at 0 they come within
// the watch latency of each other.
func BenchmarkEightNodesEventual(b *testing.B) {
	for _, splay := range []time.Duration{0, 5 * time.Second} {
		b.Run("splay="+splay.String(), func(b *testing.B) {
			server := consultest.Start(b, consultest.Options{NodeName: "server"})
			registerAt(b, server.Client, "db0", "10.0.0.1", "mysql", 3306, api.HealthPassing)
			specs := make([]fleetSpec, 8)
			for i := range specs {
				specs[i] = fleetSpec{deps: "mysql: {functional: 1}\n", reads: []string{}}
			}
			var hieraArgs []string
			if splay == 0 {
				hieraArgs = []string{"--splay=0"}
			}
			nodes := startFleet(b, server, specs, hieraArgs...)
			settle(b, nodes, `"services::mysql::address": ["10.0.0.1"]`, splay)
			var spread, first, last, worst, perNode, unrelated, crowd float64
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				before := counts(nodes)
				registerAt(b, server.Client, fmt.Sprintf("u%d", i), fmt.Sprintf("10.0.9.%d", i+1), fmt.Sprintf("unrelated%d", i), 80, api.HealthPassing)
				settle(b, nodes, fmt.Sprintf(`"services::unrelated%d::address"`, i), splay)
				for j, n := range diff(counts(nodes), before) {
					unrelated += float64(n)
					before[j] += n
				}
				t0 := float64(time.Now().UnixNano()) / 1e9
				registerAt(b, server.Client, fmt.Sprintf("db%d", i+1), fmt.Sprintf("10.0.0.%d", i+2), "mysql", 3306, api.HealthPassing)
				settle(b, nodes, fmt.Sprintf(`"10.0.0.%d"`, i+2), splay)
				var starts []float64
				for j, n := range nodes {
					s := n.starts()
					perNode += float64(len(s) - before[j])
					if len(s) > before[j] {
						starts = append(starts, s[before[j]])
					}
				}
				if len(starts) != len(nodes) {
					b.Fatalf("iteration %d: %d of %d nodes ran --exec", i, len(starts), len(nodes))
				}
				lo, hi := slices.Min(starts), slices.Max(starts)
				crowd += float64(inOneSecond(starts))
				spread += hi - lo
				first += lo - t0
				last += hi - t0
				worst = max(worst, hi-t0)
			}
			b.StopTimer()
			n := float64(b.N)
			b.ReportMetric(spread/n*1000, "spread-ms")
			b.ReportMetric(first/n*1000, "first-start-ms")
			b.ReportMetric(last/n*1000, "last-start-ms")
			b.ReportMetric(worst*1000, "max-last-start-ms")
			b.ReportMetric(perNode/n/float64(len(nodes)), "runs/node/change")
			b.ReportMetric(unrelated/n, "runs/unrelated-change")
			b.ReportMetric(crowd/n, "most-starts-in-1s")
		})
	}
}
