package orchestrate

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/hashicorp/consul/api"

	"github.com/jiocloud/orchestrate/internal/testutil"
)

// convergeTwo runs converge with a consistent and an eventual stand-in step.
func (e *convergeEnv) convergeTwo(t *testing.T, extra ...string) result {
	t.Helper()
	step, _ := filepath.Abs("testdata/converge/step.sh")
	args := []string{"converge",
		"--update-cmd", step + " update",
		"--consistent-cmd", step + " consistent",
		"--eventual-cmd", step + " eventual",
		"--validate-dir", e.checks,
		"--hiera-data", e.hiera,
		"--log-dir", e.logDir,
		"--lock-file", e.lockFile,
	}
	return cli(t, e.a, "", append(args, extra...)...)
}

func (e *convergeEnv) writeHiera(t *testing.T, met bool) {
	t.Helper()
	data := "orchestrate::dependencies_met: true\norchestrate::unmet_dependencies: []\n"
	if !met {
		data = "orchestrate::dependencies_met: false\norchestrate::unmet_dependencies: [keystone]\n"
	}
	if err := os.WriteFile(e.hiera, []byte(data), 0o644); err != nil {
		t.Fatal(err)
	}
}

// count counts the runs of step recorded so far.
func (e *convergeEnv) count(t *testing.T, step string) int {
	n := 0
	for _, s := range e.ran(t) {
		if strings.HasPrefix(s, step+" ") {
			n++
		}
	}
	return n
}

// Two steps: the eventual step failing while a dependency is unmet is
// pending (status eventual pending, not a failure, the version not
// reported); re-running it, by the data-change handler or by the version
// watch, never re-runs the consistent step; once the dependency is met the
// host converges and reports the version.
func TestConvergeEventualPendingNeverRerunsConsistent(t *testing.T) {
	e := newConvergeEnv(t)
	mustCode(t, cli(t, e.a, "", "trigger-update", "v2"), 0, "trigger")
	e.writeHiera(t, false)
	e.setExit(t, "eventual", "6")
	r := e.convergeTwo(t)
	mustCode(t, r, 1, "pending")
	if !strings.Contains(r.stdout, "pending on dependencies") {
		t.Fatalf("stdout = %q", r.stdout)
	}
	snap, err := mustStore(t, e.a).Snapshot(context.Background())
	if err != nil || snap.Hosts["node1"] == nil {
		t.Fatalf("snapshot: %v, node1 %v", err, snap)
	}
	h := snap.Hosts["node1"]
	if h.Status["puppet"].State != "success" || h.Status["eventual"].State != "pending" || !strings.Contains(h.Status["eventual"].Detail, "keystone") {
		t.Fatalf("statuses %+v, want consistent (puppet) success and eventual pending naming keystone", h.Status)
	}
	if _, ok := h.Status["validation"]; ok {
		t.Fatal("validation ran after the eventual step failed")
	}
	mustCode(t, cli(t, e.a, "", "get-failures"), 0, "pending is not a failure")
	mustCode(t, cli(t, e.a, "", "verify-hosts", "v2", "node1"), 1, "not on v2 yet")
	e.waitCheck(t, "orchestrate:eventual", api.HealthWarning, "pending: waiting on dependencies: keystone")

	// The version watch fires again (or a retry): the eventual step only.
	mustCode(t, e.convergeTwo(t, "--handler"), 0, "still pending, a handler exits 0")
	// The data changed but the dependency is still missing: eventual only.
	mustCode(t, e.convergeTwo(t, "--eventual-only", "--handler"), 0, "eventual only, pending")
	if c, ev := e.count(t, "consistent"), e.count(t, "eventual"); c != 1 || ev != 3 {
		t.Fatalf("consistent ran %d times, eventual %d: want 1 and 3 (%v)", c, ev, e.ran(t))
	}

	// The dependency registers; hiera-services re-renders and runs the
	// eventual step: the host converges.
	e.writeHiera(t, true)
	e.setExit(t, "eventual", "2")
	r = e.convergeTwo(t, "--eventual-only")
	mustCode(t, r, 0, "converged")
	if !strings.Contains(r.stdout, "node1: converged (v2)") {
		t.Fatalf("stdout = %q", r.stdout)
	}
	mustCode(t, cli(t, e.a, "", "verify-hosts", "v2", "node1"), 0, "on v2")
	if c, u := e.count(t, "consistent"), e.count(t, "update"); c != 1 || u != 1 {
		t.Fatalf("consistent ran %d times and update %d, want once each (%v)", c, u, e.ran(t))
	}
	// Nothing to do afterwards; a data change re-runs the eventual step
	// (cheap), never the consistent one.
	r = e.convergeTwo(t)
	if !strings.Contains(r.stdout, "nothing to do") {
		t.Fatalf("after converging: %q", r.stdout)
	}
	mustCode(t, e.convergeTwo(t, "--eventual-only"), 0, "eventual after a data change")
	if c, ev := e.count(t, "consistent"), e.count(t, "eventual"); c != 1 || ev != 5 {
		t.Fatalf("consistent %d, eventual %d runs, want 1 and 5 (%v)", c, ev, e.ran(t))
	}

	// The eventual step failing with dependencies met is a failure, in its
	// own category.
	mustCode(t, cli(t, e.a, "", "trigger-update", "v3"), 0, "trigger v3")
	e.setExit(t, "eventual", "4")
	mustCode(t, e.convergeTwo(t), 1, "eventual failed")
	f := cli(t, e.a, "", "get-failures")
	mustCode(t, f, 1, "get-failures")
	if !strings.Contains(f.stdout, "eventual") || !strings.Contains(f.stdout, "eventual step exit 4") {
		t.Fatalf("get-failures = %q, want the eventual category and its exit", f.stdout)
	}
}

// The consistent step failing is a failure even while dependencies are
// unmet (it must not need other hosts' data); the eventual step does not
// run, and a data change does not run it either.
func TestConvergeConsistentFailureIsAFailure(t *testing.T) {
	e := newConvergeEnv(t)
	mustCode(t, cli(t, e.a, "", "trigger-update", "v2"), 0, "trigger")
	e.writeHiera(t, false)
	e.setExit(t, "consistent", "4")
	r := e.convergeTwo(t)
	mustCode(t, r, 1, "failed")
	if !strings.Contains(r.stdout, "failed") || !strings.Contains(r.stdout, "consistent step exit 4") {
		t.Fatalf("stdout = %q", r.stdout)
	}
	r = e.convergeTwo(t, "--eventual-only")
	mustCode(t, r, 0, "nothing for the eventual step")
	if !strings.Contains(r.stdout, "nothing to do") {
		t.Fatalf("eventual-only after a failed consistent step: %q", r.stdout)
	}
	if n := e.count(t, "eventual"); n != 0 {
		t.Fatalf("the eventual step ran %d times after the consistent step failed", n)
	}
	for _, bad := range [][]string{
		{"--puppet-cmd", "true"},       // with --consistent-cmd
		{"--eventual-only", "--force"}, // exclusive
	} {
		r := e.convergeTwo(t, bad...)
		mustCode(t, r, 2, strings.Join(bad, " "))
	}
	r = cli(t, e.a, "", "converge", "--eventual-only", "--consistent-cmd", "true", "--log-dir", e.logDir, "--lock-file", e.lockFile)
	mustCode(t, r, 2, "--eventual-only without --eventual-cmd")
	if !strings.Contains(r.stderr, "--eventual-only needs --eventual-cmd") {
		t.Fatalf("stderr = %q", r.stderr)
	}
}

// Two steps with real Puppet: a consistent class that manages a file and
// an eventual class that needs keystone's address from the hiera data
// hiera-services renders. While keystone has no instance the manifests
// still compile (services.yaml holds keystone's keys as empty lists), the
// eventual class fails on purpose, and the run is pending; once keystone
// registers, the data-change run converges without running the consistent
// class again (each class counts its runs in a file).
func TestConvergeTwoStepsWithRealPuppet(t *testing.T) {
	puppet := testutil.RequirePuppet(t)
	e := newConvergeEnv(t)
	dir := t.TempDir()
	hieraYAML := filepath.Join(dir, "hiera.yaml")
	deps := filepath.Join(dir, "deps.yaml")
	counts := filepath.Join(dir, "counts")
	consistentPP := filepath.Join(dir, "consistent.pp")
	eventualPP := filepath.Join(dir, "eventual.pp")
	for path, data := range map[string]string{
		hieraYAML: "---\nversion: 5\ndefaults:\n  data_hash: yaml_data\nhierarchy:\n  - name: services\n    path: " + e.hiera + "\n    datadir: /\n",
		deps:      "keystone: {addressable: 1}\n",
		// The consistent class: static, no other host's data.
		consistentPP: "exec { 'count consistent': command => \"/bin/sh -c 'echo consistent >> " + counts + "'\" }\n" +
			"file { '" + filepath.Join(dir, "motd") + "': content => \"built\\n\" }\n",
		// The eventual class: uses keystone's address; the lookup has no
		// default, so it compiles only because the key always exists.
		eventualPP: "exec { 'count eventual': command => \"/bin/sh -c 'echo eventual >> " + counts + "'\" }\n" +
			"$ks = lookup('services::keystone::address')\n" +
			"if $ks == [] { fail('no keystone yet') }\n" +
			"file { '" + filepath.Join(dir, "keystone.conf") + "': content => \"auth_url = http://${ks[0]}:5000\\n\" }\n",
	} {
		if err := os.WriteFile(path, []byte(data), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	papply := puppetApply(puppet, dir, "--hiera_config "+hieraYAML)
	hs := builtBinary(t, "hiera-services")
	render := func() {
		t.Helper()
		cmd := exec.Command(hs, "--out", e.hiera, "--dependencies", deps)
		cmd.Env = append(os.Environ(), "CONSUL_HTTP_ADDR="+e.a.HTTPAddr)
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("hiera-services: %v\n%s", err, out)
		}
	}
	converge := func(extra ...string) result {
		t.Helper()
		args := append([]string{"converge", "--consistent-cmd", papply(consistentPP), "--eventual-cmd", papply(eventualPP),
			"--hiera-data", e.hiera, "--log-dir", filepath.Join(dir, "log"), "--lock-file", e.lockFile}, extra...)
		return cli(t, e.a, "", args...)
	}
	runs := func() (consistent, eventual int) {
		t.Helper()
		data, _ := os.ReadFile(counts)
		for _, l := range strings.Fields(string(data)) {
			switch l {
			case "consistent":
				consistent++
			case "eventual":
				eventual++
			}
		}
		return consistent, eventual
	}
	mustCode(t, cli(t, e.a, "", "trigger-update", "v2"), 0, "trigger")
	render()
	r := converge()
	mustCode(t, r, 1, "pending while keystone is missing")
	if !strings.Contains(r.stdout, "pending on dependencies") || !strings.Contains(r.stdout, "keystone") {
		t.Fatalf("stdout = %q", r.stdout)
	}
	if c, ev := runs(); c != 1 || ev != 0 {
		// The eventual manifest failed at compile time (fail()), before
		// its exec: 0 runs of it counted.
		t.Fatalf("runs consistent %d, eventual %d; want 1 and 0", c, ev)
	}
	if _, err := e.a.Client.Catalog().Register(&api.CatalogRegistration{Node: "ks1", Address: "10.0.0.9",
		Service: &api.AgentService{ID: "keystone", Service: "keystone", Port: 5000}}, nil); err != nil {
		t.Fatal(err)
	}
	render()
	r = converge("--eventual-only")
	mustCode(t, r, 0, "converged once keystone registered")
	if data, err := os.ReadFile(filepath.Join(dir, "keystone.conf")); err != nil || string(data) != "auth_url = http://10.0.0.9:5000\n" {
		t.Fatalf("keystone.conf = %q %v", data, err)
	}
	if c, ev := runs(); c != 1 || ev != 1 {
		t.Fatalf("runs consistent %d, eventual %d; want 1 and 1", c, ev)
	}
	mustCode(t, cli(t, e.a, "", "verify-hosts", "v2", "node1"), 0, "on v2")
}

// A consistent step that fails on every one of --max-attempts marks the
// host suspect (its puppet status carries suspect: true), and `status`
// says so; the older --puppet-cmd never marks a host suspect.
func TestConvergeSuspectAfterMaxAttempts(t *testing.T) {
	e := newConvergeEnv(t)
	mustCode(t, cli(t, e.a, "", "trigger-update", "v2"), 0, "trigger")
	e.writeHiera(t, true)
	e.setExit(t, "consistent", "4")
	r := e.convergeTwo(t, "--retry-interval", "10ms", "--max-attempts", "2")
	mustCode(t, r, 1, "failed twice")
	if !strings.Contains(r.stdout, "suspect: the consistent step failed 2 time(s)") {
		t.Fatalf("stdout = %q", r.stdout)
	}
	if n := e.count(t, "consistent"); n != 2 {
		t.Fatalf("the consistent step ran %d times, want 2", n)
	}
	snap, err := mustStore(t, e.a).Snapshot(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if st := snap.Hosts["node1"].Status["puppet"]; st.State != "failed" || !st.Suspect {
		t.Fatalf("puppet status %+v, want failed and suspect", st)
	}
	if got := snap.Suspects(); len(got) != 1 || got["node1"] == "" {
		t.Fatalf("suspects = %v, want node1", got)
	}
	st := cli(t, e.a, "", "status", "--no-catalog")
	if !strings.Contains(st.stdout, "suspect: node1") || !strings.Contains(st.stdout, "suspect 1") {
		t.Fatalf("status does not list the suspect:\n%s", st.stdout)
	}
	// A success clears it: the next record replaces the failed one.
	e.setExit(t, "consistent", "0")
	mustCode(t, e.convergeTwo(t), 0, "converged")
	snap, _ = mustStore(t, e.a).Snapshot(context.Background())
	if len(snap.Suspects()) != 0 {
		t.Fatalf("still suspect after a successful run: %v", snap.Suspects())
	}

	// The older single run is never suspect.
	mustCode(t, cli(t, e.a, "", "trigger-update", "v3"), 0, "trigger v3")
	e.setExit(t, "puppet", "4")
	mustCode(t, e.converge(t, "--retry-interval", "10ms", "--max-attempts", "1"), 1, "failed")
	snap, _ = mustStore(t, e.a).Snapshot(context.Background())
	if st := snap.Hosts["node1"].Status["puppet"]; st.Suspect {
		t.Fatalf("--puppet-cmd marked the host suspect: %+v", st)
	}
}
