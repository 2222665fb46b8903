package packaging_test

import (
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/hashicorp/consul/api"

	"github.com/jiocloud/orchestrate/internal/store"
	"github.com/jiocloud/orchestrate/internal/testutil"
)

// The catalog change feed's keys under the default prefix.
var (
	feedLeader   = store.HieraFeedLeaderKey("orchestrate")
	feedServices = store.HieraFeedServicesDir("orchestrate")
)

// background is a binary started in the background with a token file (see
// aclWorld.run), until stop.
type background struct {
	cmd  *exec.Cmd
	logs *testutil.SyncBuffer
	done chan struct{}
	code int
}

// start runs a binary in the background with the token in tokenFile and
// nothing else, as run does; the test's end stops it.
func (w *aclWorld) start(t *testing.T, tokenFile, name string, args ...string) *background {
	t.Helper()
	cmd := exec.Command(filepath.Join(w.bin, name), args...)
	for _, kv := range w.agent.Env() {
		if !strings.HasPrefix(kv, "CONSUL_HTTP_TOKEN=") && !strings.HasPrefix(kv, "ORCHESTRATE_") {
			cmd.Env = append(cmd.Env, kv)
		}
	}
	cmd.Env = append(cmd.Env, "CONSUL_HTTP_TOKEN_FILE="+tokenFile)
	d := &background{cmd: cmd, logs: &testutil.SyncBuffer{}, done: make(chan struct{})}
	cmd.Stdout, cmd.Stderr = d.logs, d.logs
	if err := cmd.Start(); err != nil {
		t.Fatalf("start %s: %v", name, err)
	}
	go func() {
		_ = cmd.Wait()
		d.code = cmd.ProcessState.ExitCode()
		close(d.done)
	}()
	t.Cleanup(func() { d.stop(t) })
	return d
}

// stop sends SIGTERM, waits for the exit (killing it after 20 s) and
// returns the exit code; a second stop returns the same.
func (d *background) stop(t *testing.T) int {
	t.Helper()
	select {
	case <-d.done:
		return d.code
	default:
	}
	_ = d.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-d.done:
	case <-time.After(20 * time.Second):
		_ = d.cmd.Process.Kill()
		<-d.done
		t.Errorf("%s did not stop on SIGTERM within 20 s:\n%s", d.cmd.Path, d.logs.String())
	}
	return d.code
}

// feedHead reads the feed's lock key with the management token: the head
// and the session holding the lock ("" when none does or no key).
func (w *aclWorld) feedHead(t *testing.T) (store.FeedHead, string) {
	t.Helper()
	p, _, err := w.admin.KV().Get(feedLeader, nil)
	if err != nil {
		t.Fatal(err)
	}
	if p == nil {
		return store.FeedHead{}, ""
	}
	var h store.FeedHead
	if err := json.Unmarshal(p.Value, &h); err != nil {
		t.Fatalf("%s holds %q: %v", feedLeader, p.Value, err)
	}
	return h, p.Session
}

// publishing starts hiera-services --publish with the token in tokenFile
// and waits until a session holds the feed's lock and the head says
// "ready": true.
func (w *aclWorld) publishing(t *testing.T, tokenFile string) *background {
	t.Helper()
	pub := w.start(t, tokenFile, "hiera-services", "--publish")
	testutil.Eventually(t, 30*time.Second, "the publisher to hold the lock with a ready head", func() bool {
		h, session := w.feedHead(t)
		return session != "" && h.Ready
	}, pub.logs.String)
	return pub
}

// The shipped hiera-publisher.hcl lets hiera-services --publish take the
// feed's lock and publish: the head is ready under its session, every
// service has its record, a registration is recorded; it writes nothing
// else, and a graceful stop releases the lock. Without each of its rules
// the feed never becomes ready (a token that cannot see the whole catalog
// must not vouch for it).
func TestACLHieraPublisherPolicy(t *testing.T) {
	t.Parallel()
	w := newACLWorld(t)
	tok := w.token(t, policyText(t, "hiera-publisher.hcl", ""))
	pub := w.publishing(t, tok)
	// The publisher says so once the ready head is written: a moment
	// after the head can be read.
	testutil.Eventually(t, 10*time.Second, "the publisher's log to say the feed is ready", func() bool {
		return strings.Contains(pub.logs.String(), "the catalog change feed is ready")
	}, pub.logs.String)
	st, err := store.New(w.admin, "orchestrate")
	if err != nil {
		t.Fatal(err)
	}
	records, err := st.FeedServices(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range []string{"consul", "web"} {
		if records[s].Index == 0 {
			t.Errorf("no record of %s in the feed: %+v", s, records)
		}
	}
	before := records["web"].Index
	_, err = w.admin.Catalog().Register(&api.CatalogRegistration{
		Node: "web3", Address: "10.0.0.3",
		Service: &api.AgentService{ID: "web", Service: "web", Port: 80},
	}, nil)
	if err != nil {
		t.Fatal(err)
	}
	testutil.Eventually(t, 20*time.Second, "the registration in web's record and in the head", func() bool {
		records, err := st.FeedServices(context.Background())
		if err != nil || records["web"].Index <= before {
			return false
		}
		h, _ := w.feedHead(t)
		for _, e := range h.Entries {
			if e.Service == "web" && e.Index == records["web"].Index {
				return true
			}
		}
		return false
	}, pub.logs.String)
	if strings.Contains(pub.logs.String(), "Permission denied") {
		t.Errorf("the publisher was refused something:\n%s", pub.logs.String())
	}
	for k := range w.kvDump(t) {
		if !strings.HasPrefix(k, store.HieraFeedDir("orchestrate")) {
			t.Errorf("the publisher wrote %s, outside %s", k, store.HieraFeedDir("orchestrate"))
		}
	}
	if code := pub.stop(t); code != 0 {
		t.Errorf("publisher: exit %d after SIGTERM:\n%s", code, pub.logs.String())
	}
	if _, session := w.feedHead(t); session != "" {
		t.Errorf("the lock is still held by %s after a graceful stop", session)
	}

	for _, tc := range []struct {
		drop, refused string
		// add is a rule in place of the one dropped.
		add string
	}{
		{`key_prefix "orchestrate/hierafeed/"`, "Permission denied", ""},
		{`session_prefix ""`, "session:write", ""},
		{`service_prefix ""`, "", ""},
		// Part of the catalog: a feed of it would leave the nodes deaf
		// to the rest.
		{`service_prefix ""`, "may not read every service", `service "web" { policy = "read" }`},
	} {
		t.Run("without "+tc.drop+" "+tc.add, func(t *testing.T) {
			if _, err := w.admin.KV().DeleteTree(store.HieraFeedDir("orchestrate"), nil); err != nil {
				t.Fatal(err)
			}
			pub := w.start(t, w.token(t, policyText(t, "hiera-publisher.hcl", tc.drop)+"\n"+tc.add+"\n"), "hiera-services", "--publish")
			if tc.refused != "" {
				testutil.Eventually(t, 20*time.Second, "the refusal logged", func() bool {
					return strings.Contains(pub.logs.String(), tc.refused)
				}, pub.logs.String)
			} else {
				time.Sleep(5 * time.Second)
			}
			if h, session := w.feedHead(t); h.Ready && session != "" {
				t.Errorf("a ready feed without %s:\n%s", tc.drop, pub.logs.String())
			}
			if code := pub.stop(t); code != 0 {
				t.Errorf("publisher: exit %d after SIGTERM:\n%s", code, pub.logs.String())
			}
		})
	}
}

// The publisher's token writes the feed and nothing else under the
// prefix: not the desired version, not a host's record, not a key that
// merely starts like the feed's directory, not in a transaction mixed
// with a feed key; nor the catalog.
func TestACLHieraPublisherWritesOnlyTheFeed(t *testing.T) {
	t.Parallel()
	w := newACLWorld(t)
	if _, err := w.admin.KV().Put(&api.KVPair{Key: "orchestrate/current_version", Value: []byte("v1")}, nil); err != nil {
		t.Fatal(err)
	}
	must(t, "web1's own version", w.run(t, w.hostToken(t, "web1", "web", tokenOpts{}), "orchestrate", "report-version", "--host", "web1", "v1"), 0, "")
	tok := w.token(t, policyText(t, "hiera-publisher.hcl", ""))
	kv := w.clientOf(t, tok).KV()
	before := w.kvDump(t)
	denied := func(what string, err error) {
		t.Helper()
		if err == nil || !strings.Contains(err.Error(), "Permission denied") {
			t.Errorf("the publisher's token: %s: %v, want Permission denied", what, err)
		}
	}
	for _, k := range []string{
		"orchestrate/current_version", "orchestrate/hosts/web1/version", "orchestrate/hosts/x/version",
		"orchestrate/reaper/leader", "orchestrate/roles/web/desired", "orchestrate/wake/web",
		"orchestrate/hierafeedx", "orchestrate/hierafeed", "other/hierafeed/leader",
	} {
		_, err := kv.Put(&api.KVPair{Key: k, Value: []byte("forged")}, nil)
		denied("put "+k, err)
		_, err = kv.Delete(k, nil)
		denied("delete "+k, err)
	}
	_, err := kv.DeleteTree("orchestrate/", nil)
	denied("delete tree orchestrate/", err)
	ok, resp, _, err := kv.Txn(api.KVTxnOps{
		{Verb: api.KVSet, Key: feedServices + "x", Value: []byte(`{"index": 1}`)},
		{Verb: api.KVSet, Key: "orchestrate/current_version", Value: []byte("forged")},
	}, nil)
	if err == nil && (ok || !strings.Contains(store.TxnErrors(resp), "Permission denied")) {
		t.Errorf("a transaction writing a feed record and current_version: ok %v, %s", ok, store.TxnErrors(resp))
	}
	_, err = w.clientOf(t, tok).Catalog().Register(&api.CatalogRegistration{
		Node: "web1", Address: "10.0.0.1", Service: &api.AgentService{ID: "forged", Service: "forged", Port: 1},
	}, nil)
	denied("catalog register", err)
	w.sameKV(t, "the publisher's writes outside the feed", before)
	// The feed itself it writes.
	if _, err := kv.Put(&api.KVPair{Key: feedServices + "x", Value: []byte(`{"index": 1}`)}, nil); err != nil {
		t.Errorf("the publisher's token writing %sx: %v", feedServices, err)
	}
}

// A node's token as shipped (node.hcl, its host policy, its node
// identity) reads the feed and writes none of it: no put, delete,
// check-and-set or transaction on the lock key or a record, no lock
// acquired with a session of its own node, before a publisher runs and
// while one does; and hiera-services --watch with it follows the feed,
// renders the catalog and a registration through it.
func TestACLHieraFeedNodeToken(t *testing.T) {
	t.Parallel()
	w := newACLWorld(t)
	// The agent's own node, so its host policy grants it sessions there.
	host := w.agent.NodeName
	node := w.hostToken(t, host, "web", tokenOpts{})
	c := w.clientOf(t, node)
	kv := c.KV()
	session, _, err := c.Session().Create(&api.SessionEntry{Node: host, TTL: "30s", Behavior: api.SessionBehaviorRelease}, nil)
	if err != nil {
		t.Fatalf("a session on the node's own node: %v", err)
	}
	denied := func(what string, err error) {
		t.Helper()
		if err == nil || !strings.Contains(err.Error(), "Permission denied") {
			t.Errorf("the node's token: %s: %v, want Permission denied", what, err)
		}
	}
	head := []byte(`{"ready": true, "entries": [{"service": "web", "seq": 1, "index": 1}]}`)
	forge := func(phase string, publishing bool) {
		t.Helper()
		before := w.kvDump(t)
		for _, k := range []string{feedLeader, feedServices + "x", feedServices + "web"} {
			_, err := kv.Put(&api.KVPair{Key: k, Value: head}, nil)
			denied(phase+": put "+k, err)
			_, _, err = kv.CAS(&api.KVPair{Key: k, Value: head}, nil)
			denied(phase+": cas "+k, err)
			_, err = kv.Delete(k, nil)
			denied(phase+": delete "+k, err)
			_, _, err = kv.Acquire(&api.KVPair{Key: k, Value: head, Session: session}, nil)
			denied(phase+": acquire "+k, err)
		}
		_, err := kv.DeleteTree(store.HieraFeedDir("orchestrate"), nil)
		denied(phase+": delete tree", err)
		for _, ops := range []api.KVTxnOps{
			{{Verb: api.KVSet, Key: feedServices + "x", Value: []byte(`{"index": 1}`)}},
			{{Verb: api.KVLock, Key: feedLeader, Value: head, Session: session}},
			{
				{Verb: api.KVCheckSession, Key: feedLeader, Session: session},
				{Verb: api.KVSet, Key: feedLeader, Value: head, Flags: api.LockFlagValue},
			},
		} {
			ok, resp, _, err := kv.Txn(ops, nil)
			if err == nil && (ok || !strings.Contains(store.TxnErrors(resp), "Permission denied")) {
				t.Errorf("%s: a transaction %v: ok %v, %s", phase, ops[len(ops)-1].Verb, ok, store.TxnErrors(resp))
			}
		}
		// The api package's lock, as a publisher takes it, gives up.
		lock, err := c.LockOpts(&api.LockOptions{Key: feedLeader, Session: session, LockTryOnce: true, LockWaitTime: time.Second})
		if err != nil {
			t.Fatal(err)
		}
		if lost, err := lock.Lock(nil); err == nil && lost != nil {
			t.Errorf("%s: the node's token took the feed's lock", phase)
			_ = lock.Unlock()
		}
		if !publishing {
			w.sameKV(t, phase+": the node's writes on the feed", before)
			return
		}
		// The publisher writes the feed meanwhile (a service's index
		// moves): none of the node's forgeries may be there.
		pairs, _, err := w.admin.KV().List(store.HieraFeedDir("orchestrate"), nil)
		if err != nil {
			t.Fatal(err)
		}
		for _, p := range pairs {
			if string(p.Value) == string(head) || string(p.Value) == `{"index": 1}` || p.Session == session || p.Key == feedServices+"x" {
				t.Errorf("%s: the node's forgery landed: %s = %s (session %q)", phase, p.Key, p.Value, p.Session)
			}
		}
		feedKeys := 0
		for k := range before {
			if strings.HasPrefix(k, store.HieraFeedDir("orchestrate")) {
				feedKeys++
			}
		}
		if len(pairs) < feedKeys {
			t.Errorf("%s: %d keys under the feed, %d before the node's deletes", phase, len(pairs), feedKeys)
		}
	}
	forge("no publisher", false)
	if _, sess := w.feedHead(t); sess != "" {
		t.Fatalf("the feed's lock is held by %s with no publisher", sess)
	}

	pub := w.publishing(t, w.token(t, policyText(t, "hiera-publisher.hcl", "")))
	forge("a publisher running", true)
	h, sess := w.feedHead(t)
	if sess == session || !h.Ready {
		t.Errorf("the lock's holder %s (the node's session %s), ready %v", sess, session, h.Ready)
	}

	out := filepath.Join(t.TempDir(), "services.yaml")
	watch := w.start(t, node, "hiera-services", "--watch", "--out", out)
	testutil.Eventually(t, 30*time.Second, "the watch to follow the feed and render", func() bool {
		b, _ := os.ReadFile(out)
		return strings.Contains(watch.logs.String(), "following the catalog change feed") &&
			strings.Contains(string(b), `"services::web::address": ["10.0.0.1", "10.0.0.2"]`)
	}, watch.logs.String)
	_, err = w.admin.Catalog().Register(&api.CatalogRegistration{
		Node: "web3", Address: "10.0.0.3",
		Service: &api.AgentService{ID: "web", Service: "web", Port: 80},
	}, nil)
	if err != nil {
		t.Fatal(err)
	}
	testutil.Eventually(t, 30*time.Second, "a registration through the feed", func() bool {
		b, _ := os.ReadFile(out)
		return strings.Contains(string(b), `"services::web::address": ["10.0.0.1", "10.0.0.2", "10.0.0.3"]`)
	}, func() string { b, _ := os.ReadFile(out); return string(b) + "\n" + watch.logs.String() })
	for _, bad := range []string{"watching the catalog directly", "Permission denied", "level=ERROR"} {
		if strings.Contains(watch.logs.String(), bad) {
			t.Errorf("the watch logged %q:\n%s", bad, watch.logs.String())
		}
	}
	if code := watch.stop(t); code != 0 {
		t.Errorf("watch: exit %d after SIGTERM:\n%s", code, watch.logs.String())
	}
	if code := pub.stop(t); code != 0 {
		t.Errorf("publisher: exit %d after SIGTERM:\n%s", code, pub.logs.String())
	}
}
