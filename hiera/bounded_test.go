package hiera

import (
	"bytes"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/consul/api"

	"github.com/jiocloud/orchestrate/internal/consultest"
	"github.com/jiocloud/orchestrate/internal/testutil"
)

// On an agent with Consul's default limits, one blocking query per
// service runs into limits.http_max_conns_per_client (200) past a couple
// of hundred services. hiera-services does not: once mode carries its
// queries over 6 connections, --watch over 7, and both render every one
// of 600 services; a check change reaches --watch's file. When the agent
// does refuse (another client took its connections), the cause is named
// once, with what to do.
func TestAgentConnectionLimitIsNamed(t *testing.T) {
	a := consultest.Start(t, consultest.Options{})
	for i := range 600 {
		register(t, a.Client, inst{node: fmt.Sprintf("n%d", i%20), nodeAddr: fmt.Sprintf("10.0.1.%d", i%20+1), svc: fmt.Sprintf("svc%03d", i), port: 8000 + i, status: "passing"})
	}
	// The real binary, so that the connections counted are its own.
	bin := hieraServicesBinary(t)
	out := outPath(t)
	// Counted by a proxy: a once-mode render of 600 services ends too
	// soon for sampling its sockets to be sure to see one.
	proxy := newCountingProxy(t, a.HTTPAddr)
	once := exec.Command(bin, "--consul-addr", proxy.addr, "--out", out)
	var stderr bytes.Buffer
	once.Stderr = &stderr
	err := once.Run()
	peak := int(proxy.peak.Load())
	if err != nil {
		t.Fatalf("once mode on a default agent with 600 services: %v, stderr:\n%s", err, tail(stderr.String(), 3000))
	}
	if keys := readKeys(t, out); keys["services::svc599::port"] == nil || keys["services::svc000::port"] == nil {
		t.Fatalf("once mode's file lacks services")
	}
	// The queries' 6 and the renderer's own client.
	if peak > onceConns+1 || peak == 0 {
		t.Fatalf("once mode held %d connections to the agent at once, want 1 to %d", peak, onceConns+1)
	}
	t.Logf("once mode, 600 services, default agent: at most %d connections at once", peak)

	// --watch on the same default agent: every service, within 8
	// connections (7 for its queries, 1 for the renderer's own client),
	// and a check change reaches the file.
	watchOut := outPath(t)
	watch := exec.Command(bin, "--consul-addr", a.HTTPAddr, "--out", watchOut, "--watch")
	logs := &testutil.SyncBuffer{}
	watch.Stdout, watch.Stderr = logs, logs
	if err := watch.Start(); err != nil {
		t.Fatal(err)
	}
	conns := countProcConns(watch.Process.Pid, a.Ports.HTTP)
	stopWatch := func() { _ = watch.Process.Signal(os.Interrupt); _ = watch.Wait() }
	defer stopWatch()
	testutil.Eventually(t, 20*time.Second, "--watch's first render of 600 services", func() bool {
		keys := keysIfAny(t, watchOut)
		return keys["services::svc599::port"] != nil
	}, logs.String)
	register(t, a.Client, inst{node: "n7", nodeAddr: "10.0.1.8", svc: "svc007", port: 8007, status: "critical"})
	took := testutil.Eventually(t, 5*time.Second, "the check change in the file", func() bool {
		healthy, ok := keysIfAny(t, watchOut)["healthy_services::svc007::address"].([]any)
		return ok && len(healthy) == 0
	}, logs.String)
	if peak := conns.stop(); peak > watchConns+1 || peak == 0 {
		t.Fatalf("--watch held %d connections to the agent at once, want 1 to %d", peak, watchConns+1)
	} else {
		t.Logf("--watch, 600 services, default agent: at most %d connections at once; a check change reached the file in %s", peak, took.Round(time.Millisecond))
	}
	stopWatch()

	// Another client on the same address takes the agent's 200
	// connections: the refusals are logged once, with their cause and what
	// to do, never as consul-template's bare "sending server error back to
	// caller"; when the connections are freed, --watch renders.
	var hogs []net.Conn
	for range 200 {
		c, err := net.Dial("tcp", a.HTTPAddr)
		if err != nil {
			t.Fatal(err)
		}
		hogs = append(hogs, c)
	}
	defer func() {
		for _, c := range hogs {
			c.Close()
		}
	}()
	blocked := outPath(t)
	bw := startWatch(a.HTTPAddr, blocked)
	defer bw.cancel()
	logs = bw.logs
	testutil.Eventually(t, 20*time.Second, "the refused queries logged with their cause", func() bool {
		return strings.Contains(logs.String(), "limits.http_max_conns_per_client")
	}, logs.String)
	time.Sleep(3 * time.Second) // many more refusals and retries
	text := logs.String()
	if n := strings.Count(text, "limits.http_max_conns_per_client"); n != 1 {
		t.Errorf("%d lines about the refused queries, want 1 (one cause):\n%s", n, tail(text, 3000))
	}
	if strings.Contains(text, "sending server error back to caller") {
		t.Errorf("the bare consul-template line is logged:\n%s", tail(text, 3000))
	}
	if n := strings.Count(text, "\n"); n > 20 {
		t.Errorf("%d log lines in 3 s of refusals:\n%s", n, tail(text, 3000))
	}
	for _, c := range hogs {
		c.Close()
	}
	testutil.Eventually(t, 40*time.Second, "a render once the connections are free", func() bool {
		return keysIfAny(t, blocked)["services::svc599::port"] != nil
	}, logs.String)

	// Now another client takes the rest of the agent's connections while
	// --watch runs: --watch keeps its own (at most 8, kept alive), so a
	// registration still reaches the file.
	hogs = hogs[:0]
	for range 200 {
		c, err := net.Dial("tcp", a.HTTPAddr)
		if err != nil {
			t.Fatal(err)
		}
		hogs = append(hogs, c)
	}
	// The change comes from another address (127.0.0.2), whose
	// connections the agent counts apart.
	other := api.DefaultConfig()
	other.Address = a.HTTPAddr
	other.Transport.DialContext = (&net.Dialer{LocalAddr: &net.TCPAddr{IP: net.IPv4(127, 0, 0, 2)}}).DialContext
	otherClient, err := api.NewClient(other)
	if err != nil {
		t.Fatal(err)
	}
	register(t, otherClient, inst{node: "late", nodeAddr: "10.0.9.9", svc: "svc001", port: 8001, status: "passing"})
	testutil.Eventually(t, 10*time.Second, "the registration in the file while the agent refuses new connections", func() bool {
		v, _ := keysIfAny(t, blocked)["services::svc001::address"].([]any)
		return len(v) == 2
	}, logs.String)
	for _, c := range hogs {
		c.Close()
	}
	bw.stop(t)
}

// TestWatchFollowsNodeChanges: --watch reads a service again when a node
// check of its node changes state (the check names no service) and when
// its node's address changes (the service list does not move then).
func TestWatchFollowsNodeChanges(t *testing.T) {
	a := consultest.Start(t, consultest.Options{})
	// The instance has no address of its own: the node's is its address.
	register(t, a.Client, inst{node: "db1", nodeAddr: "10.0.0.5", svc: "mysql", port: 3306, status: "passing"})
	out := outPath(t)
	w := startWatch(a.HTTPAddr, out)
	defer w.cancel()
	logs := w.logs
	list := func(key string) []any { v, _ := keysIfAny(t, out)[key].([]any); return v }
	testutil.Eventually(t, 15*time.Second, "the first render", func() bool { return len(list("healthy_services::mysql::address")) == 1 }, logs.String)
	nodeCheck := func(status string) {
		t.Helper()
		if _, err := a.Client.Catalog().Register(&api.CatalogRegistration{Node: "db1", Address: "10.0.0.5", SkipNodeUpdate: true,
			Check: &api.AgentCheck{Node: "db1", CheckID: "serfHealth-ish", Name: "node health", Status: status}}, nil); err != nil {
			t.Fatal(err)
		}
	}
	nodeCheck(api.HealthCritical)
	testutil.Eventually(t, 5*time.Second, "a critical node check takes mysql out of healthy_services", func() bool { return len(list("healthy_services::mysql::address")) == 0 }, logs.String)
	nodeCheck(api.HealthPassing)
	testutil.Eventually(t, 5*time.Second, "the node check passing again puts it back", func() bool { return len(list("healthy_services::mysql::address")) == 1 }, logs.String)
	if _, err := a.Client.Catalog().Register(&api.CatalogRegistration{Node: "db1", Address: "10.0.0.99"}, nil); err != nil {
		t.Fatal(err)
	}
	testutil.Eventually(t, 5*time.Second, "the node's new address in services::mysql::address", func() bool {
		l := list("services::mysql::address")
		return len(l) == 1 && l[0] == "10.0.0.99"
	}, logs.String)
	w.stop(t)
}

// queryTrouble logs a storm of refusals once per cause, names what to do
// for the agent's connection limit, and says when queries answer again.
func TestQueryTroubleOncePerCause(t *testing.T) {
	var buf bytes.Buffer
	q := &queryTrouble{log: slog.New(slog.NewTextHandler(&buf, nil))}
	for i := range 300 {
		q.fail(fmt.Errorf("health.service(svc%d|any): Unexpected response code: 429 (Your IP is issuing too many concurrent connections)", i))
		q.fail(fmt.Errorf(`health.service(svc%d|any): Get "http://127.0.0.1:8500/v1/health/service/svc%d": readLoopPeekFailLocked: <nil>`, i, i))
	}
	q.fail(errors.New("catalog.services: Get \"http://127.0.0.1:8500/v1/catalog/services\": dial tcp 127.0.0.1:8500: connect: connection refused"))
	q.fail(errors.New("health.service(svc1|any): Unexpected response code: 500 (rpc error: No cluster leader)"))
	q.ok()
	q.ok()
	text := buf.String()
	if n := strings.Count(text, "\n"); n != 3 {
		t.Fatalf("%d lines, want 3 (the limit, the 500, answering again):\n%s", n, text)
	}
	for _, want := range []string{"limits.http_max_conns_per_client", "No cluster leader", "consul queries answer again"} {
		if !strings.Contains(text, want) {
			t.Fatalf("no %q in:\n%s", want, text)
		}
	}
}
