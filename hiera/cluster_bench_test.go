package hiera

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"github.com/hashicorp/consul/api"

	"github.com/jiocloud/orchestrate/internal/consultest"
	"github.com/jiocloud/orchestrate/internal/testutil"
)

// BenchmarkEightNodesTrickle: a Consul server and eight client agents
// with Consul's default settings, a catalog of 500 services x 2 instances,
// and the hiera-services binary in --watch on every node against its own
// agent (through a counting proxy), as docs/hiera-services.md describes. After an
// idle window of 10 s, b.N check changes arrive one every 200 ms (a
// steady trickle), each flipping one instance's check. Reported: the CPU
// of the server, of a client agent and of a hiera-services (means, in
// percent of one core, idle and during the trickle), the bytes each node
// received from its agent per change, and the most connections a node
// held. Every node's file holds the last state at the end.
func BenchmarkEightNodesTrickle(b *testing.B) {
	hsBin := hieraServicesBinary(b)
	dir := b.TempDir()
	server := consultest.Start(b, consultest.Options{NodeName: "server"})
	var clients []*consultest.Agent
	for i := range 8 {
		clients = append(clients, consultest.Start(b, consultest.Options{NodeName: fmt.Sprintf("node%d", i), JoinLAN: server.SerfLANAddr()}))
	}
	const services = 500
	hostOf := func(s, k int) (string, string) {
		h := (s + k*250) % services
		return fmt.Sprintf("host%03d", h), fmt.Sprintf("10.3.%d.%d", h/250, h%250+1)
	}
	for s := range services {
		for k := range 2 {
			node, addr := hostOf(s, k)
			register(b, server.Client, inst{node: node, nodeAddr: addr, svc: fmt.Sprintf("svc%03d", s), port: 7000 + s, status: "passing"})
		}
	}
	type nodeRun struct {
		out   string
		proxy *countingProxy
		cmd   *exec.Cmd
		logs  *bytes.Buffer
	}
	var runs []*nodeRun
	for i, c := range clients {
		r := &nodeRun{out: filepath.Join(dir, fmt.Sprintf("node%d.yaml", i)), proxy: newCountingProxy(b, c.HTTPAddr), logs: &bytes.Buffer{}}
		r.cmd = exec.Command(hsBin, "--consul-addr", r.proxy.addr, "--out", r.out, "--watch")
		r.cmd.Stdout, r.cmd.Stderr = r.logs, r.logs
		if err := r.cmd.Start(); err != nil {
			b.Fatal(err)
		}
		runs = append(runs, r)
	}
	defer func() {
		for _, r := range runs {
			_ = r.cmd.Process.Signal(os.Interrupt)
			_ = r.cmd.Wait()
		}
	}()
	holds := func(r *nodeRun, svc, state string) bool {
		data, err := os.ReadFile(r.out)
		if err != nil {
			return false
		}
		i := bytes.Index(data, []byte(`"healthy_services::`+svc+`::address": [`))
		if i < 0 {
			return false
		}
		line, _, _ := bytes.Cut(data[i:], []byte("\n"))
		n := bytes.Count(line, []byte(`"10.3.`))
		return (state == api.HealthPassing && n == 2) || (state == api.HealthCritical && n == 1)
	}
	waitAll := func(what, svc, state string) {
		deadline := time.Now().Add(2 * time.Minute)
		for _, r := range runs {
			for !holds(r, svc, state) {
				if time.Now().After(deadline) {
					b.Fatalf("%s: not every node's file holds it\n%s", what, r.logs.String())
				}
				time.Sleep(20 * time.Millisecond)
			}
		}
	}
	waitAll("first render", "svc499", api.HealthPassing)

	pids := func() (srv int, agents, hs []int) {
		for _, c := range clients {
			agents = append(agents, c.Pid())
		}
		for _, r := range runs {
			hs = append(hs, r.cmd.Process.Pid)
		}
		return server.Pid(), agents, hs
	}
	srvPid, agentPids, hsPids := pids()
	type cpu struct{ server, agent, hs float64 }
	sample := func() cpu {
		return cpu{server: testutil.ProcCPUSeconds(srvPid), agent: meanCPU(agentPids), hs: meanCPU(hsPids)}
	}
	percent := func(a, z cpu, d time.Duration) cpu {
		s := d.Seconds() / 100
		return cpu{server: (z.server - a.server) / s, agent: (z.agent - a.agent) / s, hs: (z.hs - a.hs) / s}
	}

	idle0, t0 := sample(), time.Now()
	time.Sleep(10 * time.Second) // the window of the idle figure
	idle := percent(idle0, sample(), time.Since(t0))

	var bytes0 []int64
	for _, r := range runs {
		bytes0 = append(bytes0, r.proxy.fromAgent.Load())
	}
	last := map[string]string{}
	b.ResetTimer()
	busy0, t1 := sample(), time.Now()
	tick := time.NewTicker(200 * time.Millisecond)
	for i := 0; i < b.N; i++ {
		<-tick.C
		s := (i * 7) % services
		state := api.HealthCritical
		if last[fmt.Sprint(s)] == api.HealthCritical {
			state = api.HealthPassing
		}
		last[fmt.Sprint(s)] = state
		node, addr := hostOf(s, 0)
		svc := fmt.Sprintf("svc%03d", s)
		_, err := server.Client.Catalog().Register(&api.CatalogRegistration{Node: node, Address: addr, SkipNodeUpdate: true,
			Check: &api.AgentCheck{Node: node, CheckID: "check-" + svc, Name: "check " + svc, Status: state, ServiceID: svc}}, nil)
		if err != nil {
			b.Fatal(err)
		}
	}
	tick.Stop()
	// The last change reaches every node; then the window closes.
	lastSvc := (b.N - 1) * 7 % services
	waitAll("the last change", fmt.Sprintf("svc%03d", lastSvc), last[fmt.Sprint(lastSvc)])
	busy := percent(busy0, sample(), time.Since(t1))
	b.StopTimer()

	var perChange float64
	var peak int64
	for i, r := range runs {
		perChange += float64(r.proxy.fromAgent.Load()-bytes0[i]) / float64(b.N)
		peak = max(peak, r.proxy.peak.Load())
	}
	b.ReportMetric(perChange/float64(len(runs))/1024, "node-KiB/change")
	b.ReportMetric(float64(peak), "peak-conns/node")
	b.ReportMetric(idle.server, "server-idle-%cpu")
	b.ReportMetric(busy.server, "server-trickle-%cpu")
	b.ReportMetric(idle.agent, "client-agent-idle-%cpu")
	b.ReportMetric(busy.agent, "client-agent-trickle-%cpu")
	b.ReportMetric(idle.hs, "hiera-idle-%cpu")
	b.ReportMetric(busy.hs, "hiera-trickle-%cpu")
}

// meanCPU is the mean CPU time of the processes.
func meanCPU(pids []int) float64 {
	var sum float64
	for _, p := range pids {
		sum += testutil.ProcCPUSeconds(p)
	}
	return sum / float64(len(pids))
}
