package orchestrate

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/consul/api"

	"github.com/jiocloud/orchestrate/internal/consultest"
	"github.com/jiocloud/orchestrate/internal/rollout"
	"github.com/jiocloud/orchestrate/internal/store"
	"github.com/jiocloud/orchestrate/internal/testutil"
	"github.com/jiocloud/orchestrate/watch"
)

// restrictedMgmt is the management token of the node-restriction tests'
// agents: it only sets the scene (the operator's commands, policies,
// tokens); every host acts with a token of its own.
const restrictedMgmt = "5e0c7a1d-3b2f-4c8e-9a6d-1f2e3d4c5b6a"

// sharedNodeRules is the role every node holds besides its own policy:
// read the whole prefix and the catalog, ring any doorbell.
const sharedNodeRules = `key_prefix "orchestrate/" { policy = "read" }
key_prefix "orchestrate/wake/" { policy = "write" }
node_prefix "" { policy = "read" }
service_prefix "" { policy = "read" }
agent_prefix "" { policy = "read" }
`

// restricted is an ACL world (default deny) of two nodes, each with its
// own agent: web1 (the server) and web2 (a client agent joined to it).
type restricted struct {
	srv, cl *consultest.Agent
	mgmt    string // the management token's file, for the operator's commands
	dir     string
}

// newRestricted starts the agents; client, when set, gives the client
// agent's extra configuration and environment (for its watches), once
// tokens can be made.
func newRestricted(t *testing.T, client func(r *restricted) (hcl string, env []string)) *restricted {
	t.Helper()
	r := &restricted{dir: t.TempDir()}
	r.srv = consultest.Start(t, consultest.Options{NodeName: "web1", ACLToken: restrictedMgmt})
	r.mgmt = r.writeToken(t, "mgmt", restrictedMgmt)
	acl := r.srv.Client.ACL()
	pol, _, err := acl.PolicyCreate(&api.ACLPolicy{Name: "orchestrate-node-shared", Rules: sharedNodeRules}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, _, err := acl.RoleCreate(&api.ACLRole{Name: "orchestrate-node", Policies: []*api.ACLRolePolicyLink{{ID: pol.ID}}}, nil); err != nil {
		t.Fatal(err)
	}
	var hcl string
	var env []string
	if client != nil {
		hcl, env = client(r)
	}
	r.cl = consultest.Start(t, consultest.Options{NodeName: "web2", ACLToken: restrictedMgmt, JoinLAN: r.srv.SerfLANAddr(), HCL: hcl, Env: env, HandlerEnv: true})
	return r
}

// token mints host's token as the design has it: host's node identity,
// the shared role and its own policy (store.HostPolicyRules), and returns
// its secret and a file holding it.
func (r *restricted) token(t *testing.T, host, role string) (secret, file string) {
	t.Helper()
	rules, err := store.HostPolicyRules("orchestrate", host, role)
	if err != nil {
		t.Fatal(err)
	}
	acl := r.srv.Client.ACL()
	if _, _, err := acl.PolicyCreate(&api.ACLPolicy{Name: "orchestrate-host-" + host, Rules: rules}, nil); err != nil {
		t.Fatalf("the rendered host policy: %v\n%s", err, rules)
	}
	tok, _, err := acl.TokenCreate(&api.ACLToken{
		NodeIdentities: []*api.ACLNodeIdentity{{NodeName: host, Datacenter: "dc1"}},
		Roles:          []*api.ACLTokenRoleLink{{Name: "orchestrate-node"}},
		Policies:       []*api.ACLTokenPolicyLink{{Name: "orchestrate-host-" + host}},
	}, nil)
	if err != nil {
		t.Fatal(err)
	}
	return tok.SecretID, r.writeToken(t, host, tok.SecretID)
}

func (r *restricted) writeToken(t *testing.T, name, secret string) string {
	t.Helper()
	path := filepath.Join(r.dir, name+".token")
	if err := os.WriteFile(path, []byte(secret+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

// as is a client of agent a acting with secret.
func as(t *testing.T, a *consultest.Agent, secret string) *api.Client {
	t.Helper()
	c, err := api.NewClient(&api.Config{Address: a.HTTPAddr, Token: secret})
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// slotsAs takes slots through agent a with secret.
func slotsAs(t *testing.T, a *consultest.Agent, secret string) (*rollout.Slots, *store.Store) {
	t.Helper()
	st, err := store.New(as(t, a, secret), "orchestrate")
	if err != nil {
		t.Fatal(err)
	}
	s := rollout.New(st, as(t, a, secret).Session(), slog.New(slog.NewTextHandler(io.Discard, nil)))
	s.TTL = 10 * time.Second
	return s, st
}

// operator runs an operator's command with the management token.
func (r *restricted) operator(t *testing.T, args ...string) result {
	t.Helper()
	return cli(t, r.srv, "", append(args, "--token-file", r.mgmt)...)
}

// denied fails the test unless err is Consul's refusal (403).
func denied(t *testing.T, what string, err error) {
	t.Helper()
	if err == nil || !strings.Contains(err.Error(), "Permission denied") {
		t.Errorf("web1's token: %s: %v, want Permission denied", what, err)
	}
}

// txnErr turns a rolled-back transaction into an error.
func txnErr(ok bool, resp *api.KVTxnResponse, _ *api.QueryMeta, err error) error {
	if err != nil || ok {
		return err
	}
	return errors.New(store.TxnErrors(resp))
}

// A node's token writes only its own rollout records: web1's token,
// against web2's slot, web2's progress, the role's policy, resume,
// followers, an older state and another name's claim, is refused (403)
// and changes nothing; web2 still holds its slot, under the same claim,
// and the rollout is not halted. Each of these writes succeeded with the
// shipped node.hcl on the older layout (slot/<session>, state).
func TestNodeRestrictionRolloutAttacks(t *testing.T) {
	r := newRestricted(t, nil)
	ctx := context.Background()
	mustCode(t, r.operator(t, "rollout", "web", "--max-unavailable", "1", "--max-failures", "0"), 0, "rollout web")
	mustCode(t, r.operator(t, "trigger-update", "v2"), 0, "trigger-update v2")
	a, _ := r.token(t, "web1", "web")
	b, _ := r.token(t, "web2", "web")
	// web2 takes its slot with its own token, through its own agent.
	bSlots, _ := slotsAs(t, r.cl, b)
	held, v, err := bSlots.Acquire(ctx, "web", "web2", "v2", false)
	if err != nil || held == nil {
		t.Fatalf("web2 with its own token: no slot: %+v %v", v, err)
	}
	defer held.Abandon()
	kv, admin := as(t, r.srv, a).KV(), r.srv.Client.KV()
	claim, _, err := admin.Get("orchestrate/rollout/web/slot/web2", nil)
	if err != nil || claim == nil {
		t.Fatalf("web2's claim: %v %v", claim, err)
	}
	before := allKeys(t, r.srv.Client)

	put := func(key, val string) error {
		_, err := kv.Put(&api.KVPair{Key: "orchestrate/rollout/web/" + key, Value: []byte(val)}, nil)
		return err
	}
	_, err = kv.Delete("orchestrate/rollout/web/slot/web2", nil)
	denied(t, "delete web2's claim", err)
	_, _, err = kv.DeleteCAS(&api.KVPair{Key: "orchestrate/rollout/web/slot/web2", ModifyIndex: claim.ModifyIndex}, nil)
	denied(t, "delete web2's claim at its index", err)
	denied(t, "rewrite web2's claim as fresh", put("slot/web2", `{"host":"web2","version":"v2","fresh":true,"time":"2026-11-25T00:00:00Z"}`))
	_, err = kv.DeleteTree("orchestrate/rollout/web/", nil)
	denied(t, "delete the role's rollout", err)
	_, err = as(t, r.srv, a).Session().Destroy(claim.Session, nil)
	denied(t, "destroy web2's session", err)
	_, _, err = as(t, r.srv, a).Session().CreateNoChecks(&api.SessionEntry{Node: "web2", TTL: "30s"}, nil)
	denied(t, "create a session on web2's node", err)
	aSession, _, err := as(t, r.srv, a).Session().CreateNoChecks(&api.SessionEntry{TTL: "30s", Behavior: api.SessionBehaviorDelete}, nil)
	if err != nil {
		t.Fatalf("web1 creating a session on its own node: %v", err)
	}
	_, _, err = kv.Acquire(&api.KVPair{Key: "orchestrate/rollout/web/slot/web3", Value: []byte(`{"host":"web3","version":"v2","time":"2026-11-25T00:00:00Z"}`), Session: aSession}, nil)
	denied(t, "claim a slot in another host's name", err)
	denied(t, "record web2 failed (a halt, with max_failures 0)", put("hosts/web2", `{"version":"v2","state":"failed","time":"2026-11-25T00:00:00Z"}`))
	denied(t, "record web2 done", put("hosts/web2", `{"version":"v2","state":"done","time":"2026-11-25T00:00:00Z"}`))
	denied(t, "lift the policy", put("policy", `{"max_unavailable":0,"time":"2026-11-25T00:00:00Z"}`))
	denied(t, "write a resume", put("resume", `{"version":"v2","forgiven":["web1","web2"],"time":"2026-11-25T00:00:00Z"}`))
	denied(t, "write a halt in the older state", put("state", `{"seq":99,"halted":{"version":"v2","reason":"forged","time":"2026-11-25T00:00:00Z"}}`))
	denied(t, "add a follower", put("followers/db", ""))
	denied(t, "ring the older doorbell inside the rollout", put("wake", "x"))
	denied(t, "write another role's rollout", txnErr(kv.Txn(api.KVTxnOps{{Verb: api.KVSet, Key: "orchestrate/rollout/db/hosts/web1", Value: []byte("{}")}}, nil)))
	// A transaction with its own progress and web2's claim: all or nothing.
	denied(t, "its own progress and web2's claim in one transaction", txnErr(kv.Txn(api.KVTxnOps{
		{Verb: api.KVSet, Key: "orchestrate/rollout/web/hosts/web1", Value: []byte(`{"version":"v2","state":"pending","time":"2026-11-25T00:00:00Z"}`)},
		{Verb: api.KVDelete, Key: "orchestrate/rollout/web/slot/web2"},
	}, nil)))
	own, _, err := r.srv.Client.ACL().PolicyReadByName("orchestrate-host-web1", nil)
	if err != nil {
		t.Fatal(err)
	}
	_, _, err = as(t, r.srv, a).ACL().PolicyUpdate(&api.ACLPolicy{ID: own.ID, Name: own.Name, Rules: `key_prefix "orchestrate/" { policy = "write" }`}, nil)
	denied(t, "widen its own policy", err)

	if after := allKeys(t, r.srv.Client); strings.Join(after, " ") != strings.Join(before, " ") {
		t.Fatalf("the refused writes changed keys: %v, then %v", before, after)
	}
	now, _, err := admin.Get("orchestrate/rollout/web/slot/web2", nil)
	if err != nil || now == nil || now.CreateIndex != claim.CreateIndex || now.ModifyIndex != claim.ModifyIndex || now.Session != claim.Session {
		t.Fatalf("web2's claim moved: %+v, was %+v", now, claim)
	}
	ro, err := mustStore(t, r.srv).Rollout(ctx, "web")
	if err != nil || rollout.Halted(ro, "v2") != "" || ro.Policy.MaxUnavailable != 1 || strings.Join(ro.Holders(), ",") != "web2" {
		t.Fatalf("rollout after the attacks: %+v %v", ro, err)
	}

	// What web1 may do: ring a doorbell, and wait its turn, writing nothing.
	if _, err := as(t, r.srv, a).KV().Put(&api.KVPair{Key: "orchestrate/wake/web", Value: []byte("ding")}, nil); err != nil {
		t.Fatalf("web1 ringing a doorbell: %v", err)
	}
	aSlots, _ := slotsAs(t, r.srv, a)
	if sl, v, err := aSlots.Acquire(ctx, "web", "web1", "v2", false); err != nil || sl != nil || !strings.Contains(v.Reason, "1 at a time") {
		t.Fatalf("web1 while web2 holds the only slot: %v %+v %v", sl, v, err)
	}
}

// A node's converge runs on its own token: web1 waits while web2 holds
// the only slot, then, woken, takes its own slot (a claim held by a
// session on its own node), holds it through its step (web2 cannot take
// one meanwhile), records its progress and gives the slot back.
func TestNodeRestrictionRolloutConverge(t *testing.T) {
	r := newRestricted(t, nil)
	ctx := context.Background()
	_, aFile := r.token(t, "web1", "web")
	b, _ := r.token(t, "web2", "web")
	mustCode(t, r.operator(t, "trigger-update", "v1"), 0, "trigger-update v1")
	for _, h := range []string{"web1", "web2"} {
		mustCode(t, r.operator(t, "report-version", "--host", h, "v1"), 0, "report-version "+h)
	}
	mustCode(t, r.operator(t, "rollout", "web", "--max-unavailable", "1"), 0, "rollout web")
	mustCode(t, r.operator(t, "trigger-update", "v2"), 0, "trigger-update v2")

	stepDir := t.TempDir()
	t.Setenv("STEP_DIR", stepDir)
	step, _ := filepath.Abs("testdata/converge/step.sh")
	checks, _ := filepath.Abs("testdata/converge/checks")
	converge := func(extra ...string) result {
		args := []string{"converge", "--role", "web", "--puppet-cmd", step + " puppet", "--validate-dir", checks,
			"--hiera-data", filepath.Join(stepDir, "services.yaml"), "--log-dir", filepath.Join(stepDir, "log"),
			"--lock-file", filepath.Join(stepDir, "converge.lock"), "--slot-ttl", "10s", "--token-file", aFile}
		return cli(t, r.srv, "", append(args, extra...)...)
	}
	bSlots, _ := slotsAs(t, r.cl, b)
	held, _, err := bSlots.Acquire(ctx, "web", "web2", "v2", false)
	if err != nil || held == nil {
		t.Fatalf("web2: no slot: %v", err)
	}
	res := converge("--handler")
	mustCode(t, res, 0, "web1's converge while web2 holds the slot")
	if !strings.Contains(res.stdout, "waiting for a rollout slot") || fileHas(filepath.Join(stepDir, "ran"), "puppet v2") {
		t.Fatalf("web1 did not wait: %s", res.stdout)
	}
	if err := held.Release(ctx, store.RolloutDone, ""); err != nil {
		t.Fatalf("web2 giving its slot back with its own token: %v", err)
	}

	if err := os.WriteFile(filepath.Join(stepDir, "puppet.sleep"), []byte("3"), 0o644); err != nil {
		t.Fatal(err)
	}
	done := make(chan result, 1)
	go func() { done <- converge("--handler", "--slot-wake") }()
	st := mustStore(t, r.srv)
	testutil.Eventually(t, 20*time.Second, "web1 holding its slot in its step", func() bool {
		ro, err := st.Rollout(ctx, "web")
		return err == nil && strings.Join(ro.Holders(), ",") == "web1" && ro.Hosts["web1"].State == store.RolloutUpdating
	})
	claim, _, err := r.srv.Client.KV().Get("orchestrate/rollout/web/slot/web1", nil)
	if err != nil || claim == nil {
		t.Fatalf("web1's claim: %v %v", claim, err)
	}
	if se, _, err := r.srv.Client.Session().Info(claim.Session, nil); err != nil || se == nil || se.Node != "web1" {
		t.Fatalf("web1's claim is held by %+v (%v), want a session on node web1", se, err)
	}
	if sl, v, err := bSlots.Acquire(ctx, "web", "web2", "v2", false); err != nil || sl != nil || !strings.Contains(v.Reason, "1 at a time") {
		t.Fatalf("web2 took a slot while web1 held the only one: %v %+v %v", sl, v, err)
	}
	res = <-done
	mustCode(t, res, 0, "web1's converge, woken")
	ro, err := st.Rollout(ctx, "web")
	if err != nil || len(ro.Slots) != 0 || ro.Hosts["web1"].State != store.RolloutDone || ro.Hosts["web1"].Version != "v2" {
		t.Fatalf("rollout after web1 converged: %+v %v", ro, err)
	}
	mustCode(t, r.operator(t, "verify-hosts", "v2", "web1"), 0, "web1 on v2")
	if sessions, _, err := r.srv.Client.Session().Node("web1", nil); err != nil || len(sessions) != 0 {
		t.Fatalf("web1's sessions after it gave its slot back: %v %v", sessions, err)
	}
}

// A doorbell rung by a node allowed nothing else only wakes: web1 rings
// web's doorbell with nonsense, web2's generated doorbell watch runs its
// waiting converge, which decides again on what it reads and changes
// nothing. When db1, with its own token, reports the version web waits
// for (--after db:1), its bell wakes web2, which converges.
func TestNodeRestrictionRolloutForgedWake(t *testing.T) {
	dir := t.TempDir()
	count := filepath.Join(dir, "woken")
	stepDir := filepath.Join(dir, "steps")
	if err := os.MkdirAll(stepDir, 0o755); err != nil {
		t.Fatal(err)
	}
	t.Setenv("STEP_DIR", stepDir)
	script, _ := filepath.Abs("testdata/rollout/consistent.sh")
	var bFile string
	// What web2's converge runs with: the watch's (watch-config gives it
	// --hiera-data from --out) and the one run by hand alike.
	hieraData := filepath.Join(dir, "services.yaml")
	stepArgs := []string{"--consistent-cmd", script + " web2", "--role", "web"}
	more := []string{"--log-dir=" + filepath.Join(dir, "log"), "--lock-file=" + filepath.Join(dir, "converge.lock"), "--no-checks"}
	r := newRestricted(t, func(r *restricted) (string, []string) {
		var b string
		b, bFile = r.token(t, "web2", "web")
		args := append([]string{"--host", "web2", "--out", hieraData, "--orchestrate", countingWrapper(t, dir, builtBinary(t, "orchestrate"), count),
			"--handler-token-file", bFile}, stepArgs...)
		for _, c := range more {
			args = append(args, "--converge-arg="+c)
		}
		ws := generatedWatches(t, args...)
		var bells []watch.Watch
		for _, w := range ws {
			if w.Type == "key" && w.Key == "orchestrate/wake/web" {
				bells = append(bells, w)
			}
		}
		if len(bells) != 1 || !strings.Contains(strings.Join(bells[0].Args, " "), "converge --handler --slot-wake") {
			t.Fatalf("watch-config --role web: no doorbell watch running converge --slot-wake: %+v", ws)
		}
		// The agent's watches ask with its default token (docs/acl.md,
		// "The agent's own tokens"): here web2's own.
		cfg := map[string]any{}
		if err := json.Unmarshal([]byte(agentConfig(t, bells)), &cfg); err != nil {
			t.Fatal(err)
		}
		cfg["acl"] = map[string]any{"tokens": map[string]string{"default": b}}
		hcl, err := json.Marshal(cfg)
		if err != nil {
			t.Fatal(err)
		}
		return string(hcl), []string{"STEP_DIR=" + stepDir}
	})
	ctx := context.Background()
	a, _ := r.token(t, "web1", "web")
	db, _ := r.token(t, "db1", "db")
	mustCode(t, r.operator(t, "trigger-update", "v1"), 0, "trigger-update v1")
	mustCode(t, r.operator(t, "report-version", "--host", "web2", "v1"), 0, "report-version web2")
	mustCode(t, r.operator(t, "rollout", "web", "--after", "db:1"), 0, "rollout web --after db:1")
	mustCode(t, r.operator(t, "trigger-update", "v2"), 0, "trigger-update v2")
	args := append(append([]string{"converge", "--handler", "--host", "web2", "--hiera-data", hieraData, "--token-file", bFile}, stepArgs...), more...)
	res := cli(t, r.cl, "", args...)
	mustCode(t, res, 0, "web2's converge, waiting for db")
	if !strings.Contains(res.stdout, "waiting for a rollout slot") {
		t.Fatalf("web2 did not wait for db: %s", res.stdout)
	}
	events := filepath.Join(stepDir, "events")
	// The agent runs the doorbell watch's handler once when the watch
	// first answers (5 s after the agent's start when its first query found
	// no server yet): let that run end before counting wakes, so a bell's
	// wake is never that run.
	idle := func() {
		t.Helper()
		lctx, cancel := context.WithTimeout(ctx, 30*time.Second)
		defer cancel()
		unlock, err := watch.Lock(lctx, filepath.Join(dir, "converge.lock"), true)
		if err != nil {
			t.Fatal(err)
		}
		unlock()
	}
	testutil.Eventually(t, 30*time.Second, "web2's doorbell watch's first run", func() bool { return lineCount(count) >= 1 })
	idle()
	woken := lineCount(count)
	_, meta, err := r.srv.Client.KV().List("orchestrate/rollout/", nil)
	if err != nil {
		t.Fatal(err)
	}
	for _, bell := range []string{`{"version":"v2","state":"done"}`, "'; rm -rf / #", strings.Repeat("x", 100000)} {
		if _, err := as(t, r.srv, a).KV().Put(&api.KVPair{Key: "orchestrate/wake/web", Value: []byte(bell)}, nil); err != nil {
			t.Fatalf("web1 ringing web's doorbell: %v", err)
		}
		testutil.Eventually(t, 20*time.Second, "web2's doorbell watch ran its converge", func() bool { return lineCount(count) > woken }, func() string {
			log, _ := os.ReadFile(r.cl.LogPath)
			return tailString(string(log), 3000)
		})
		woken = lineCount(count)
		idle()
	}
	if evs := readEvents(t, events); len(evs) != 0 {
		t.Fatalf("a forged doorbell started steps: %v", evs)
	}
	_, meta2, err := r.srv.Client.KV().List("orchestrate/rollout/", nil)
	if err != nil || meta2.LastIndex != meta.LastIndex {
		t.Fatalf("a forged doorbell changed the rollouts: index %d, then %d (%v)", meta.LastIndex, meta2.LastIndex, err)
	}
	snap, err := mustStore(t, r.srv).Snapshot(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if p := snap.Hosts["web2"].Status[store.CategoryPuppet]; !p.Waiting || !strings.Contains(p.Detail, "waits for role db: 0 of 1") {
		t.Fatalf("web2 after the forged doorbells: %+v", p)
	}

	// db1 reports v2 with its own token: its record and web's bell, one
	// transaction; web2 wakes and converges.
	dbSlots, _ := slotsAs(t, r.srv, db)
	if err := dbSlots.Record(ctx, "db", "db1", "v2", store.RolloutDone, ""); err != nil {
		t.Fatalf("db1 recording its outcome with its own token: %v", err)
	}
	testutil.Eventually(t, 30*time.Second, "web2 on v2, woken by db1's bell", func() bool {
		return r.operator(t, "verify-hosts", "v2", "web2").code == 0
	})
	if n := started(readEvents(t, events), "v2")["web2"]; n != 1 {
		t.Fatalf("web2 ran its consistent step %d times for v2, want 1", n)
	}
}
