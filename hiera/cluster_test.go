package hiera

import (
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/hashicorp/consul/api"

	"github.com/jiocloud/orchestrate/internal/consultest"
	"github.com/jiocloud/orchestrate/internal/testutil"
)

// TestEightNodesDefaultAgents: a Consul server and eight client agents,
// all with Consul's default limits, and a catalog of 500 services x 2
// instances. hiera-services runs on each node against its own client
// agent, as docs/hiera-services.md describes, in once mode and in --watch at the same
// time on all eight: every node renders every service, and a check change
// reaches every node's --watch file.
func TestEightNodesDefaultAgents(t *testing.T) {
	server := consultest.Start(t, consultest.Options{NodeName: "server"})
	var clients []*consultest.Agent
	for i := range 8 {
		clients = append(clients, consultest.Start(t, consultest.Options{NodeName: fmt.Sprintf("node%d", i), JoinLAN: server.SerfLANAddr()}))
	}
	for s := range 500 {
		for k := range 2 {
			node := fmt.Sprintf("host%03d", (s+k*250)%500)
			addr := fmt.Sprintf("10.2.%d.%d", ((s+k*250)%500)/250, (s+k*250)%250+1)
			register(t, server.Client, inst{node: node, nodeAddr: addr, svc: fmt.Sprintf("svc%03d", s), port: 7000 + s, status: "passing"})
		}
	}
	// Once mode on every node at once.
	var wg sync.WaitGroup
	for i, c := range clients {
		wg.Add(1)
		go func() {
			defer wg.Done()
			out := outPath(t)
			if code, stderr := runHS(t, c, "--out", out, "--log-level", "warn"); code != 0 {
				t.Errorf("node%d once: exit %d\n%s", i, code, tail(stderr, 2000))
				return
			}
			if keys := readKeys(t, out); len(keys["services::svc499::address"].([]any)) != 2 {
				t.Errorf("node%d once: svc499 has %v", i, keys["services::svc499::address"])
			}
		}()
	}
	wg.Wait()
	if t.Failed() {
		return
	}

	// --watch on every node at once, then one check turns critical.
	outs := make([]string, len(clients))
	watches := make([]*watching, len(clients))
	for i, c := range clients {
		outs[i] = outPath(t)
		watches[i] = startWatch(c.HTTPAddr, outs[i])
		defer watches[i].cancel()
	}
	healthy := func(i int) int {
		v, _ := keysIfAny(t, outs[i])["healthy_services::svc123::address"].([]any)
		return len(v)
	}
	for i := range clients {
		testutil.Eventually(t, 60*time.Second, fmt.Sprintf("node%d's first --watch render", i), func() bool { return healthy(i) == 2 }, watches[i].logs.String)
	}
	start := time.Now()
	_, err := server.Client.Catalog().Register(&api.CatalogRegistration{Node: "host123", Address: "10.2.0.124", SkipNodeUpdate: true,
		Check: &api.AgentCheck{Node: "host123", CheckID: "check-svc123", Name: "check svc123", Status: api.HealthCritical, ServiceID: "svc123"}}, nil)
	if err != nil {
		t.Fatal(err)
	}
	for i := range clients {
		testutil.Eventually(t, 10*time.Second, fmt.Sprintf("node%d's file follows the check", i), func() bool { return healthy(i) == 1 }, watches[i].logs.String)
	}
	t.Logf("a check change reached all 8 nodes' files within %s", time.Since(start).Round(time.Millisecond))
	for i, w := range watches {
		if code := w.stop(t); code != 0 {
			t.Errorf("node%d's --watch exited %d", i, code)
		}
	}
}
