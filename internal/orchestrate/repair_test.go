package orchestrate

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/consul/api"

	"github.com/jiocloud/orchestrate/internal/consultest"
	"github.com/jiocloud/orchestrate/internal/store"
	"github.com/jiocloud/orchestrate/internal/testutil"
	"github.com/jiocloud/orchestrate/watch"
)

// repairNode is a real agent, node9, loaded with the watches watch-config
// generates with --repair-service web, its service web checked by a
// script (critical unless the file healthy exists, every second) that its consistent step
// stand-in mends (it creates the file, or fails while `broken` exists).
type repairNode struct {
	t       *testing.T
	a       *consultest.Agent
	dir     string
	healthy string
	broken  string
	ran     string
}

func startRepairNode(t *testing.T) *repairNode {
	t.Helper()
	dir := t.TempDir()
	n := &repairNode{t: t, dir: dir, healthy: filepath.Join(dir, "healthy"), broken: filepath.Join(dir, "broken"), ran: filepath.Join(dir, "ran")}
	consistent := filepath.Join(dir, "consistent.sh")
	script := "#!/bin/sh\necho consistent >> " + n.ran + "\n[ -f " + n.broken + " ] && exit 1\ntouch " + n.healthy + "\nexit 0\n"
	noop := filepath.Join(dir, "noop")
	for f, body := range map[string]string{consistent: script, noop: "#!/bin/sh\nexit 0\n"} {
		if err := os.WriteFile(f, []byte(body), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	r := watchConfig(t, "--hiera-services", noop, "--orchestrate", builtBinary(t, "orchestrate"), "--out", filepath.Join(dir, "services.yaml"),
		"--consistent-cmd", consistent, "--repair-service", "web", "--repair-attempts", "2", "--repair-backoff", "1s",
		"--converge-arg=--log-dir="+filepath.Join(dir, "log"), "--converge-arg=--lock-file="+filepath.Join(dir, "converge.lock"), "--converge-arg=--no-checks")
	mustCode(t, r, 0, "watch-config")
	if !strings.Contains(r.stdout, `"type": "checks"`) {
		t.Fatalf("no checks watch in:\n%s", r.stdout)
	}
	conf := filepath.Join(dir, "consul.d")
	svc := `enable_local_script_checks = true
services {
  name = "web"
  port = 80
  checks = [{ id = "web-alive", name = "web answers", args = ["/bin/sh", "-c", "test -f ` + n.healthy + ` || exit 2"], interval = "1s" }]
}
`
	if err := os.MkdirAll(conf, 0o755); err != nil {
		t.Fatal(err)
	}
	for f, body := range map[string]string{"watches.json": r.stdout, "web.hcl": svc} {
		if err := os.WriteFile(filepath.Join(conf, f), []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	n.a = consultest.Start(t, consultest.Options{NodeName: "node9", ConfigDir: conf, HandlerEnv: true})
	return n
}

// runs counts the consistent step's runs.
func (n *repairNode) runs() int {
	data, _ := os.ReadFile(n.ran)
	return strings.Count(string(data), "consistent")
}

// repair is node9's repair record, and its puppet status.
func (n *repairNode) repair() (rec, puppet store.Status) {
	st, err := mustStore(n.t, n.a).HostStatus(context.Background(), "node9")
	if err != nil {
		n.t.Fatal(err)
	}
	return st[store.CategoryRepair], st[store.CategoryPuppet]
}

// check is the state of node9's web check in the catalog, which the
// repair watch reads: not the agent's own view, which runs ahead of it.
// The test must not break the service again before the catalog has seen
// it pass: a passing spell the agent never synced (under load, shorter
// than its sync) is no change to the watch, which then never fires for
// the next crash (the fresh-clone CI run of 5f18efe failed so, the check
// passing for one second).
func (n *repairNode) check() string {
	checks, _, err := n.a.Client.Health().Checks("web", nil)
	if err != nil {
		n.t.Fatal(err)
	}
	for _, c := range checks {
		if c.Node == "node9" && c.CheckID == "web-alive" {
			return c.Status
		}
	}
	return ""
}

func (n *repairNode) log() string {
	data, _ := os.ReadFile(n.a.LogPath)
	return "agent log:\n" + string(data)
}

func (n *repairNode) touch(path string) {
	if err := os.WriteFile(path, nil, 0o644); err != nil {
		n.t.Fatal(err)
	}
}

func (n *repairNode) remove(path string) {
	if err := os.Remove(path); err != nil {
		n.t.Fatal(err)
	}
}

// The node side of repair before replace, through the watches watch-config
// generates, on a real agent: node9's web check turning critical makes
// its checks watch run `converge --repair`, which re-runs the consistent
// step and records the episode; a node its reruns cannot mend gets
// exactly --repair-attempts runs, is marked suspect (its consistent step
// failed on every one: the reaper replaces it rather than repairing it),
// and further fires of the watch run nothing more; once its check passes
// again the episode ends, and a new one starts afresh. A new server, that
// runs no version yet, is never repaired.
func TestRepairWatchRerunsConverge(t *testing.T) {
	n := startRepairNode(t)
	testutil.Eventually(t, 20*time.Second, "web critical on the new node9", func() bool { return n.check() == api.HealthCritical }, n.log)
	time.Sleep(2 * time.Second) // the repair watch has fired: a node with no version is not repaired
	if got := n.runs(); got != 0 {
		t.Fatalf("a node with no version yet: %d repair runs", got)
	}
	mustCode(t, cli(t, n.a, "", "trigger-update", "v1"), 0, "trigger-update")
	testutil.Eventually(t, 30*time.Second, "node9 at v1, web passing", func() bool {
		return cli(t, n.a, "", "verify-hosts", "v1", "node9").code == 0 && n.check() == api.HealthPassing
	}, n.log)
	base := n.runs()

	// The service crashes: one rerun mends it.
	n.remove(n.healthy)
	testutil.Eventually(t, 30*time.Second, "node9 repaired by its own rerun", func() bool {
		rec, _ := n.repair()
		return rec.State == store.StateSuccess && n.check() == api.HealthPassing
	}, n.log)
	rec, _ := n.repair()
	if got := n.runs() - base; got != 1 || rec.Attempts != 1 || rec.Version != "v1" || rec.Since.IsZero() {
		t.Fatalf("after one repair: %d runs, record %+v", got, rec)
	}
	if cli(t, n.a, "", "verify-hosts", "v1", "node9").code != 0 {
		t.Fatal("the repair moved node9 off v1")
	}

	// Nothing mends it: exactly two attempts, then suspect and failed.
	base = n.runs()
	n.touch(n.broken)
	n.remove(n.healthy)
	testutil.Eventually(t, 40*time.Second, "node9's repair attempts used up", func() bool {
		rec, _ := n.repair()
		return rec.State == store.StateFailed
	}, n.log)
	rec, puppet := n.repair()
	if got := n.runs() - base; got != 2 || rec.Attempts != 2 || !strings.Contains(rec.Detail, "the reaper's repair ladder goes on") {
		t.Fatalf("%d runs, record %+v", got, rec)
	}
	if puppet.State != store.StateFailed || !puppet.Suspect {
		t.Errorf("puppet status %+v: want failed, suspect", puppet)
	}
	// More fires of the watch (another instance of web changes) run
	// nothing more.
	if _, err := n.a.Client.Catalog().Register(&api.CatalogRegistration{Node: "web-other", Address: "10.0.0.7",
		Service: &api.AgentService{ID: "web", Service: "web", Port: 80},
		Check:   &api.AgentCheck{Node: "web-other", CheckID: "web-alive", Name: "web answers", Status: api.HealthCritical, ServiceID: "web"}}, nil); err != nil {
		t.Fatal(err)
	}
	time.Sleep(3 * time.Second)
	if got := n.runs() - base; got != 2 {
		t.Fatalf("%d runs after the attempts were used up, want 2", got)
	}

	// Mended by hand: the episode ends; the next crash gets its attempts
	// afresh.
	n.remove(n.broken)
	n.touch(n.healthy)
	testutil.Eventually(t, 30*time.Second, "node9's episode over", func() bool {
		rec, _ := n.repair()
		return rec.State == store.StateSuccess
	}, n.log)
	base = n.runs()
	n.remove(n.healthy)
	testutil.Eventually(t, 30*time.Second, "node9 repaired again", func() bool {
		rec, _ := n.repair()
		return rec.State == store.StateSuccess && rec.Attempts == 1 && n.runs() > base && n.check() == api.HealthPassing
	}, n.log)
}

// watch-config's repair watch: one checks watch per --repair-service,
// running converge --repair with the services, attempts and backoff;
// bad values are exit 2.
func TestWatchConfigRepairWatch(t *testing.T) {
	r := watchConfig(t, "--consistent-cmd", "/bin/true", "--repair-service", "web", "--repair-service", "api", "--repair-attempts", "4", "--repair-backoff", "30s")
	mustCode(t, r, 0, "watch-config")
	var cfg struct{ Watches []watch.Watch }
	if err := json.Unmarshal([]byte(r.stdout), &cfg); err != nil {
		t.Fatal(err)
	}
	var found []string
	for _, w := range cfg.Watches {
		if w.Type != "checks" {
			continue
		}
		found = append(found, w.Service)
		want := "converge --handler --repair --repair-service web --repair-service api --repair-attempts 4 --repair-backoff 30s --consistent-cmd /bin/true"
		if got := strings.Join(w.Args[1:], " "); !strings.HasPrefix(got, want) {
			t.Errorf("the %s repair watch runs %q, want %q...", w.Service, got, want)
		}
	}
	if strings.Join(found, ",") != "web,api" {
		t.Errorf("checks watches on %v, want web and api", found)
	}
	for _, bad := range [][]string{
		{"--repair-service", "web"},
		{"--consistent-cmd", "/bin/true", "--repair-service", "we b"},
		{"--consistent-cmd", "/bin/true", "--repair-service", "web", "--repair-attempts", "0"},
		{"--consistent-cmd", "/bin/true", "--repair-service", "web", "--repair-backoff", "10ms"},
	} {
		mustCode(t, watchConfig(t, bad...), 2, strings.Join(bad, " "))
	}
}
