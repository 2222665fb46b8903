package packaging_test

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/consul/api"

	"github.com/jiocloud/orchestrate/internal/cli"
	"github.com/jiocloud/orchestrate/internal/consultest"
	"github.com/jiocloud/orchestrate/internal/store"
	"github.com/jiocloud/orchestrate/internal/store/reaperkv"
	"github.com/jiocloud/orchestrate/internal/testutil"
	"github.com/jiocloud/orchestrate/reaper/daemon"
	"github.com/jiocloud/orchestrate/reaper/simcloud"
)

// A node's token as shipped, the role of node.hcl and the host's own
// policy (store.HostPolicyRules), lets orchestrate report this node's
// version, status, load and drain answer and read the desired version,
// hiera-services render the catalog and service-blocker --passing-only
// count healthy instances; each permission taken away makes the binary
// that needs it exit 3 naming it, and nothing is written.
func TestACLNodePolicy(t *testing.T) {
	t.Parallel()
	w := newACLWorld(t)
	if _, err := w.admin.KV().Put(&api.KVPair{Key: "orchestrate/current_version", Value: []byte("v2")}, nil); err != nil {
		t.Fatal(err)
	}
	tok := w.hostToken(t, "web1", "web", tokenOpts{})
	must(t, "update-status", w.run(t, tok, "orchestrate", "update-status", "--host", "web1", "puppet", "success"), 0, "")
	self := w.hostToken(t, w.agent.NodeName, "web", tokenOpts{})
	must(t, "update-status, host from the agent", w.run(t, self, "orchestrate", "update-status", "validation", "running"), 0, "")
	must(t, "report-version", w.run(t, tok, "orchestrate", "report-version", "--host", "web1", "v2"), 0, "")
	must(t, "report-version again", w.run(t, tok, "orchestrate", "report-version", "--host", "web1", "v3"), 0, "")
	must(t, "pending-update", w.run(t, tok, "orchestrate", "pending-update", "--host", "web1"), 0, "")
	if r := w.run(t, tok, "orchestrate", "current-version"); r.code != 0 || strings.TrimSpace(r.stdout) != "v2" {
		t.Errorf("current-version: exit %d, %q %s", r.code, r.stdout, r.stderr)
	}
	out := filepath.Join(t.TempDir(), "services.yaml")
	must(t, "hiera-services", w.run(t, tok, "hiera-services", "--out", out), 0, "")
	if b, err := os.ReadFile(out); err != nil || !strings.Contains(string(b), "services::web::address") {
		t.Errorf("services.yaml: %v\n%s", err, b)
	}
	must(t, "service-blocker --passing-only", w.run(t, tok, "service-blocker", "--passing-only", "--timeout", "5s", "--dns", w.agent.DNSAddr, "web:2"), 0, "")
	must(t, "report-metric", w.run(t, tok, "orchestrate", "report-metric", "--role", "web", "--host", "web1", "load", "0.5"), 0, "")
	now := time.Now().UTC()
	drain := fmt.Sprintf(`{"requested": %q, "role": "web", "entry": "web.x.1", "reason": "surplus", "deadline": %q}`, now.Format(time.RFC3339), now.Add(time.Hour).Format(time.RFC3339))
	if _, err := w.admin.KV().Put(&api.KVPair{Key: "orchestrate/drain/web1", Value: []byte(drain)}, nil); err != nil {
		t.Fatal(err)
	}
	must(t, "drained", w.run(t, tok, "orchestrate", "drained", "web1"), 0, "")
	if _, err := w.admin.KV().Put(&api.KVPair{Key: "orchestrate/drain/web1", Value: []byte(strings.Replace(drain, "web.x.1", "web.x.2", 1))}, nil); err != nil {
		t.Fatal(err) // a new request, unanswered, for the refusal below
	}

	// What the node wrote, read back with the management token.
	keys, _, err := w.admin.KV().Keys("orchestrate/", "", nil)
	if err != nil {
		t.Fatal(err)
	}
	want := []string{"orchestrate/current_version", "orchestrate/drain/web1", "orchestrate/hosts/" + w.agent.NodeName + "/status/validation",
		"orchestrate/hosts/web1/drain", "orchestrate/hosts/web1/metrics/load", "orchestrate/hosts/web1/status/puppet", "orchestrate/hosts/web1/version"}
	if strings.Join(keys, " ") != strings.Join(want, " ") {
		t.Errorf("keys %v, want %v", keys, want)
	}
	before := w.kvDump(t)

	own := `key_prefix "orchestrate/hosts/web1/"`
	// The node identity grants read of every service on its own, and the
	// host policy write (so read) on its role's service: without both,
	// node.hcl's service rule is what does.
	noService := tokenOpts{drop: `service_prefix ""`, noIdentity: true, hostDrop: `service "web"`}
	for _, tc := range []struct {
		name    string
		opts    tokenOpts
		args    []string
		refused string
	}{
		{"status write", tokenOpts{hostDrop: own}, []string{"orchestrate", "update-status", "--host", "web1", "puppet", "failed"}, "the token needs key:write"},
		{"version write", tokenOpts{hostDrop: own}, []string{"orchestrate", "report-version", "--host", "web1", "v4"}, "the token needs key:write"},
		{"metric write", tokenOpts{hostDrop: own}, []string{"orchestrate", "report-metric", "--role", "web", "--host", "web1", "load", "0.7"}, "the token needs key:write"},
		{"drain answer write", tokenOpts{hostDrop: own}, []string{"orchestrate", "drained", "--failed", "web1"}, "Consul refused the token: permission denied (the token needs key:write on orchestrate/hosts/web1/drain)"},
		{"key read", tokenOpts{drop: `key_prefix "orchestrate/"`}, []string{"orchestrate", "current-version"}, "key:read"},
		{"agent read", tokenOpts{drop: `agent_prefix ""`}, []string{"orchestrate", "update-status", "puppet", "success"}, "agent:read"},
		{"service read", noService, []string{"hiera-services", "--out", filepath.Join(t.TempDir(), "s.yaml")}, "service_prefix"},
		{"node read", tokenOpts{drop: `node_prefix ""`}, []string{"hiera-services", "--out", filepath.Join(t.TempDir(), "s.yaml")}, "node_prefix"},
		{"service read, blocker", noService, []string{"service-blocker", "--passing-only", "--timeout", "3s", "--dns", w.agent.DNSAddr, "web:2"}, "service:read"},
	} {
		t.Run("without "+tc.name, func(t *testing.T) {
			tok := w.hostToken(t, "web1", "web", tc.opts)
			must(t, strings.Join(tc.args, " "), w.run(t, tok, tc.args[0], tc.args[1:]...), 3, tc.refused)
		})
	}
	// Nothing the refused runs tried was written.
	w.sameKV(t, "after the refusals", before)
}

// The operator policy shows everything and changes nothing.
func TestACLOperatorPolicy(t *testing.T) {
	t.Parallel()
	w := newACLWorld(t)
	node := w.hostToken(t, "web1", "web", tokenOpts{})
	must(t, "update-status", w.run(t, node, "orchestrate", "update-status", "--host", "web1", "puppet", "failed"), 0, "")

	tok := w.token(t, policyText(t, "operator.hcl", ""))
	r := w.run(t, tok, "orchestrate", "status")
	must(t, "status", r, 0, "")
	if !strings.Contains(r.stdout, "web1") {
		t.Errorf("status does not show web1:\n%s", r.stdout)
	}
	must(t, "get-failures", w.run(t, tok, "orchestrate", "get-failures"), 1, "")
	must(t, "reaper status", w.run(t, tok, "orchestrate", "reaper", "status"), 0, "")
	must(t, "trigger-update", w.run(t, tok, "orchestrate", "trigger-update", "v9"), 3, "the token needs key:write")
	must(t, "update-status", w.run(t, tok, "orchestrate", "update-status", "--host", "web1", "puppet", "success"), 3, "the token needs key:write")

	tok = w.token(t, policyText(t, "operator.hcl", `node_prefix ""`))
	must(t, "status without node read", w.run(t, tok, "orchestrate", "status"), 3, `node_prefix`)
	tok = w.token(t, policyText(t, "operator.hcl", `key_prefix "orchestrate/"`))
	must(t, "status without key read", w.run(t, tok, "orchestrate", "status"), 3, "key:read")
}

// reaperRun runs the reaper in process (the cloud is simulated; Consul is
// the real agent) with the token in tokenFile until it wrote a state
// report or stop says so, then stops it; it returns the exit code and the
// log.
func reaperRun(t *testing.T, w *aclWorld, tokenFile string, sim *simcloud.Cloud, until func() bool) (int, string) {
	t.Helper()
	conf := filepath.Join(t.TempDir(), "reaper.yaml")
	text := `dry_run: false
interval: 200ms
session_ttl: 10s
lock_delay: 1s
listen: ""
roles:
  - name: app
    desired: 2
    boot: {flavor: m1, image: debian, name_template: "app{n}"}
`
	if err := os.WriteFile(conf, []byte(text), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, k := range []string{"CONSUL_HTTP_TOKEN", "CONSUL_HTTP_ADDR", "ORCHESTRATE_PREFIX"} {
		t.Setenv(k, "")
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var stderr testutil.SyncBuffer
	done := make(chan int, 1)
	go func() {
		done <- daemon.RunWithCloud(ctx, []string{"--config", conf, "--consul-addr", w.agent.HTTPAddr, "--token-file", tokenFile},
			cli.IO{Stdout: &stderr, Stderr: &stderr}, sim)
	}()
	deadline := time.After(20 * time.Second)
	for {
		select {
		case code := <-done:
			return code, stderr.String()
		case <-deadline:
			cancel()
			return <-done, stderr.String()
		case <-time.After(100 * time.Millisecond):
			if until() {
				cancel()
				return <-done, stderr.String()
			}
		}
	}
}

// The reaper policy lets the reaper lead, journal and boot the missing
// servers of a role and report its state; without its service rule it
// cannot register and exits 3 naming service:write.
func TestACLReaperPolicy(t *testing.T) {
	w := newACLWorld(t)
	st, err := store.New(w.admin, "orchestrate")
	if err != nil {
		t.Fatal(err)
	}
	// The nodes' records, which each node's token wrote, for the reaper to
	// read.
	for _, h := range []string{"web1", "web2"} {
		must(t, "report-version", w.run(t, w.hostToken(t, h, "web", tokenOpts{}), "orchestrate", "report-version", "--host", h, "v1"), 0, "")
	}

	tok := w.token(t, policyText(t, "reaper.hcl", ""))
	sim := simcloud.New()
	var report *reaperkv.ReaperReport
	historyHasCreate := func() bool {
		p, _, err := w.admin.KV().Get("orchestrate/history/reaper", nil)
		return err == nil && p != nil && strings.Contains(string(p.Value), `"kind":"create"`)
	}
	eventFired := func() bool {
		evs, _, err := w.admin.Event().List(reaperkv.HistoryEvent, nil)
		return err == nil && len(evs) > 0
	}
	code, log := reaperRun(t, w, tok, sim, func() bool {
		report, _ = st.ReaperReport(context.Background())
		return report != nil && sim.Creates.Load() > 0 && historyHasCreate() && eventFired()
	})
	if code != 0 || report == nil || len(report.Errors) > 0 || sim.Creates.Load() == 0 {
		t.Fatalf("reaper: exit %d, %d creates, report %+v\n%s", code, sim.Creates.Load(), report, log)
	}
	if strings.Contains(log, "Permission denied") {
		t.Errorf("the reaper was refused something:\n%s", log)
	}
	// Its history was written and its activities fired as events.
	if !historyHasCreate() || !eventFired() {
		t.Errorf("history with a create: %v; a %s event fired: %v", historyHasCreate(), reaperkv.HistoryEvent, eventFired())
	}

	tok = w.token(t, policyText(t, "reaper.hcl", `service "reaper"`))
	code, log = reaperRun(t, w, tok, simcloud.New(), func() bool { return false })
	if code != 3 || !strings.Contains(log, "service:write") {
		t.Errorf("reaper without its service rule: exit %d, want 3 naming service:write:\n%s", code, log)
	}
}

// The watches `orchestrate watch-config` writes are queries the agent makes
// itself, with its default token (acl.tokens.default), before any handler
// runs with the node token: with ACLs on (default deny) and no default
// token they are refused and no handler ever runs. A default token of the
// shipped read-only operator.hcl is enough (docs/acl.md).
func TestACLGeneratedWatchesRunOnTheAgentsDefaultToken(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	deps := filepath.Join(dir, "dependencies.yaml")
	if err := os.WriteFile(deps, []byte("web:\n  addressable: 2\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	nodeToken := filepath.Join(dir, "node.token") // filled once the agent runs
	out := filepath.Join(dir, "services.yaml")
	bin := testutil.BuildCommands(t, "orchestrate", "hiera-services", "service-blocker")
	gen := exec.Command(filepath.Join(bin, "orchestrate"), "watch-config", "--host", "app1",
		"--orchestrate", filepath.Join(bin, "orchestrate"), "--hiera-services", filepath.Join(bin, "hiera-services"),
		"--out", out, "--dependencies", deps, "--handler-token-file", nodeToken, "--consistent-cmd", "/bin/true")
	watches, err := gen.Output()
	if err != nil {
		t.Fatalf("watch-config: %v", err)
	}
	// The agent's configuration names its default token, as docs/acl.md says;
	// the token itself is made once ACLs are up, below.
	const defaultSecret = "9a8b7c6d-5e4f-4a3b-8c2d-1e0f9a8b7c6d"
	var cfg map[string]any
	if err := json.Unmarshal(watches, &cfg); err != nil {
		t.Fatal(err)
	}
	cfg["acl"] = map[string]any{"tokens": map[string]any{"default": defaultSecret}}
	agentCfg, err := json.Marshal(cfg)
	if err != nil {
		t.Fatal(err)
	}
	w := newACLWorldWith(t, consultest.Options{NodeName: "app1", HCL: string(agentCfg), HandlerEnv: true})
	node := w.hostToken(t, "app1", "app", tokenOpts{})
	b, err := os.ReadFile(node)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(nodeToken, b, 0o600); err != nil {
		t.Fatal(err)
	}
	// Until the default token exists the agent's own watch queries are
	// refused (retried every 5 s): the node never converges, however
	// good the handlers' token. Counted in the agent's log: a key watch
	// refused again after the version is set.
	agentLog := func() string { b, _ := os.ReadFile(w.agent.LogPath); return string(b) }
	refusals := func() int {
		return strings.Count(agentLog(), `Watch errored: type=key error="Unexpected response code: 403`)
	}
	if _, err := w.admin.KV().Put(&api.KVPair{Key: "orchestrate/current_version", Value: []byte("v1")}, nil); err != nil {
		t.Fatal(err)
	}
	before := refusals()
	testutil.Eventually(t, 30*time.Second, "a key watch of the agent refused after the version is set", func() bool { return refusals() > before }, agentLog)
	if p, _, err := w.admin.KV().Get("orchestrate/hosts/app1/version", nil); err != nil || p != nil {
		t.Fatalf("converged without a default token for the watches (%v)", err)
	}
	pol, _, err := w.admin.ACL().PolicyCreate(&api.ACLPolicy{Name: "agent-default", Rules: policyText(t, "operator.hcl", "")}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, _, err := w.admin.ACL().TokenCreate(&api.ACLToken{SecretID: defaultSecret, Policies: []*api.ACLTokenPolicyLink{{ID: pol.ID}}}, nil); err != nil {
		t.Fatal(err)
	}
	testutil.Eventually(t, 30*time.Second, "app1 converged to v1 by the current_version watch's handler", func() bool {
		p, _, err := w.admin.KV().Get("orchestrate/hosts/app1/version", nil)
		return err == nil && p != nil
	})
	testutil.Eventually(t, 30*time.Second, "services.yaml with both web instances", func() bool {
		b, err := os.ReadFile(out)
		return err == nil && strings.Contains(string(b), `"services::web::address": ["10.0.0.1", "10.0.0.2"]`)
	}, func() string { b, _ := os.ReadFile(out); return string(b) })
	// A new instance reaches services.yaml through the web service watch.
	_, err = w.admin.Catalog().Register(&api.CatalogRegistration{
		Node: "web3", Address: "10.0.0.3",
		Service: &api.AgentService{ID: "web", Service: "web", Port: 80},
		Check:   &api.AgentCheck{CheckID: "web", Name: "web", Status: api.HealthPassing, ServiceID: "web"},
	}, nil)
	if err != nil {
		t.Fatal(err)
	}
	testutil.Eventually(t, 30*time.Second, "web3 in services.yaml", func() bool {
		b, err := os.ReadFile(out)
		return err == nil && strings.Contains(string(b), `"services::web::address": ["10.0.0.1", "10.0.0.2", "10.0.0.3"]`)
	}, func() string { b, _ := os.ReadFile(out); return string(b) })
}

// `orchestrate standby` holds the node's maintenance through its own agent,
// which needs node write on that node: node.hcl alone refuses it (exit 3
// naming node:write), the node's token given the node identity of its host
// (`consul acl token create -policy-name orchestrate-node -node-identity
// HOST:DC`, docs/acl.md) does it.
func TestACLStandbyNeedsTheNodeIdentity(t *testing.T) {
	t.Parallel()
	w := newACLWorld(t)
	host := w.agent.NodeName
	rec, err := json.Marshal(reaperkv.StandbyRecord{Role: "web", Host: host, ID: "id-1", State: reaperkv.StandbyReady, Created: time.Now()})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := w.admin.KV().Put(&api.KVPair{Key: reaperkv.PoolKey("orchestrate", "web", host), Value: rec}, nil); err != nil {
		t.Fatal(err)
	}
	inMaintenance := func() bool {
		checks, err := w.admin.Agent().Checks()
		if err != nil {
			t.Fatal(err)
		}
		return checks[reaperkv.NodeMaintenanceCheck] != nil
	}
	plain := w.token(t, policyText(t, "node.hcl", ""))
	must(t, "standby with node.hcl alone", w.run(t, plain, "orchestrate", "standby", "--role", "web"), 3, "node:write")
	if inMaintenance() {
		t.Fatal("maintenance set by a refused token")
	}

	pol, _, err := w.admin.ACL().PolicyCreate(&api.ACLPolicy{Name: "orchestrate-node", Rules: policyText(t, "node.hcl", "")}, nil)
	if err != nil {
		t.Fatal(err)
	}
	tok, _, err := w.admin.ACL().TokenCreate(&api.ACLToken{
		Policies:       []*api.ACLTokenPolicyLink{{ID: pol.ID}},
		NodeIdentities: []*api.ACLNodeIdentity{{NodeName: host, Datacenter: w.agent.Datacenter}},
	}, nil)
	if err != nil {
		t.Fatal(err)
	}
	file := filepath.Join(t.TempDir(), "token")
	if err := os.WriteFile(file, []byte(tok.SecretID+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	must(t, "standby with the node identity", w.run(t, file, "orchestrate", "standby", "--role", "web"), 0, "")
	if !inMaintenance() {
		t.Fatal("a standby's node is not in maintenance after orchestrate standby")
	}
	// Claimed: the record goes, the maintenance with it.
	if _, err := w.admin.KV().Delete(reaperkv.PoolKey("orchestrate", "web", host), nil); err != nil {
		t.Fatal(err)
	}
	must(t, "standby after the claim", w.run(t, file, "orchestrate", "standby", "--role", "web"), 0, "")
	if inMaintenance() {
		t.Fatal("maintenance left after the claim")
	}
}
