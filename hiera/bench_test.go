package hiera

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/hashicorp/consul/api"

	"github.com/jiocloud/orchestrate/internal/consultest"
	"github.com/jiocloud/orchestrate/internal/testutil"
)

// Benchmark catalog: N services x 5 instances, spread over N nodes (each
// node runs 5 services); one instance in five is critical.
const benchInstances = 5

// BenchmarkCatalog1000x5 compares hiera-services with the consul-template
// binary (`make bin/consul-template`) on the same catalog: once mode from
// process start to file written, with the process's peak RSS and
// connections, and in watch mode the latency from registering one instance
// (watch/) and from one check change (health/) to the file holding it,
// with the connections held and the bytes the agent sent per change.
// hiera-services runs against an agent with Consul's default limits: on
// its own (hiera-services), and on a client agent of a cluster whose
// catalog change feed a publisher serves (hiera-services-feed: the
// publisher, one per datacenter, holds one query per service on the
// server's agent, whose limit is raised). The binary's watch mode needs a
// raised limit. Run it with `make bench-hiera`.
func BenchmarkCatalog1000x5(b *testing.B) { benchCatalog(b, 1000) }

// BenchmarkCatalog5000x5 is BenchmarkCatalog1000x5 on five times the
// catalog: a registration's cost must not grow with it.
func BenchmarkCatalog5000x5(b *testing.B) { benchCatalog(b, 5000) }

func benchCatalog(b *testing.B, benchServices int) {
	root := repoRootDir(b)
	ctBin := filepath.Join(root, "bin", "consul-template")
	if _, err := os.Stat(ctBin); err != nil {
		b.Skipf("skipping: %s missing; `make bin/consul-template` builds it", ctBin)
	}
	hsBin := hieraServicesBinary(b)
	// Once mode runs against an agent with Consul's default limits, as
	// users run it. Watch mode still holds one blocking query per service
	// (both tools): its agent must accept more than its default 200
	// connections per client address.
	//
	// consul-template's health row runs on an agent of its own (ctHealth):
	// on the agent its watch row used, the blocking queries of the stopped
	// process stay open on the agent until they time out, and at 5,000
	// services its second start did not render within five minutes.
	raised := consultest.Options{HCL: `limits { http_max_conns_per_client = 16384 }`}
	def := consultest.Start(b, consultest.Options{})
	a := consultest.Start(b, raised)
	ctHealth := consultest.Start(b, raised)
	for _, ag := range []*consultest.Agent{def, a, ctHealth} {
		start := time.Now()
		registerBenchCatalog(b, ag.Client, benchServices)
		b.Logf("registered %d instances of %d services in %v", benchServices*benchInstances, benchServices, time.Since(start).Round(time.Millisecond))
	}
	// A node's agent with Consul's defaults in a's cluster, and the
	// datacenter's feed publisher on a.
	node := consultest.Start(b, consultest.Options{NodeName: "bench-node", JoinLAN: a.SerfLANAddr()})
	publisher := exec.Command(hsBin, "--consul-addr", a.HTTPAddr, "--publish")
	pubLogs := &testutil.SyncBuffer{}
	publisher.Stdout, publisher.Stderr = pubLogs, pubLogs
	if err := publisher.Start(); err != nil {
		b.Fatal(err)
	}
	defer func() {
		_ = publisher.Process.Signal(syscall.SIGINT)
		_ = publisher.Wait()
	}()
	lastSvc := fmt.Sprintf("svc-%04d", benchServices-1)

	ctTmpl := filepath.Join(root, "hiera", "testdata", "bench-consul-template.ctmpl")
	// hiera-services runs against the default agent in both modes; the
	// consul-template binary's watch mode never renders there (one
	// blocking query per service), so its watch rows use raised ones.
	// cmd is given the agent of the row it runs in (watch, or health).
	tools := []struct {
		name          string
		watch, health *consultest.Agent
		cmd           func(ag *consultest.Agent, out string, watch bool) []string
		// follows: the watch must follow the feed before changes are timed.
		follows bool
		// peer: the tool compared with, whose failing to deliver is a
		// figure of the row, not a failure of the benchmark.
		peer bool
	}{
		{"hiera-services", def, def, func(_ *consultest.Agent, out string, watch bool) []string {
			args := []string{hsBin, "--consul-addr", def.HTTPAddr, "--out", out, "--lock-file", out + ".lock"}
			if watch {
				args = append(args, "--watch")
			}
			return args
		}, false, false},
		{"hiera-services-feed", node, node, func(_ *consultest.Agent, out string, watch bool) []string {
			return []string{hsBin, "--consul-addr", node.HTTPAddr, "--out", out, "--lock-file", out + ".lock", "--watch"}
		}, true, false},
		{"consul-template", a, ctHealth, func(ag *consultest.Agent, out string, watch bool) []string {
			if watch {
				return []string{ctBin, "-consul-addr", ag.HTTPAddr, "-template", ctTmpl + ":" + out, "-log-level", "err"}
			}
			return []string{ctBin, "-consul-addr", def.HTTPAddr, "-template", ctTmpl + ":" + out, "-log-level", "err", "-once"}
		}, false, true},
	}
	for _, tool := range tools {
		if tool.follows {
			continue // once mode reads the catalog, not the feed
		}
		b.Run("once/"+tool.name, func(b *testing.B) {
			var maxRSS int
			var size, peakConns int
			for i := 0; i < b.N; i++ {
				out := filepath.Join(b.TempDir(), "services.yaml")
				args := tool.cmd(def, out, false)
				cmd := exec.Command(args[0], args[1:]...)
				var stderr bytes.Buffer
				cmd.Stderr = &stderr
				if err := cmd.Start(); err != nil {
					b.Fatal(err)
				}
				conns := countProcConns(cmd.Process.Pid, def.Ports.HTTP)
				// The process's peak: VmHWM, read every millisecond
				// until it exits (less what it grew in its last one).
				hwm := samplePeak(func() int { return vmHWM(cmd.Process.Pid) })
				err := cmd.Wait()
				peakConns = max(peakConns, conns.stop())
				rss := hwm.stop()
				if rss == 0 && err == nil {
					b.Fatalf("%v exited before its memory could be read: no peak RSS to report", args)
				}
				maxRSS = max(maxRSS, rss)
				if err != nil {
					b.Fatalf("%v: %v\n%s", args, err, stderr.String())
				}
				data, err := os.ReadFile(out)
				if err != nil {
					b.Fatal(err)
				}
				if !bytes.Contains(data, []byte(lastSvc)) {
					b.Fatalf("%s lacks the last service", out)
				}
				size = len(data)
			}
			b.ReportMetric(float64(maxRSS)/1024, "peak-RSS-MiB")
			b.ReportMetric(float64(size)/1024, "file-KiB")
			b.ReportMetric(float64(peakConns), "peak-conns")
		})
	}
	for _, tool := range tools {
		on := func(ag *consultest.Agent) func(string, bool) []string {
			return func(out string, watch bool) []string { return tool.cmd(ag, out, watch) }
		}
		b.Run("watch/"+tool.name, func(b *testing.B) {
			benchWatch(b, tool.watch, on(tool.watch), registerChange, benchServices, tool.follows, tool.peer)
		})
		b.Run("health/"+tool.name, func(b *testing.B) {
			benchWatch(b, tool.health, on(tool.health), healthChange, benchServices, tool.follows, tool.peer)
		})
	}
}

// A change benchWatch times: make it, and say what the file holds once
// it arrived.
type benchChange func(b *testing.B, a *consultest.Agent, i, services int) (arrived func(data string) bool)

// registerChange registers one new instance of svc-0500 at an address no
// earlier change used.
func registerChange(b *testing.B, a *consultest.Agent, _, _ int) func(string) bool {
	n := benchChanges.Add(1)
	addr := fmt.Sprintf("10.250.%d.%d", (n/250)%250, n%250+1)
	node := fmt.Sprintf("bench-new-%d", n)
	_, err := a.Client.Catalog().Register(&api.CatalogRegistration{Node: node, Address: addr,
		Service: &api.AgentService{ID: "svc-0500", Service: "svc-0500", Address: addr, Port: 9500}}, nil)
	if err != nil {
		b.Fatal(err)
	}
	return func(data string) bool { return strings.Contains(data, `"`+addr+`"`) }
}

// healthChange flips the check of svc-0500's fifth instance (critical in
// the catalog as registered) between passing and critical, changing the
// check alone (no service registration), and waits for the address to
// enter or leave svc-0500's healthy key.
func healthChange(b *testing.B, a *consultest.Agent, i, services int) func(string) bool {
	n := (500 + (benchInstances-1)*(services/benchInstances)) % services
	node, addr := fmt.Sprintf("node-%04d", n), benchNodeAddr(n)
	status := api.HealthPassing
	if i%2 == 1 {
		status = api.HealthCritical
	}
	_, err := a.Client.Catalog().Register(&api.CatalogRegistration{Node: node, Address: addr, SkipNodeUpdate: true,
		Check: &api.AgentCheck{Node: node, CheckID: "c-svc-0500", Name: "c-svc-0500", Status: status, ServiceID: "svc-0500"}}, nil)
	if err != nil {
		b.Fatal(err)
	}
	return func(data string) bool {
		i := strings.Index(data, `"healthy_services::svc-0500::address":`)
		if i < 0 {
			return false
		}
		line, _, _ := strings.Cut(data[i:], "\n")
		return strings.Contains(line, `"`+addr+`"`) == (status == api.HealthPassing)
	}
}

// benchWatch starts a tool in watch mode, waits for its first render, then
// times each change until the file holds it, and reports the peak of the
// connections it held to the agent and the bytes it read per change.
//
// For a peer (consul-template), not delivering is what is measured: a
// first render not within 5 minutes is reported as no-first-render 1, a
// change not within a minute ends the row with the changes delivered
// before it and undelivered-within-60s 1, and no latency figures (a p99
// of the changes that did arrive would flatter it).
func benchWatch(b *testing.B, a *consultest.Agent, argv func(string, bool) []string, change benchChange, services int, follows, peer bool) {
	lastSvc := fmt.Sprintf("svc-%04d", services-1)
	dir := b.TempDir()
	out := filepath.Join(dir, "services.yaml")
	args := argv(out, true)
	// The tool talks to the agent through a counting proxy: the bytes the
	// agent sent it per change, and its connections, are measured on the
	// wire (not its file reads).
	proxy := newCountingProxy(b, a.HTTPAddr)
	for i, arg := range args {
		if arg == a.HTTPAddr {
			args[i] = proxy.addr
		}
	}
	cmd := exec.Command(args[0], args[1:]...)
	stderr := &testutil.SyncBuffer{}
	cmd.Stderr = stderr
	w, err := newDirWatch(dir)
	if err != nil {
		b.Fatal(err)
	}
	defer w.close()
	if err := cmd.Start(); err != nil {
		b.Fatal(err)
	}
	stopped := false
	stop := func() {
		if stopped {
			return
		}
		stopped = true
		// Both tools stop on SIGINT; the consul-template binary ignores
		// SIGTERM while its blocking queries run.
		_ = cmd.Process.Signal(syscall.SIGINT)
		done := make(chan struct{})
		go func() { _ = cmd.Wait(); close(done) }()
		select {
		case <-done:
		case <-time.After(15 * time.Second):
			_ = cmd.Process.Kill()
			<-done
		}
	}
	defer stop()
	// The first render must hold every service before changes are timed.
	if err := w.waitFor(out, lastSvc, 5*time.Minute); err != nil {
		if msg := proxy.problem(); msg != "" {
			b.Fatalf("first render: %v: not the tool's doing: %s", err, msg)
		}
		if peer {
			b.Logf("first render: %v; its stderr ends:\n%s", err, tail(stderr.String(), 2000))
			b.ReportMetric(1, "no-first-render")
			return
		}
		b.Fatalf("first render: %v\n%s", err, stderr.String())
	}
	if follows {
		deadline := time.Now().Add(2 * time.Minute)
		for !strings.Contains(stderr.String(), "following the catalog change feed") {
			if time.Now().After(deadline) {
				b.Fatalf("the watch never followed the feed:\n%s", stderr.String())
			}
			time.Sleep(50 * time.Millisecond)
		}
	}
	var lat []time.Duration
	read0 := proxy.fromAgent.Load()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		t0 := time.Now()
		arrived := change(b, a, i, services)
		if err := w.waitUntil(out, arrived, time.Minute); err != nil {
			if msg := proxy.problem(); msg != "" {
				b.Fatalf("change %d: %v: not the tool's doing: %s", i, err, msg)
			}
			if peer {
				b.Logf("change %d: %v; its stderr ends:\n%s", i, err, tail(stderr.String(), 2000))
				b.ReportMetric(float64(i), "delivered")
				b.ReportMetric(1, "undelivered-within-60s")
				return
			}
			b.Fatalf("change %d: %v\n%s", i, err, stderr.String())
		}
		lat = append(lat, time.Since(t0))
	}
	b.StopTimer()
	if follows && strings.Contains(stderr.String(), "watching the catalog directly") {
		b.Fatalf("the watch left the feed during the changes:\n%s", stderr.String())
	}
	read := proxy.fromAgent.Load() - read0
	peakRSS := vmHWM(cmd.Process.Pid)
	stop()
	if msg := proxy.problem(); msg != "" {
		b.Fatalf("the figures went through a failing proxy: %s", msg)
	}
	b.ReportMetric(float64(proxy.peak.Load()), "peak-conns")
	b.ReportMetric(float64(read)/float64(b.N)/1024, "agent-KiB/change")
	sort.Slice(lat, func(i, j int) bool { return lat[i] < lat[j] })
	b.ReportMetric(float64(lat[len(lat)/2].Microseconds())/1000, "median-ms")
	// p99: the smallest latency at least 99% of the changes did not exceed
	// (with fewer than 100 changes, the max).
	p99 := lat[(len(lat)*99+99)/100-1]
	b.ReportMetric(float64(p99.Microseconds())/1000, "p99-ms")
	b.ReportMetric(float64(lat[len(lat)-1].Microseconds())/1000, "max-ms")
	if peakRSS == 0 {
		b.Fatalf("%s had exited before the changes ended: no peak RSS to report\n%s", args[0], tail(stderr.String(), 2000))
	}
	b.ReportMetric(float64(peakRSS)/1024, "peak-RSS-MiB")
}

// benchChanges numbers the instances benchWatch adds, across runs.
var benchChanges atomic.Int64

// benchNodeAddr is node-NNNN's address in the benchmark catalog.
func benchNodeAddr(node int) string {
	return fmt.Sprintf("10.%d.%d.%d", 1+node/62500, (node/250)%250, node%250+1)
}

func registerBenchCatalog(b *testing.B, c *api.Client, benchServices int) {
	type job struct{ svc, k int }
	jobs := make(chan job)
	var wg sync.WaitGroup
	var mu sync.Mutex
	var firstErr error
	for w := 0; w < 16; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for j := range jobs {
				node := (j.svc + j.k*(benchServices/benchInstances)) % benchServices
				addr := benchNodeAddr(node)
				name := fmt.Sprintf("svc-%04d", j.svc)
				status := api.HealthPassing
				if j.k == 4 {
					status = api.HealthCritical
				}
				_, err := c.Catalog().Register(&api.CatalogRegistration{
					Node: fmt.Sprintf("node-%04d", node), Address: addr,
					Service: &api.AgentService{ID: name, Service: name, Address: addr, Port: 9000 + j.svc%1000,
						TaggedAddresses: map[string]api.ServiceAddress{"eth0": {Address: "192.168." + addr[3:], Port: 9000}}},
					Check: &api.AgentCheck{Node: fmt.Sprintf("node-%04d", node), CheckID: "c-" + name, Name: "c-" + name, Status: status, ServiceID: name},
				}, nil)
				if err != nil {
					mu.Lock()
					if firstErr == nil {
						firstErr = err
					}
					mu.Unlock()
				}
			}
		}()
	}
	for s := 0; s < benchServices; s++ {
		for k := 0; k < benchInstances; k++ {
			jobs <- job{s, k}
		}
	}
	close(jobs)
	wg.Wait()
	if firstErr != nil {
		b.Fatalf("register: %v", firstErr)
	}
}

func repoRootDir(b *testing.B) string {
	dir, err := os.Getwd()
	if err != nil {
		b.Fatal(err)
	}
	return filepath.Dir(dir) // tests run in hiera/
}

// dirWatch waits for a file to be replaced or written using inotify, so
// timing does not depend on a polling interval and costs no CPU meanwhile.
type dirWatch struct{ fd int }

func newDirWatch(dir string) (*dirWatch, error) {
	fd, err := syscall.InotifyInit1(syscall.IN_CLOEXEC)
	if err != nil {
		return nil, err
	}
	if _, err := syscall.InotifyAddWatch(fd, dir, syscall.IN_MOVED_TO|syscall.IN_CLOSE_WRITE|syscall.IN_CREATE); err != nil {
		syscall.Close(fd)
		return nil, err
	}
	return &dirWatch{fd: fd}, nil
}

func (w *dirWatch) close() { syscall.Close(w.fd) }

// waitFor returns when path contains want, checking after every event in
// its directory.
func (w *dirWatch) waitFor(path, want string, limit time.Duration) error {
	return w.waitUntil(path, func(data string) bool { return strings.Contains(data, want) }, limit)
}

// waitUntil returns when path's content satisfies ok, checking after
// every event in its directory.
func (w *dirWatch) waitUntil(path string, ok func(string) bool, limit time.Duration) error {
	deadline := time.Now().Add(limit)
	buf := make([]byte, 64*(syscall.SizeofInotifyEvent+syscall.NAME_MAX+1))
	for {
		if data, err := os.ReadFile(path); err == nil && ok(string(data)) {
			return nil
		}
		left := time.Until(deadline)
		if left <= 0 {
			return fmt.Errorf("%s does not hold the change after %v", path, limit)
		}
		// Wait for the next event, at most until the deadline.
		var rfds syscall.FdSet
		rfds.Bits[w.fd/64] |= 1 << (uint(w.fd) % 64)
		tv := syscall.NsecToTimeval(min(left, time.Second).Nanoseconds())
		n, err := syscall.Select(w.fd+1, &rfds, nil, nil, &tv)
		if err != nil && err != syscall.EINTR {
			return err
		}
		if n > 0 {
			if _, err := syscall.Read(w.fd, buf); err != nil {
				return err
			}
		}
	}
}
