package hiera

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/hashicorp/consul/api"

	"github.com/jiocloud/orchestrate/internal/consultest"
	"github.com/jiocloud/orchestrate/internal/store"
	"github.com/jiocloud/orchestrate/internal/store/schema"
	"github.com/jiocloud/orchestrate/internal/testutil"
)

// running is an in-process hiera-services run.
type running struct {
	logs   *testutil.SyncBuffer
	cancel context.CancelFunc
	done   chan int
}

func startHS(args ...string) *running {
	ctx, cancel := context.WithCancel(context.Background())
	r := &running{logs: &testutil.SyncBuffer{}, cancel: cancel, done: make(chan int, 1)}
	go func() { r.done <- Run(ctx, args, IO{Stdout: r.logs, Stderr: r.logs}) }()
	return r
}

// waitFollowing waits until the run (a --watch) follows the change feed.
func (r *running) waitFollowing(t *testing.T, limit time.Duration) {
	t.Helper()
	testutil.Eventually(t, limit, "the watch to follow the feed", func() bool {
		return strings.Contains(r.logs.String(), "following the catalog change feed")
	}, r.logs.String)
}

func (r *running) stop(t *testing.T) {
	t.Helper()
	r.cancel()
	select {
	case code := <-r.done:
		if code != 0 {
			t.Errorf("exit %d after cancel:\n%s", code, r.logs.String())
		}
	case <-time.After(20 * time.Second):
		t.Fatal("did not stop")
	}
}

// TestFeedFollowedAndFallBack: with a publisher running, --watch follows
// the change feed and renders registrations, check changes, a new service
// and a service leaving; when the publisher stops, it watches the catalog
// itself and misses nothing; when a publisher is back, it follows the
// feed again.
func TestFeedFollowedAndFallBack(t *testing.T) {
	a := consultest.Start(t, consultest.Options{})
	register(t, a.Client, inst{node: "db1", nodeAddr: "10.0.0.5", svc: "mysql", port: 3306, status: "passing"})
	register(t, a.Client, inst{node: "web1", nodeAddr: "10.0.1.5", svc: "web", port: 80, status: "passing"})
	out := outPath(t)
	pub := startHS("--consul-addr", a.HTTPAddr, "--publish")
	defer func() { pub.stop(t) }()
	w := startHS("--consul-addr", a.HTTPAddr, "--out", out, "--watch")
	defer w.stop(t)
	has := func(what string, ok func(string) bool) {
		t.Helper()
		testutil.Eventually(t, 20*time.Second, what, func() bool {
			data, _ := os.ReadFile(out)
			return ok(string(data))
		})
	}
	contains := func(s string) func(string) bool { return func(d string) bool { return strings.Contains(d, s) } }
	has("the first render", contains("10.0.1.5"))
	w.waitFollowing(t, 20*time.Second)

	register(t, a.Client, inst{node: "db2", nodeAddr: "10.0.0.6", svc: "mysql", port: 3306, status: "critical"})
	has("a registration through the feed", contains("10.0.0.6"))
	register(t, a.Client, inst{node: "db2", nodeAddr: "10.0.0.6", svc: "mysql", port: 3306, status: "passing"})
	has("a check change through the feed", func(d string) bool {
		return strings.Contains(d, `"healthy_services::mysql::address": ["10.0.0.5", "10.0.0.6"]`)
	})
	register(t, a.Client, inst{node: "cache1", nodeAddr: "10.0.2.5", svc: "redis", port: 6379, status: "passing"})
	has("a new service through the feed", contains(`"services::redis::address": ["10.0.2.5"]`))
	if _, err := a.Client.Catalog().Deregister(&api.CatalogDeregistration{Node: "web1", ServiceID: "web"}, nil); err != nil {
		t.Fatal(err)
	}
	has("a service leaving through the feed", func(d string) bool { return !strings.Contains(d, "services::web::") })
	if strings.Contains(w.logs.String(), "watching the catalog directly") {
		t.Fatalf("left the feed while the publisher ran:\n%s", w.logs.String())
	}

	pub.stop(t)
	testutil.Eventually(t, 30*time.Second, "the watch to notice the publisher gone", func() bool {
		return strings.Contains(w.logs.String(), "watching the catalog directly")
	})
	register(t, a.Client, inst{node: "db3", nodeAddr: "10.0.0.7", svc: "mysql", port: 3306, status: "passing"})
	has("a registration without a publisher", contains("10.0.0.7"))

	pub = startHS("--consul-addr", a.HTTPAddr, "--publish")
	testutil.Eventually(t, 40*time.Second, "the watch to follow the new publisher", func() bool {
		return strings.Count(w.logs.String(), "following the catalog change feed") == 2
	})
	register(t, a.Client, inst{node: "db4", nodeAddr: "10.0.0.8", svc: "mysql", port: 3306, status: "passing"})
	has("a registration through the new publisher's feed", contains("10.0.0.8"))
}

// TestFeedRecordsWrittenByHand: a record that does not decode is ignored,
// and a forged index only makes the node read that service again; the
// publisher overwrites both with the real index, and a node token-less
// write under a deposed session is refused.
func TestFeedRecordsWrittenByHand(t *testing.T) {
	a := consultest.Start(t, consultest.Options{})
	register(t, a.Client, inst{node: "db1", nodeAddr: "10.0.0.5", svc: "mysql", port: 3306, status: "passing"})
	kv := a.Client.KV()
	prefix := "orchestrate"
	for _, p := range []*api.KVPair{
		{Key: store.HieraFeedServiceKey(prefix, "mysql"), Value: []byte(`{"index": 18446744073709551615}`)},
		{Key: store.HieraFeedServiceKey(prefix, "junk"), Value: []byte(`not json`)},
		{Key: store.HieraFeedServicesDir(prefix) + "a/b", Value: []byte(`{"index": 5}`)},
	} {
		if _, err := kv.Put(p, nil); err != nil {
			t.Fatal(err)
		}
	}
	out := outPath(t)
	pub := startHS("--consul-addr", a.HTTPAddr, "--publish")
	defer pub.stop(t)
	w := startHS("--consul-addr", a.HTTPAddr, "--out", out, "--watch")
	defer w.stop(t)
	w.waitFollowing(t, 20*time.Second)
	st, err := store.New(a.Client, prefix)
	if err != nil {
		t.Fatal(err)
	}
	testutil.Eventually(t, 10*time.Second, "the publisher to overwrite the forged index", func() bool {
		f, err := st.FeedServices(context.Background())
		return err == nil && f["mysql"].Index < 1<<40 && f["mysql"].Index > 0
	})
	register(t, a.Client, inst{node: "db2", nodeAddr: "10.0.0.6", svc: "mysql", port: 3306, status: "passing"})
	testutil.Eventually(t, 20*time.Second, "a registration after the forged records", func() bool {
		data, _ := os.ReadFile(out)
		return strings.Contains(string(data), "10.0.0.6")
	})
	// A session that does not hold the lock writes nothing.
	sid, _, err := a.Client.Session().Create(&api.SessionEntry{TTL: "15s"}, nil)
	if err != nil {
		t.Fatal(err)
	}
	err = st.PublishFeed(context.Background(), sid, store.FeedHead{Ready: true}, map[string]store.FeedService{"mysql": {Index: 1}})
	if err != store.ErrNotFeedLeader {
		t.Fatalf("a write under a session without the lock: %v, want ErrNotFeedLeader", err)
	}
}

// TestPublishRefusesFileFlags: --publish renders nothing; file flags are
// usage errors.
func TestPublishRefusesFileFlags(t *testing.T) {
	var out, errb testutil.SyncBuffer
	code := Run(context.Background(), []string{"--publish", "--out", "/tmp/x.yaml"}, IO{Stdout: &out, Stderr: &errb})
	if code != 2 || !strings.Contains(errb.String(), "--out does not apply") {
		t.Fatalf("exit %d, %q; want 2 naming --out", code, errb.String())
	}
}

// TestFeedBurstBeyondTheHead: more changes at once than the head keeps
// (store.FeedHeadEntries): the node reads every record once and misses
// none of them.
func TestFeedBurstBeyondTheHead(t *testing.T) {
	a := consultest.Start(t, consultest.Options{})
	register(t, a.Client, inst{node: "db1", nodeAddr: "10.0.0.5", svc: "mysql", port: 3306, status: "passing"})
	out := outPath(t)
	pub := startHS("--consul-addr", a.HTTPAddr, "--publish")
	defer pub.stop(t)
	w := startHS("--consul-addr", a.HTTPAddr, "--out", out, "--watch")
	defer w.stop(t)
	w.waitFollowing(t, 20*time.Second)
	n := 3 * store.FeedHeadEntries
	// Registered in one transaction: one index, all of them at once.
	var ops api.TxnOps
	for i := range n {
		ops = append(ops, &api.TxnOp{Service: &api.ServiceTxnOp{Verb: api.ServiceSet, Node: "burst",
			Service: api.AgentService{ID: fmt.Sprintf("b%03d", i), Service: fmt.Sprintf("burst%03d", i), Port: 1000 + i}}})
	}
	if _, err := a.Client.Catalog().Register(&api.CatalogRegistration{Node: "burst", Address: "10.0.9.9"}, nil); err != nil {
		t.Fatal(err)
	}
	for len(ops) > 0 {
		k := min(len(ops), 64)
		ok, resp, _, err := a.Client.Txn().Txn(ops[:k], nil)
		if err != nil || !ok {
			t.Fatalf("register the burst: %v %+v", err, resp)
		}
		ops = ops[k:]
	}
	testutil.Eventually(t, 30*time.Second, "every service of the burst in the file", func() bool {
		data, _ := os.ReadFile(out)
		for i := range n {
			if !strings.Contains(string(data), fmt.Sprintf(`"services::burst%03d::port": [%d]`, i, 1000+i)) {
				return false
			}
		}
		return true
	}, w.logs.String)
	if strings.Contains(w.logs.String(), "watching the catalog directly") {
		t.Fatalf("left the feed during the burst:\n%s", w.logs.String())
	}
}

// TestFeedHungPublisher: a publisher that hangs (SIGSTOP) stops renewing
// its session; when Consul ends it, the nodes watch the catalog
// themselves and a registration made while it hangs reaches them.
func TestFeedHungPublisher(t *testing.T) {
	a := consultest.Start(t, consultest.Options{})
	register(t, a.Client, inst{node: "db1", nodeAddr: "10.0.0.5", svc: "mysql", port: 3306, status: "passing"})
	bin := hieraServicesBinary(t)
	pub := exec.Command(bin, "--consul-addr", a.HTTPAddr, "--publish")
	pubLogs := &testutil.SyncBuffer{}
	pub.Stdout, pub.Stderr = pubLogs, pubLogs
	if err := pub.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() {
		_ = pub.Process.Signal(syscall.SIGCONT)
		_ = pub.Process.Kill()
		_ = pub.Wait()
	}()
	out := outPath(t)
	w := startHS("--consul-addr", a.HTTPAddr, "--out", out, "--watch")
	defer w.stop(t)
	w.waitFollowing(t, 20*time.Second)
	// The publisher must have published what it had before it hangs: a
	// record it wrote just before (its first round) makes the node read
	// mysql from the catalog, which could then hold db2 already (the
	// fresh-clone run of 49ad140 failed so).
	waitFeedQuiet(t, a.Client)
	if err := pub.Process.Signal(syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	testutil.Eventually(t, 10*time.Second, "the publisher stopped", func() bool { return processState(pub.Process.Pid) == 'T' }, pubLogs.String)
	register(t, a.Client, inst{node: "db2", nodeAddr: "10.0.0.6", svc: "mysql", port: 3306, status: "passing"})
	// The session's TTL is 10 s; Consul ends it between TTL and 2 x TTL.
	took := testutil.Eventually(t, 45*time.Second, "the registration made while the publisher hangs", func() bool {
		data, _ := os.ReadFile(out)
		return strings.Contains(string(data), "10.0.0.6")
	}, w.logs.String)
	if !strings.Contains(w.logs.String(), "watching the catalog directly") {
		t.Fatalf("the change arrived without leaving the feed?\n%s", w.logs.String())
	}
	t.Logf("a hung publisher: the node watched the catalog itself and had the change %s after the hang", took.Round(time.Second))
}

// TestFeedUnreadable: a token that may not read the feed (an older node
// policy, another prefix) does not keep --watch from rendering: it
// watches the catalog itself, and registrations reach the file.
func TestFeedUnreadable(t *testing.T) {
	const mgmt = "5a1c0c2e-7d8e-4f4e-9b61-management00"
	a := consultest.Start(t, consultest.Options{ACLToken: mgmt})
	register(t, a.Client, inst{node: "db1", nodeAddr: "10.0.0.5", svc: "mysql", port: 3306, status: "passing"})
	pol, _, err := a.Client.ACL().PolicyCreate(&api.ACLPolicy{Name: "catalog-only",
		Rules: `node_prefix "" { policy = "read" }
service_prefix "" { policy = "read" }
agent_prefix "" { policy = "read" }`}, nil)
	if err != nil {
		t.Fatal(err)
	}
	tok, _, err := a.Client.ACL().TokenCreate(&api.ACLToken{Policies: []*api.ACLTokenPolicyLink{{ID: pol.ID}}}, nil)
	if err != nil {
		t.Fatal(err)
	}
	tf := filepath.Join(t.TempDir(), "token")
	if err := os.WriteFile(tf, []byte(tok.SecretID), 0o600); err != nil {
		t.Fatal(err)
	}
	mf := filepath.Join(t.TempDir(), "mgmt")
	if err := os.WriteFile(mf, []byte(mgmt), 0o600); err != nil {
		t.Fatal(err)
	}
	pub := startHS("--consul-addr", a.HTTPAddr, "--token-file", mf, "--publish")
	defer pub.stop(t)
	out := outPath(t)
	w := startHS("--consul-addr", a.HTTPAddr, "--token-file", tf, "--out", out, "--watch")
	defer w.stop(t)
	testutil.Eventually(t, 20*time.Second, "the first render", func() bool {
		data, _ := os.ReadFile(out)
		return strings.Contains(string(data), "10.0.0.5")
	}, w.logs.String)
	register(t, a.Client, inst{node: "db2", nodeAddr: "10.0.0.6", svc: "mysql", port: 3306, status: "passing"})
	testutil.Eventually(t, 20*time.Second, "a registration", func() bool {
		data, _ := os.ReadFile(out)
		return strings.Contains(string(data), "10.0.0.6")
	}, w.logs.String)
	if strings.Contains(w.logs.String(), "following the catalog change feed") {
		t.Fatalf("followed a feed it may not read:\n%s", w.logs.String())
	}
}

// TestBadPrefix: a --prefix that is no KV prefix is a usage error, in
// --watch and in --publish.
func TestBadPrefix(t *testing.T) {
	for _, args := range [][]string{
		{"--watch", "--out", filepath.Join(t.TempDir(), "s.yaml"), "--prefix", "a/../b"},
		{"--publish", "--prefix", "a/../b"},
	} {
		var out, errb testutil.SyncBuffer
		code := Run(context.Background(), append(args, "--consul-addr", "127.0.0.1:1"), IO{Stdout: &out, Stderr: &errb})
		if code != 2 || !strings.Contains(errb.String(), "--prefix") {
			t.Errorf("%v: exit %d, %q; want 2 naming --prefix", args, code, errb.String())
		}
	}
}

// TestFeedSurvivesAgentRestart: the node's agent restarting (as a Consul
// leader election, a failure every node meets at once) does not make the
// node leave the feed and read the whole catalog again; a registration
// made meanwhile reaches it through the feed.
func TestFeedSurvivesAgentRestart(t *testing.T) {
	server := consultest.Start(t, consultest.Options{NodeName: "server"})
	client := consultest.Start(t, consultest.Options{NodeName: "node1", JoinLAN: server.SerfLANAddr()})
	register(t, server.Client, inst{node: "db1", nodeAddr: "10.0.0.5", svc: "mysql", port: 3306, status: "passing"})
	pub := startHS("--consul-addr", server.HTTPAddr, "--publish")
	defer pub.stop(t)
	out := outPath(t)
	w := startHS("--consul-addr", client.HTTPAddr, "--out", out, "--watch")
	defer w.stop(t)
	w.waitFollowing(t, 30*time.Second)
	restarted := make(chan error, 1)
	go func() { restarted <- client.Restart(context.Background(), 3*time.Second) }()
	time.Sleep(time.Second)
	register(t, server.Client, inst{node: "db2", nodeAddr: "10.0.0.6", svc: "mysql", port: 3306, status: "passing"})
	if err := <-restarted; err != nil {
		t.Fatal(err)
	}
	testutil.Eventually(t, 30*time.Second, "the registration made while the agent was down", func() bool {
		data, _ := os.ReadFile(out)
		return strings.Contains(string(data), "10.0.0.6")
	}, w.logs.String)
	if strings.Contains(w.logs.String(), "watching the catalog directly") {
		t.Fatalf("left the feed for an agent restart:\n%s", w.logs.String())
	}
}

// waitFeedQuiet waits until the feed's head (written with every record, in
// one transaction) has not moved for a second.
func waitFeedQuiet(t *testing.T, c *api.Client) {
	t.Helper()
	key := store.HieraFeedLeaderKey(schema.DefaultPrefix)
	var idx uint64
	for deadline := time.Now().Add(30 * time.Second); time.Now().Before(deadline); {
		_, meta, err := c.KV().Get(key, &api.QueryOptions{WaitIndex: idx, WaitTime: time.Second})
		if err != nil {
			t.Fatal(err)
		}
		if idx != 0 && meta.LastIndex == idx {
			return
		}
		idx = meta.LastIndex
	}
	t.Fatal("the feed's head kept moving for 30 s")
}

// processState is the state letter of process pid (/proc/PID/stat: R, S,
// T for stopped, ...), 0 when it cannot be read.
func processState(pid int) byte {
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0
	}
	// The command name, in parentheses, may hold spaces: the state is the
	// first field after its closing one.
	i := strings.LastIndexByte(string(data), ')')
	if i < 0 || i+2 >= len(data) {
		return 0
	}
	return data[i+2]
}
