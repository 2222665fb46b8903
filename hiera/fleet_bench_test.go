package hiera

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/hashicorp/consul/api"

	"github.com/jiocloud/orchestrate/internal/consultest"
	"github.com/jiocloud/orchestrate/internal/testutil"
)

// BenchmarkFleetCost measures what the renderer on every node costs the
// Consul server as the fleet grows: for fleets of 8, 16 and 32 client
// agents with Consul's default settings joined to one server, a catalog of
// 1,000 services x 5 instances (registerBenchCatalog, through the server),
// and on every node the renderer in watch mode against its own agent, as
// orchestrate-hiera-services.service runs `hiera-services --watch`.
//
// For each size it runs, side by side and one after another on the same
// cluster: hiera-services --watch on the default agents; the
// consul-template binary (bin/consul-template) with
// testdata/bench-consul-template.ctmpl, whose one blocking query per
// service needs `limits { http_max_conns_per_client = 4096 }` on its agent
// (written into every client's configuration directory and reloaded
// before its rows: hiera-services' rows run first, on the defaults); and
// the same binary with -dedup (one instance, the holder of a lock under
// consul-template/dedup/, watches the catalog and stores the data it
// rendered from in one KV key; the others watch that key and render from
// it).
//
// Timed, each a few times (fleetReps): one registration (a new instance of
// svc-0500), one check change (svc-0500's instance on node-0300), and a
// burst of 20 registrations of 20 services 50 ms apart, each until every
// node's file holds it. For each: the server's CPU seconds and the bytes it
// sent on TCP (serverMeter) from the change until 500 ms after the last
// node's file held it, less the server's idle rate over as long a window
// (the median of five 1-second windows before the changes, the renderers
// running), in total and per node; and the time until the last node's file
// held the change. One untimed registration comes first (a warm-up).
// Reported per size and tool, each the median over the repetitions (of
// two, the larger): reg-*, check-* (per change) and burst-* (per burst of 20):
// server-cpu-ms, server-KiB, server-KiB/node, last-node-ms; and
// idle-server-%cpu, idle-server-KiB/s, first-render-s (every node's file
// complete from the renderers' start), max-conns/node and
// median-conns/node (each renderer's connections to its agent, counted
// once), reps. A node's file that never holds a change within 2 minutes
// (the first render: 5) fails the benchmark, naming the node.
//
// Run it with `make bench-fleet` (-benchtime 1x: the repetitions are
// inside; a larger b.N would only build each cluster again).
func BenchmarkFleetCost(b *testing.B) {
	root := repoRootDir(b)
	ctBin := filepath.Join(root, "bin", "consul-template")
	if _, err := os.Stat(ctBin); err != nil {
		b.Skipf("skipping: %s missing; `make bin/consul-template` builds it", ctBin)
	}
	hsBin := hieraServicesBinary(b)
	ctTmpl := filepath.Join(root, "hiera", "testdata", "bench-consul-template.ctmpl")
	tools := []fleetTool{
		{name: "hiera-services", argv: func(addr, out string) []string {
			return []string{hsBin, "--consul-addr", addr, "--out", out, "--watch", "--feed=false", "--log-level", "warn"}
		}},
		// The nodes follow the catalog change feed, which one publisher
		// (on the server's agent, whose limit is raised for it) serves.
		{name: "hiera-services-feed", feed: true, argv: func(addr, out string) []string {
			return []string{hsBin, "--consul-addr", addr, "--out", out, "--watch"}
		}},
		{name: "consul-template", raised: true, argv: func(addr, out string) []string {
			return []string{ctBin, "-consul-addr", addr, "-template", ctTmpl + ":" + out, "-log-level", "err"}
		}},
		{name: "consul-template-dedup", raised: true, dedup: true, argv: func(addr, out string) []string {
			// -dedup alone enables it with the default prefix
			// (consul-template/dedup/) and session TTL (15 s).
			return []string{ctBin, "-consul-addr", addr, "-template", ctTmpl + ":" + out, "-log-level", "err", "-dedup"}
		}},
	}
	for _, n := range []int{8, 16, 32} {
		b.Run(fmt.Sprintf("nodes=%d", n), func(b *testing.B) {
			f := startFleet(b, n)
			for _, tool := range tools {
				b.Run(tool.name, func(b *testing.B) {
					if tool.raised {
						f.raiseLimits(b)
					}
					if tool.feed {
						stop := f.startPublisher(b, hsBin)
						defer stop()
					}
					f.measure(b, tool)
				})
			}
		})
	}
}

// fleetServices is the size of the fleet's catalog (x benchInstances).
const fleetServices = 1000

// fleetQuietKiB is the most the server may send a second, in KiB, for a
// window to count as idle: a settled fleet sends 0-2 (serf, the agents'
// anti-entropy), a fleet at work hundreds to thousands.
const fleetQuietKiB = 64

// fleetReps is how many times each change is timed at fleet size n: the
// 16- and 32-node rows get fewer, to keep the whole benchmark near ten
// minutes on a 2-core machine.
func fleetReps(n int) int {
	if n >= 16 {
		return 2
	}
	return 3
}

// fleetTool is a renderer run on every node of the fleet.
type fleetTool struct {
	name string
	// raised: its agents need http_max_conns_per_client raised.
	raised bool
	// dedup: consul-template's -dedup, checked to render from KV.
	dedup bool
	// feed: hiera-services following the catalog change feed, checked
	// to follow it before and after the changes.
	feed bool
	argv func(agentAddr, out string) []string
}

// fleet is one Consul server and its client agents.
type fleet struct {
	server   *consultest.Agent
	clients  []*consultest.Agent
	confDirs []string
	raised   bool
	// flips counts healthChange calls, so that each one changes the
	// check's state.
	flips int
}

// startFleet starts a server and n client agents with Consul's default
// settings (started a few at a time, in parallel), and registers the
// benchmark catalog through the server. Every agent stops when b ends.
func startFleet(b *testing.B, n int) *fleet {
	start := time.Now()
	// The server's limit of RPC connections per client address (100 by
	// default) counts every agent here as one client: they all connect
	// from 127.0.0.1, where a real fleet's agents each have an address of
	// their own. At 32 agents running consul-template it refused their
	// connections ("rpc_max_conns_per_client exceeded"), which no real
	// fleet of that size would see; the client agents keep every default.
	//
	// Its HTTP limit is raised for the catalog change feed's publisher,
	// which runs on the server's agent with one query per service.
	f := &fleet{server: consultest.Start(b, consultest.Options{NodeName: "server", HCL: "limits {\n  rpc_max_conns_per_client = 4096\n  http_max_conns_per_client = 4096\n}"})}
	bin := consultest.RequireBinary(b)
	f.clients = make([]*consultest.Agent, n)
	errs := make([]error, n)
	dirs := make([]string, n)
	for i := range n {
		dirs[i] = b.TempDir()
		f.confDirs = append(f.confDirs, filepath.Join(dirs[i], "consul.d"))
		if err := os.MkdirAll(f.confDirs[i], 0o755); err != nil {
			b.Fatal(err)
		}
	}
	var wg sync.WaitGroup
	sem := make(chan struct{}, 8)
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			sem <- struct{}{}
			defer func() { <-sem }()
			opts := consultest.Options{NodeName: fmt.Sprintf("node%02d", i), JoinLAN: f.server.SerfLANAddr(), ConfigDir: f.confDirs[i]}
			// A free port can be taken between its choice and the bind:
			// a few tries, as consultest.Start makes.
			for range 3 {
				f.clients[i], errs[i] = consultest.New(context.Background(), bin, filepath.Join(dirs[i], "agent"), opts)
				if errs[i] == nil {
					break
				}
			}
		}()
	}
	wg.Wait()
	b.Cleanup(func() {
		// In parallel: a client agent leaves the cluster on SIGTERM,
		// a second or so each.
		var wg sync.WaitGroup
		for _, c := range f.clients {
			if c != nil {
				wg.Add(1)
				go func() { defer wg.Done(); c.Stop() }()
			}
		}
		wg.Wait()
	})
	for i, err := range errs {
		if err != nil {
			b.Fatalf("start client agent node%02d: %v", i, err)
		}
	}
	b.Logf("%d client agents and the server started in %v", n, time.Since(start).Round(time.Millisecond))
	start = time.Now()
	registerBenchCatalog(b, f.server.Client, fleetServices)
	b.Logf("registered %d instances of %d services through the server in %v", fleetServices*benchInstances, fleetServices, time.Since(start).Round(time.Millisecond))
	return f
}

// startPublisher runs `hiera-services --publish` on the server's agent
// until the returned function stops it.
func (f *fleet) startPublisher(b *testing.B, hsBin string) func() {
	cmd := exec.Command(hsBin, "--consul-addr", f.server.HTTPAddr, "--publish")
	logs := &testutil.SyncBuffer{}
	cmd.Stdout, cmd.Stderr = logs, logs
	if err := cmd.Start(); err != nil {
		b.Fatal(err)
	}
	return func() {
		_ = cmd.Process.Signal(syscall.SIGINT)
		_ = cmd.Wait()
		if b.Failed() {
			b.Logf("publisher:\n%s", logs.String())
		}
	}
}

// raiseLimits gives every client agent the connection limit the
// consul-template binary's watch mode needs (one blocking query per
// service), through its configuration directory and a reload, as an
// operator would: http_max_conns_per_client is reloadable.
func (f *fleet) raiseLimits(b *testing.B) {
	if f.raised {
		return
	}
	for i, c := range f.clients {
		if err := os.WriteFile(filepath.Join(f.confDirs[i], "limits.hcl"), []byte("limits { http_max_conns_per_client = 4096 }\n"), 0o644); err != nil {
			b.Fatal(err)
		}
		if err := c.Client.Agent().Reload(); err != nil {
			b.Fatalf("reload node%02d: %v", i, err)
		}
	}
	f.raised = true
}

// waitFollowing waits until every node follows the change feed.
func (f *fleet) waitFollowing(b *testing.B, nodes []*fleetNode) {
	deadline := time.Now().Add(2 * time.Minute)
	for _, nd := range nodes {
		for !strings.Contains(nd.logs.String(), "following the catalog change feed") {
			if time.Now().After(deadline) {
				b.Fatalf("%s never followed the feed:\n%s", nd.name, nd.logs.String())
			}
			time.Sleep(50 * time.Millisecond)
		}
	}
}

// fleetNode is one node's renderer.
type fleetNode struct {
	name, out string
	cmd       *exec.Cmd
	logs      *testutil.SyncBuffer
}

// A fleetChange makes a change through the server and returns what every
// node's file holds once it arrived, and a description for failures.
type fleetChange func(b *testing.B) (arrived func(data string) bool, what string)

// changeCost is one timed change.
type changeCost struct {
	cpu   float64 // server CPU seconds, idle subtracted
	sent  float64 // server TCP bytes sent, idle subtracted
	last  time.Duration
	gross windowCost
}

// measure runs tool on every node, waits for the first full render, takes
// the server's idle rates, then times each change kind and reports.
func (f *fleet) measure(b *testing.B, tool fleetTool) {
	n := len(f.clients)
	dir := b.TempDir()
	w, err := newDirWatch(dir)
	if err != nil {
		b.Fatal(err)
	}
	defer w.close()
	nodes := make([]*fleetNode, n)
	for i, c := range f.clients {
		nd := &fleetNode{name: c.NodeName, out: filepath.Join(dir, c.NodeName+".yaml"), logs: &testutil.SyncBuffer{}}
		args := tool.argv(c.HTTPAddr, nd.out)
		nd.cmd = exec.Command(args[0], args[1:]...)
		nd.cmd.Stdout, nd.cmd.Stderr = nd.logs, nd.logs
		nodes[i] = nd
	}
	t0 := time.Now()
	for _, nd := range nodes {
		if err := nd.cmd.Start(); err != nil {
			b.Fatal(err)
		}
	}
	defer stopFleetNodes(nodes)

	last := fmt.Sprintf("svc-%04d", fleetServices-1)
	f.waitAll(b, w, nodes, func(d string) bool { return strings.Contains(d, last) }, "the first render (the catalog's last service, "+last+")", 5*time.Minute)
	firstRender := time.Since(t0)
	if tool.feed {
		f.waitFollowing(b, nodes)
	}
	// The renderers settle (consul-template's dedup followers take the
	// lock's turn; blocking queries are re-armed) before the idle window.
	time.Sleep(3 * time.Second)

	// The idle rates are the medians of five 1-second windows in a row
	// in which the server sent less than fleetQuietKiB a second: until
	// then the fleet is still at work (a slow node's first render, or
	// every node re-reading the list of checks after an agent's own
	// serfHealth flapped on a saturated machine: one run's 16-node row
	// took four of its five windows at 11 MiB/s, and its net figures came
	// out below zero). A fleet that does not settle within two minutes is
	// measured anyway, from its last five windows, and says so
	// (idle-unsettled 1).
	meter := newServerMeter(b, f)
	var idleCPUs, idleSents []float64
	settled := false
	for deadline := time.Now().Add(2 * time.Minute); ; {
		win := meter.open()
		time.Sleep(time.Second)
		c := win.close()
		idleCPUs = append(idleCPUs, c.cpu/c.d.Seconds())
		idleSents = append(idleSents, float64(c.sent)/c.d.Seconds())
		b.Logf("idle %v: server CPU %.0f ms, sent %.1f KiB (wchar %.1f KiB); %d sockets closed in the window",
			c.d.Round(time.Millisecond), 1000*c.cpu, float64(c.sent)/1024, float64(c.wchar)/1024, c.closed)
		if n := len(idleSents); n >= 5 {
			idleCPUs, idleSents = idleCPUs[n-5:], idleSents[n-5:]
			if slices.Max(idleSents) < fleetQuietKiB*1024 {
				settled = true
				break
			}
		}
		if time.Now().After(deadline) && len(idleSents) == 5 {
			b.Logf("the fleet did not settle in two minutes: idle measured from its last five windows")
			break
		}
	}
	if !settled {
		b.ReportMetric(1, "idle-unsettled")
	}
	sort.Float64s(idleCPUs)
	sort.Float64s(idleSents)
	idleCPU, idleSent := idleCPUs[2], idleSents[2]

	// Connections each renderer holds to its agent, counted once: the
	// consul-template binary one per service, -dedup one per service on
	// the lock holder and a few elsewhere (the followers render from KV).
	conns := agentConns(b, nodes, f.clients)
	if tool.dedup {
		keys, _, err := f.server.Client.KV().Keys(ctDedupPrefix, "", nil)
		if err != nil {
			b.Fatal(err)
		}
		data := 0
		for _, k := range keys {
			if strings.HasSuffix(k, "/data") {
				data++
				// Consul refuses values over kv_max_value_size (512 KiB by
				// default): the catalog's ceiling in -dedup.
				if pair, _, err := f.server.Client.KV().Get(k, nil); err == nil && pair != nil {
					b.Logf("-dedup data %s: %.1f KiB", k, float64(len(pair.Value))/1024)
				}
			}
		}
		if data != 1 || conns[len(conns)-2] > 10 {
			b.Fatalf("-dedup: want one data key under %s and one renderer holding the service queries, got keys %v and connections %v", ctDedupPrefix, keys, conns)
		}
	}

	timeIt := func(kind string, change fleetChange) []changeCost {
		var costs []changeCost
		for range fleetReps(n) {
			win := meter.open()
			arrived, what := change(b)
			f.waitAll(b, w, nodes, arrived, kind+": "+what, 2*time.Minute)
			lastNode := time.Since(win.t0)
			// What the server does right after the last render (the
			// re-armed blocking queries, hiera-services' follow-up
			// reads) belongs to the change too.
			time.Sleep(500 * time.Millisecond)
			g := win.close()
			costs = append(costs, changeCost{
				cpu: g.cpu - idleCPU*g.d.Seconds(), sent: float64(g.sent) - idleSent*g.d.Seconds(),
				last: lastNode, gross: g,
			})
			b.Logf("%s: last node after %v; server gross CPU %.0f ms, sent %.1f KiB (wchar %.1f KiB), %d sockets closed in the window, over %v",
				kind, lastNode.Round(time.Millisecond), 1000*g.cpu, float64(g.sent)/1024, float64(g.wchar)/1024, g.closed, g.d.Round(time.Millisecond))
			time.Sleep(time.Second) // apart: one change's tail must not fall in the next window
		}
		return costs
	}
	// One untimed registration first: the first change after the start
	// costs the consul-template binary's agents a one-off resend (165 KiB
	// per node at 16 nodes, 10 on later changes), which is not what every
	// change costs.
	warm := fleetRegister(b, f.server, "svc-0500")
	f.waitAll(b, w, nodes, func(d string) bool { return strings.Contains(d, `"`+warm+`"`) }, "the warm-up registration at "+warm, 2*time.Minute)
	time.Sleep(time.Second)

	b.ResetTimer()
	reg := timeIt("registration", func(b *testing.B) (func(string) bool, string) {
		addr := fleetRegister(b, f.server, "svc-0500")
		return func(d string) bool { return strings.Contains(d, `"`+addr+`"`) }, "svc-0500's new instance at " + addr
	})
	check := timeIt("check change", func(b *testing.B) (func(string) bool, string) {
		i := f.flips
		f.flips++
		state := api.HealthPassing
		if i%2 == 1 {
			state = api.HealthCritical
		}
		return healthChange(b, f.server, i, fleetServices), "node-0300's svc-0500 check " + state
	})
	burst := timeIt("burst", func(b *testing.B) (func(string) bool, string) {
		var addrs []string
		for k := range 20 {
			if k > 0 {
				time.Sleep(50 * time.Millisecond)
			}
			addrs = append(addrs, fleetRegister(b, f.server, fmt.Sprintf("svc-%04d", 600+k)))
		}
		return func(d string) bool {
			for _, a := range addrs {
				if !strings.Contains(d, `"`+a+`"`) {
					return false
				}
			}
			return true
		}, "20 new instances of svc-0600..svc-0619 at " + strings.Join(addrs, ", ")
	})
	b.StopTimer()

	report := func(prefix, per string, costs []changeCost) {
		b.ReportMetric(1000*median(costs, func(c changeCost) float64 { return c.cpu }), prefix+"server-cpu-ms"+per)
		sent := median(costs, func(c changeCost) float64 { return c.sent }) / 1024
		b.ReportMetric(sent, prefix+"server-KiB"+per)
		b.ReportMetric(sent/float64(n), prefix+"server-KiB"+per+"/node")
		b.ReportMetric(median(costs, func(c changeCost) float64 { return float64(c.last.Microseconds()) / 1000 }), prefix+"last-node-ms")
	}
	report("reg-", "/change", reg)
	report("check-", "/change", check)
	report("burst-", "", burst)
	b.ReportMetric(100*idleCPU, "idle-server-%cpu")
	b.ReportMetric(idleSent/1024, "idle-server-KiB/s")
	b.ReportMetric(firstRender.Seconds(), "first-render-s")
	if tool.feed {
		for _, nd := range nodes {
			if strings.Contains(nd.logs.String(), "watching the catalog directly") {
				b.Fatalf("%s left the feed during the changes:\n%s", nd.name, nd.logs.String())
			}
		}
	}
	b.ReportMetric(float64(fleetReps(n)), "reps")
	b.ReportMetric(float64(conns[len(conns)-1]), "max-conns/node")
	b.ReportMetric(float64(conns[len(conns)/2]), "median-conns/node")
}

// ctDedupPrefix is consul-template's default KV prefix of -dedup.
const ctDedupPrefix = "consul-template/dedup/"

// agentConns counts, for each node, the established TCP connections its
// renderer holds to its own agent's HTTP port, sorted.
func agentConns(b *testing.B, nodes []*fleetNode, agents []*consultest.Agent) []int {
	data, err := os.ReadFile("/proc/net/tcp")
	if err != nil {
		b.Fatal(err)
	}
	// inode -> remote port of established sockets.
	remote := map[string]int{}
	for _, line := range strings.Split(string(data), "\n") {
		// sl local remote st ... inode (field 9)
		if f := strings.Fields(line); len(f) > 9 && f[3] == "01" {
			if _, port, ok := strings.Cut(f[2], ":"); ok {
				p, _ := strconv.ParseInt(port, 16, 32)
				remote[f[9]] = int(p)
			}
		}
	}
	var out []int
	for i, nd := range nodes {
		n := 0
		pid := nd.cmd.Process.Pid
		fds, _ := os.ReadDir(fmt.Sprintf("/proc/%d/fd", pid))
		for _, fd := range fds {
			link, err := os.Readlink(fmt.Sprintf("/proc/%d/fd/%s", pid, fd.Name()))
			if ino, ok := strings.CutPrefix(link, "socket:["); ok && err == nil && remote[strings.TrimSuffix(ino, "]")] == agents[i].Ports.HTTP {
				n++
			}
		}
		out = append(out, n)
	}
	sort.Ints(out)
	return out
}

// median is the median of f over costs (of two, the larger).
func median(costs []changeCost, f func(changeCost) float64) float64 {
	v := make([]float64, len(costs))
	for i, c := range costs {
		v[i] = f(c)
	}
	sort.Float64s(v)
	return v[len(v)/2]
}

// fleetRegister registers a new instance of svc on a new node through a,
// at an address no earlier change used, and returns the address.
func fleetRegister(b *testing.B, a *consultest.Agent, svc string) string {
	n := benchChanges.Add(1)
	addr := fmt.Sprintf("10.250.%d.%d", (n/250)%250, n%250+1)
	node := fmt.Sprintf("bench-new-%d", n)
	_, err := a.Client.Catalog().Register(&api.CatalogRegistration{Node: node, Address: addr,
		Service: &api.AgentService{ID: svc, Service: svc, Address: addr, Port: 9500}}, nil)
	if err != nil {
		b.Fatal(err)
	}
	return addr
}

// waitAll waits until every node's file satisfies ok, failing the benchmark
// with the first node that does not within limit.
func (f *fleet) waitAll(b *testing.B, w *dirWatch, nodes []*fleetNode, ok func(string) bool, what string, limit time.Duration) {
	deadline := time.Now().Add(limit)
	for _, nd := range nodes {
		if err := w.waitUntil(nd.out, ok, max(time.Until(deadline), time.Millisecond)); err != nil {
			b.Fatalf("%s: node %s's file never held %s within %v: %v\nits log's distinct lines (digits as #):\n%s\nits log's end:\n%s",
				nd.name, nd.name, what, limit, err, distinctLines(nd.logs.String(), 20), tail(nd.logs.String(), 2000))
		}
	}
}

// distinctLines is the first n distinct lines of log once timestamps,
// numbers and service names are masked (digits as #), each with its count:
// the causes of a failure whose log repeats one line thousands of times.
func distinctLines(log string, n int) string {
	count := map[string]int{}
	var order []string
	for _, line := range strings.Split(log, "\n") {
		k := strings.Map(func(r rune) rune {
			if r >= '0' && r <= '9' {
				return '#'
			}
			return r
		}, line)
		if count[k] == 0 {
			order = append(order, k)
		}
		count[k]++
	}
	var out strings.Builder
	for i, k := range order {
		if i == n {
			fmt.Fprintf(&out, "... and %d more\n", len(order)-n)
			break
		}
		fmt.Fprintf(&out, "%6d x %s\n", count[k], k)
	}
	return out.String()
}

// stopFleetNodes stops every renderer (SIGINT: the consul-template binary
// ignores SIGTERM while its blocking queries run), killing those still
// running after 15 s, all at once.
func stopFleetNodes(nodes []*fleetNode) {
	var wg sync.WaitGroup
	for _, nd := range nodes {
		if nd.cmd.Process == nil {
			continue
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			_ = nd.cmd.Process.Signal(syscall.SIGINT)
			done := make(chan struct{})
			go func() { _ = nd.cmd.Wait(); close(done) }()
			select {
			case <-done:
			case <-time.After(15 * time.Second):
				_ = nd.cmd.Process.Kill()
				<-done
			}
		}()
	}
	wg.Wait()
}

// serverMeter measures the server process: CPU from /proc/<pid>/stat and
// the bytes it sent over TCP, from the kernel's per-socket counters.
//
// Why tcp_info's bytes_sent is right: the kernel counts, per socket, every
// payload byte the socket put on the wire over its life (retransmissions
// included; on loopback there are none, so it equals bytes_acked), whatever
// the program's buffering. The server's sockets are those whose inode is
// one of /proc/<pid>/fd's, which covers its listeners' connections (RPC
// from every client agent, HTTP, serf's TCP push-pull) and those it dials
// itself (memberlist to the clients' serf ports). ss reads the counters
// through sock_diag, with a port filter the kernel applies, so a poll costs
// little even beside consul-template's thousands of connections.
//
// A socket that closes inside the window takes its counter with it: the
// window polls every 100 ms and keeps the last value it saw of each
// socket, and counts the sockets that vanished (windowCost.closed), so
// only the bytes such a socket sent after its last poll, or one opened and
// closed between two polls, are missed. The client agents' RPC to the
// server runs over one long-lived multiplexed connection each; the logged
// counts say how many closed (none in most windows, up to 20 in a burst's
// at 32 nodes), and /proc/<pid>/io's wchar
// (every write(2), sockets and files) is logged beside the sum as the
// cross-check: on 2026-11-27 it never exceeded the sum by more than 0.3%
// in a change window over 100 KiB, so nothing of weight went missing.
// Serf's UDP gossip is not counted: it runs at a fixed rate whatever the
// catalog does.
type serverMeter struct {
	pid    int
	filter string
}

func newServerMeter(b *testing.B, f *fleet) *serverMeter {
	p := f.server.Ports
	terms := []string{}
	for _, port := range []int{p.HTTP, p.DNS, p.SerfLAN, p.SerfWAN, p.Server, p.GRPC} {
		terms = append(terms, fmt.Sprintf("sport = :%d", port))
	}
	for _, c := range f.clients {
		terms = append(terms, fmt.Sprintf("dport = :%d", c.Ports.SerfLAN))
	}
	m := &serverMeter{pid: f.server.Pid(), filter: "( " + strings.Join(terms, " or ") + " )"}
	if _, err := m.sockets(); err != nil {
		b.Fatalf("read the server's TCP counters: %v", err)
	}
	return m
}

// sockets returns bytes_sent of each of the server's TCP sockets, by inode.
func (m *serverMeter) sockets() (map[uint64]int64, error) {
	mine := map[uint64]bool{}
	fds, err := os.ReadDir(fmt.Sprintf("/proc/%d/fd", m.pid))
	if err != nil {
		return nil, err
	}
	for _, fd := range fds {
		link, err := os.Readlink(fmt.Sprintf("/proc/%d/fd/%s", m.pid, fd.Name()))
		if ino, ok := strings.CutPrefix(link, "socket:["); ok && err == nil {
			if v, err := strconv.ParseUint(strings.TrimSuffix(ino, "]"), 10, 64); err == nil {
				mine[v] = true
			}
		}
	}
	out, err := exec.Command("ss", "-tineH", "state", "connected", m.filter).Output()
	if err != nil {
		return nil, fmt.Errorf("ss: %w", err)
	}
	sent := map[uint64]int64{}
	var ino uint64
	for _, field := range strings.Fields(string(out)) {
		if v, ok := strings.CutPrefix(field, "ino:"); ok {
			ino, _ = strconv.ParseUint(v, 10, 64)
			if mine[ino] {
				sent[ino] = 0 // ss leaves bytes_sent out while it is 0
			}
		} else if v, ok := strings.CutPrefix(field, "bytes_sent:"); ok && mine[ino] {
			sent[ino], _ = strconv.ParseInt(v, 10, 64)
		}
	}
	return sent, nil
}

// wchar is the bytes the process passed to write(2) so far.
func (m *serverMeter) wchar() int64 {
	data, _ := os.ReadFile(fmt.Sprintf("/proc/%d/io", m.pid))
	for _, line := range strings.Split(string(data), "\n") {
		if v, ok := strings.CutPrefix(line, "wchar: "); ok {
			n, _ := strconv.ParseInt(v, 10, 64)
			return n
		}
	}
	return 0
}

// meterWindow is one open measurement window.
type meterWindow struct {
	m      *serverMeter
	t0     time.Time
	cpu0   float64
	wchar0 int64
	base   map[uint64]int64
	mu     sync.Mutex // guards seen
	seen   map[uint64]int64
	stopCh chan struct{}
	done   chan struct{}
}

// windowCost is what the server spent over a window.
type windowCost struct {
	d      time.Duration
	cpu    float64 // seconds
	sent   int64   // TCP bytes
	wchar  int64
	closed int // sockets that vanished in the window
}

func (m *serverMeter) open() *meterWindow {
	w := &meterWindow{m: m, seen: map[uint64]int64{}, stopCh: make(chan struct{}), done: make(chan struct{})}
	w.base, _ = m.sockets()
	for ino, v := range w.base {
		w.seen[ino] = v // a socket that closes before the first poll counts as closed
	}
	w.t0, w.cpu0, w.wchar0 = time.Now(), testutil.ProcCPUSeconds(m.pid), m.wchar()
	go func() {
		defer close(w.done)
		for {
			select {
			case <-w.stopCh:
				return
			case <-time.After(100 * time.Millisecond):
			}
			w.poll()
		}
	}()
	return w
}

func (w *meterWindow) poll() map[uint64]int64 {
	now, err := w.m.sockets()
	if err != nil {
		return nil
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	for ino, v := range now {
		w.seen[ino] = max(w.seen[ino], v)
	}
	return now
}

func (w *meterWindow) close() windowCost {
	close(w.stopCh)
	<-w.done
	c := windowCost{d: time.Since(w.t0), cpu: testutil.ProcCPUSeconds(w.m.pid) - w.cpu0, wchar: w.m.wchar() - w.wchar0}
	final := w.poll()
	w.mu.Lock()
	defer w.mu.Unlock()
	for ino, v := range w.seen {
		c.sent += v - w.base[ino]
		if _, ok := final[ino]; !ok {
			c.closed++
		}
	}
	return c
}
