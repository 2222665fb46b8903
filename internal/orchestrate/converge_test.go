package orchestrate

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/hashicorp/consul/api"

	"github.com/jiocloud/orchestrate/internal/store"
	"github.com/jiocloud/orchestrate/internal/testutil"
)

func TestConvergeAppliesPendingUpdate(t *testing.T) {
	e := newConvergeEnv(t)
	mustCode(t, cli(t, e.a, "", "report-version", "v1"), 0, "at v1")
	mustCode(t, cli(t, e.a, "", "trigger-update", "v2"), 0, "trigger v2")

	r := e.converge(t)
	mustCode(t, r, 0, "converge")
	if !strings.Contains(r.stdout, "node1: converged (v2)") {
		t.Errorf("stdout = %q", r.stdout)
	}
	want := []string{"update v2", "puppet v2", "check_api v2", "check_db v2"}
	if got := e.ran(t); strings.Join(got, ",") != strings.Join(want, ",") {
		t.Fatalf("steps ran %v, want %v (check_api.bak is not a run-parts name)", got, want)
	}
	mustCode(t, cli(t, e.a, "", "verify-hosts", "v2", "node1"), 0, "node1 on v2")
	snap, err := mustStore(t, e.a).Snapshot(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	h := snap.Hosts["node1"]
	for _, cat := range []string{"update", "puppet", "validation"} {
		if h.Status[cat].State != "success" || h.Status[cat].Version != "v2" {
			t.Errorf("%s status = %+v, want success at v2", cat, h.Status[cat])
		}
	}
	if !strings.HasPrefix(h.Status["puppet"].LogURL, "file://"+e.logDir+"/converge-node1-") {
		t.Errorf("log_url = %q, want a file:// URL of this run's log", h.Status["puppet"].LogURL)
	}
	logPath := strings.TrimPrefix(h.Status["puppet"].LogURL, "file://")
	logData, err := os.ReadFile(logPath)
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range []string{"puppet: output for the run log", "== puppet: exit 0", "== validate check_db: exit 0"} {
		if !strings.Contains(string(logData), s) {
			t.Errorf("run log lacks %q:\n%s", s, logData)
		}
	}
	e.waitCheck(t, "orchestrate:puppet", api.HealthPassing, "success: puppet exit 0")
	e.waitCheck(t, "orchestrate:validation", api.HealthPassing, "success: 2 checks passed")

	// Nothing pending, all healthy: a watch re-fire does nothing, twice.
	for i := 0; i < 2; i++ {
		r = e.converge(t)
		mustCode(t, r, 0, "converge again")
		if !strings.Contains(r.stdout, "nothing to do") {
			t.Errorf("second converge: %q", r.stdout)
		}
	}
	if n := len(e.ran(t)); n != 4 {
		t.Fatalf("a converge with nothing to do ran steps: %v", e.ran(t))
	}
}

// TestConvergeValidationFailureKeepsVersion: a failing validation script keeps the host at v1, `orchestrate status`
// shows validation failed naming the script, and the next converge re-runs
// Puppet.
func TestConvergeValidationFailureKeepsVersion(t *testing.T) {
	e := newConvergeEnv(t)
	mustCode(t, cli(t, e.a, "", "report-version", "v1"), 0, "at v1")
	mustCode(t, cli(t, e.a, "", "trigger-update", "v2"), 0, "trigger v2")
	e.setExit(t, "check_db", "1")

	r := e.converge(t)
	mustCode(t, r, 1, "converge with failing validation")
	mustCode(t, cli(t, e.a, "", "verify-hosts", "v2", "node1"), 1, "node1 still not on v2")
	mustCode(t, cli(t, e.a, "", "hosts-at-version", "v1"), 0, "")
	st := cli(t, e.a, "", "status")
	if !strings.Contains(st.stdout, "failed") || !strings.Contains(st.stdout, "check_db (exit 1)") {
		t.Fatalf("status does not show validation failed naming check_db:\n%s", st.stdout)
	}
	f := cli(t, e.a, "", "get-failures", "validation")
	mustCode(t, f, 1, "get-failures lists it")
	e.waitCheck(t, "orchestrate:validation", api.HealthWarning, "check_db (exit 1)")
	e.waitCheck(t, "orchestrate:puppet", api.HealthPassing, "success")
	// The node's own serfHealth and services stay unaffected: warning, not critical.
	checks, _, _ := e.a.Client.Health().Node("node1", nil)
	if checks.AggregatedStatus() == api.HealthCritical {
		t.Fatal("a failed build made the node critical")
	}

	before := len(e.ran(t))
	e.setExit(t, "check_db", "0")
	mustCode(t, e.converge(t), 0, "converge after the fix")
	if got := e.ran(t)[before:]; len(got) < 2 || got[1] != "puppet v2" {
		t.Fatalf("next converge ran %v, want Puppet re-run", got)
	}
	mustCode(t, cli(t, e.a, "", "verify-hosts", "v2", "node1"), 0, "on v2 after the fix")
}

func TestConvergeRerunsPuppetAfterFailedValidationAtCurrentVersion(t *testing.T) {
	e := newConvergeEnv(t)
	mustCode(t, cli(t, e.a, "", "trigger-update", "v2"), 0, "trigger")
	mustCode(t, e.converge(t), 0, "first converge")
	n := len(e.ran(t))
	// Something (an operator, a later check) marks validation failed while
	// the version is current: converge must not skip Puppet.
	mustCode(t, cli(t, e.a, "", "update-status", "validation", "failed", "--detail", "monitoring says no"), 0, "")
	mustCode(t, e.converge(t), 0, "converge")
	if got := e.ran(t)[n:]; len(got) != 4 || got[1] != "puppet v2" {
		t.Fatalf("steps = %v, want a full run", got)
	}
}

func TestConvergePuppetFailureWithUnmetDependenciesIsPending(t *testing.T) {
	e := newConvergeEnv(t)
	mustCode(t, cli(t, e.a, "", "trigger-update", "v2"), 0, "trigger")
	if err := os.WriteFile(e.hiera, []byte("orchestrate::dependencies_met: false\norchestrate::unmet_dependencies:\n  - mysql\n  - keystone\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	e.setExit(t, "puppet", "6")
	r := e.converge(t)
	mustCode(t, r, 1, "pending")
	if !strings.Contains(r.stdout, "pending on dependencies") || !strings.Contains(r.stdout, "mysql, keystone") {
		t.Errorf("stdout = %q", r.stdout)
	}
	snap, _ := mustStore(t, e.a).Snapshot(context.Background())
	if st := snap.Hosts["node1"].Status["puppet"]; st.State != "pending" || !strings.Contains(st.Detail, "waiting on dependencies: mysql, keystone") {
		t.Fatalf("puppet status = %+v, want pending naming the dependencies", st)
	}
	mustCode(t, cli(t, e.a, "", "get-failures"), 0, "pending is not a failure")
	for _, s := range e.ran(t) {
		if strings.HasPrefix(s, "check_") {
			t.Fatalf("validation ran after Puppet failed: %v", e.ran(t))
		}
	}
	// The dependency appears (hiera-services re-rendered): now Puppet works.
	if err := os.WriteFile(e.hiera, []byte("orchestrate::dependencies_met: true\norchestrate::unmet_dependencies: []\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	e.setExit(t, "puppet", "2")
	mustCode(t, e.converge(t), 0, "converge once dependencies are met")

	// Puppet failing with dependencies met is a failure.
	mustCode(t, cli(t, e.a, "", "trigger-update", "v3"), 0, "trigger v3")
	e.setExit(t, "puppet", "4")
	mustCode(t, e.converge(t), 1, "failed")
	f := cli(t, e.a, "", "get-failures")
	mustCode(t, f, 1, "get-failures")
	if !strings.Contains(f.stdout, "puppet exit 4") {
		t.Errorf("get-failures = %q", f.stdout)
	}
}

// TestConvergeWithoutHieraDataIsPending: on a first boot Puppet may run
// before hiera-services rendered any data. A step that fails then waits for
// the data: pending, naming the file, never a failure that get-failures
// lists or --max-failures counts. Data that exists but cannot be read is
// this host's fault: failed, saying why.
func TestConvergeWithoutHieraDataIsPending(t *testing.T) {
	e := newConvergeEnv(t)
	mustCode(t, cli(t, e.a, "", "trigger-update", "v2"), 0, "trigger")
	e.setExit(t, "puppet", "6")
	status := func() store.Status {
		t.Helper()
		snap, err := mustStore(t, e.a).Snapshot(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		return snap.Hosts["node1"].Status["puppet"]
	}
	mustCode(t, e.converge(t, "--handler"), 0, "pending, as a handler")
	if st := status(); st.State != "pending" || !strings.Contains(st.Detail, "waiting for the hiera data: "+e.hiera+" does not exist yet") || !strings.Contains(st.Detail, "puppet exit 6") {
		t.Fatalf("puppet status = %+v, want pending waiting for %s", st, e.hiera)
	}
	mustCode(t, cli(t, e.a, "", "get-failures"), 0, "waiting for the data is not a failure")

	// Not "missing" but unreadable: a directory where the file belongs,
	// a path through a regular file, a FIFO (read, it would block the run)
	// and a device.
	file := filepath.Join(t.TempDir(), "file")
	if err := os.WriteFile(file, []byte("x"), 0o644); err != nil {
		t.Fatal(err)
	}
	fifo := filepath.Join(t.TempDir(), "fifo")
	if err := syscall.Mkfifo(fifo, 0o644); err != nil {
		t.Fatal(err)
	}
	for _, bad := range []string{t.TempDir(), filepath.Join(file, "services.yaml"), fifo, "/dev/zero"} {
		r := e.converge(t, "--hiera-data", bad)
		mustCode(t, r, 1, "unreadable hiera data")
		if st := status(); st.State != "failed" || !strings.Contains(st.Detail, "cannot tell whether dependencies are met: ") || !strings.Contains(st.Detail, bad) {
			t.Fatalf("--hiera-data %s: puppet status = %+v, want failed naming the file", bad, st)
		}
	}

	// hiera-services rendered it: Puppet works and the host converges.
	if err := os.WriteFile(e.hiera, []byte("orchestrate::dependencies_met: true\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	e.setExit(t, "puppet", "2")
	mustCode(t, e.converge(t), 0, "converge once the data exists")
	mustCode(t, cli(t, e.a, "", "verify-hosts", "v2", "node1"), 0, "node1 on v2")
}

func TestConvergeUpdateStepFailure(t *testing.T) {
	e := newConvergeEnv(t)
	mustCode(t, cli(t, e.a, "", "trigger-update", "v2"), 0, "trigger")
	e.setExit(t, "update", "100")
	mustCode(t, e.converge(t), 1, "update fails")
	if got := e.ran(t); len(got) != 1 {
		t.Fatalf("steps after a failed update: %v, want only the update", got)
	}
	f := cli(t, e.a, "", "get-failures", "update")
	mustCode(t, f, 1, "")
	if !strings.Contains(f.stdout, "exit 100") {
		t.Errorf("get-failures update = %q", f.stdout)
	}
}

func TestConvergeValidationTimeout(t *testing.T) {
	e := newConvergeEnv(t)
	mustCode(t, cli(t, e.a, "", "trigger-update", "v2"), 0, "trigger")
	if err := os.WriteFile(filepath.Join(e.stepDir, "check_api.sleep"), []byte("30"), 0o644); err != nil {
		t.Fatal(err)
	}
	r := e.converge(t, "--validate-timeout", "500ms")
	mustCode(t, r, 1, "timeout")
	if !strings.Contains(r.stdout, "check_api (timed out after") {
		t.Errorf("stdout = %q", r.stdout)
	}
}

func TestConvergeTwoAtOnce(t *testing.T) {
	e := newConvergeEnv(t)
	mustCode(t, cli(t, e.a, "", "trigger-update", "v2"), 0, "trigger")
	if err := os.WriteFile(filepath.Join(e.stepDir, "puppet.sleep"), []byte("1"), 0o644); err != nil {
		t.Fatal(err)
	}
	t.Run("second exits", func(t *testing.T) {
		results := make([]result, 2)
		var wg sync.WaitGroup
		for i := range results {
			wg.Add(1)
			go func(i int) {
				defer wg.Done()
				results[i] = e.converge(t, "--wait=false")
			}(i)
		}
		wg.Wait()
		busy := 0
		for _, r := range results {
			if r.code != 0 {
				t.Errorf("exit %d: %s %s", r.code, r.stdout, r.stderr)
			}
			if strings.Contains(r.stdout, "another converge is running") {
				busy++
			}
		}
		if busy != 1 {
			t.Fatalf("%d runs found the lock held, want exactly 1: %+v", busy, results)
		}
		if n := strings.Count(strings.Join(e.ran(t), "\n"), "puppet"); n != 1 {
			t.Fatalf("puppet ran %d times, want 1", n)
		}
	})
	t.Run("second waits then finds nothing to do", func(t *testing.T) {
		mustCode(t, cli(t, e.a, "", "trigger-update", "v3"), 0, "trigger v3")
		results := make([]result, 2)
		var wg sync.WaitGroup
		for i := range results {
			wg.Add(1)
			go func(i int) {
				defer wg.Done()
				results[i] = e.converge(t)
			}(i)
		}
		wg.Wait()
		out := results[0].stdout + results[1].stdout
		if !strings.Contains(out, "converged (v3)") || !strings.Contains(out, "nothing to do") {
			t.Fatalf("want one converged and one nothing to do: %q", out)
		}
		if n := strings.Count(strings.Join(e.ran(t), "\n"), "puppet v3"); n != 1 {
			t.Fatalf("puppet ran %d times for v3, want 1", n)
		}
	})
}

func TestConvergeBadFlags(t *testing.T) {
	e := newConvergeEnv(t)
	for _, args := range [][]string{
		{"converge"}, // no --puppet-cmd
		{"converge", "--puppet-cmd", "true", "--validate-cmd", "true", "--validate-dir", "/tmp"},
		{"converge", "--puppet-cmd", "true", "--log-dir", "relative/logs"},
		{"converge", "--puppet-cmd", "true", "--validate-dir", "/nonexistent/checks"},
		{"converge", "--puppet-cmd", "true", "--step-timeout", "0s"},
		{"converge", "--puppet-cmd", "true", "--hiera-data", ""},
		{"converge", "--puppet-cmd", "true", "--hiera-data", "services.yaml"},
		{"converge", "--consistent-cmd", "true", "--repair"},
		{"converge", "--consistent-cmd", "true", "--repair-service", "web"},
		{"converge", "--consistent-cmd", "true", "--repair", "--repair-service", "we b"},
		{"converge", "--consistent-cmd", "true", "--repair", "--repair-service", "web", "--repair-attempts", "0"},
		{"converge", "--consistent-cmd", "true", "--repair", "--repair-service", "web", "--repair-backoff", "1ms"},
		{"converge", "--consistent-cmd", "true", "--eventual-cmd", "true", "--repair", "--repair-service", "web", "--eventual-only"},
	} {
		r := cli(t, e.a, "", args...)
		mustCode(t, r, 2, strings.Join(args, " "))
		if !strings.Contains(r.stderr, "--") {
			t.Errorf("error does not name the flag: %s", r.stderr)
		}
	}
	if ks := allKeys(t, e.a.Client); len(ks) != 0 {
		t.Fatalf("bad flags wrote keys: %v", ks)
	}
}

// TestConvergeWithRealPuppet runs Debian's puppet apply as --puppet-cmd:
// a manifest that changes something (exit 2) converges; one whose resource
// fails (exit 4 or 6) is recorded as failed.
func TestConvergeWithRealPuppet(t *testing.T) {
	puppet := testutil.RequirePuppet(t)
	e := newConvergeEnv(t)
	dir := t.TempDir()
	target := filepath.Join(dir, "managed.txt")
	good := filepath.Join(dir, "good.pp")
	bad := filepath.Join(dir, "bad.pp")
	if err := os.WriteFile(good, []byte("file { '"+target+"': content => \"converged\\n\" }\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(bad, []byte("exec { 'fails': command => '/bin/false' }\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	papply := puppetApply(puppet, dir, "")
	mustCode(t, cli(t, e.a, "", "trigger-update", "v2"), 0, "trigger")
	r := cli(t, e.a, "", "converge", "--puppet-cmd", papply(good), "--log-dir", filepath.Join(dir, "log"), "--lock-file", e.lockFile, "--hiera-data", e.hiera)
	mustCode(t, r, 0, "converge with a real puppet run that applies a change")
	if data, err := os.ReadFile(target); err != nil || string(data) != "converged\n" {
		t.Fatalf("puppet did not manage the file: %q %v", data, err)
	}
	mustCode(t, cli(t, e.a, "", "verify-hosts", "v2", "node1"), 0, "on v2")

	mustCode(t, cli(t, e.a, "", "trigger-update", "v3"), 0, "trigger v3")
	r = cli(t, e.a, "", "converge", "--puppet-cmd", papply(bad), "--log-dir", filepath.Join(dir, "log"), "--lock-file", e.lockFile, "--hiera-data", e.hiera)
	mustCode(t, r, 1, "converge with a failing real puppet run")
	if !strings.Contains(r.stdout, "puppet exit 4") && !strings.Contains(r.stdout, "puppet exit 6") {
		t.Fatalf("want puppet's detailed exit code 4 or 6 in %q", r.stdout)
	}
	mustCode(t, cli(t, e.a, "", "verify-hosts", "v2", "node1"), 0, "still on v2")
}

func TestConvergeRetries(t *testing.T) {
	e := newConvergeEnv(t)
	mustCode(t, cli(t, e.a, "", "trigger-update", "v2"), 0, "trigger")
	// The data is there and says nothing is missing: a failure is a failure.
	if err := os.WriteFile(e.hiera, []byte("orchestrate::dependencies_met: true\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	e.setExit(t, "puppet", "1")
	r := e.converge(t, "--retry-interval", "50ms", "--max-attempts", "3", "--json")
	mustCode(t, r, 1, "three failed attempts")
	if n := strings.Count(strings.Join(e.ran(t), "\n"), "puppet v2"); n != 3 {
		t.Fatalf("puppet ran %d times, want 3 (--max-attempts)", n)
	}
	if !strings.Contains(r.stdout, `"outcome": "failed"`) {
		t.Errorf("--json output = %s", r.stdout)
	}
	if n := len(e.ran(t)); n != 6 { // update + puppet, three times
		t.Fatalf("steps = %v", e.ran(t))
	}
	// A retry that succeeds stops retrying.
	if err := os.WriteFile(filepath.Join(e.stepDir, "puppet.exit"), []byte("0"), 0o644); err != nil {
		t.Fatal(err)
	}
	mustCode(t, e.converge(t, "--retry-interval", "50ms"), 0, "succeeds at once")
	if n := strings.Count(strings.Join(e.ran(t), "\n"), "puppet v2"); n != 4 {
		t.Fatalf("puppet ran %d times in all, want 4", n)
	}
}

// TestConvergeUnusableLocalPaths: a --log-dir or --lock-file that cannot be
// created is the operator's input, not Consul: exit 2 naming the flag, no
// status recorded. Both used to exit 3 ("Consul unreachable").
func TestConvergeUnusableLocalPaths(t *testing.T) {
	e := newConvergeEnv(t)
	mustCode(t, cli(t, e.a, "", "trigger-update", "v2"), 0, "trigger")
	file := filepath.Join(t.TempDir(), "a-file")
	if err := os.WriteFile(file, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct{ flag, value string }{
		{"--log-dir", filepath.Join(file, "logs")},
		{"--lock-file", filepath.Join(file, "converge.lock")},
	} {
		r := e.converge(t, tc.flag, tc.value)
		mustCode(t, r, 2, tc.flag+" "+tc.value)
		if !strings.Contains(r.stderr, tc.flag) {
			t.Errorf("error does not name %s: %s", tc.flag, r.stderr)
		}
	}
	for _, k := range allKeys(t, e.a.Client) {
		if strings.Contains(k, "/hosts/") || strings.Contains(k, "/status/") || strings.Contains(k, "/running_version/") {
			t.Errorf("unusable path still recorded %s", k)
		}
	}
	if n := len(e.ran(t)); n != 0 {
		t.Errorf("steps ran: %v", e.ran(t))
	}
}

// TestConvergeKeepLogsPrunesOnlyItsHost: --keep-logs prunes this host's run
// logs only. Hosts sharing a --log-dir whose names extend one another (web,
// web-1) or hold glob characters used to lose each other's logs, which
// status log_url values still point at.
func TestConvergeKeepLogsPrunesOnlyItsHost(t *testing.T) {
	e := newConvergeEnv(t)
	mustCode(t, cli(t, e.a, "", "trigger-update", "v2"), 0, "trigger")
	hosts := []string{"web-1", "w*", "web"} // each run prunes with --keep-logs 1
	for _, h := range hosts {
		r := e.converge(t, "--host", h, "--keep-logs", "1", "--no-checks", "--force")
		mustCode(t, r, 0, "converge "+h)
	}
	for _, h := range hosts {
		logs, err := filepath.Glob(filepath.Join(e.logDir, "converge-"+h+"-2*.log"))
		if err != nil {
			t.Fatal(err)
		}
		n := 0
		for _, l := range logs {
			if strings.HasPrefix(filepath.Base(l), "converge-"+h+"-2") {
				n++
			}
		}
		if n != 1 {
			entries, _ := os.ReadDir(e.logDir)
			t.Errorf("host %s has %d run logs, want 1; dir: %v", h, n, entries)
		}
	}
}

// TestConvergeWithholdsCredentials: the update step, Puppet and validation
// run without the Consul token or OpenStack credentials of the caller's
// environment, unless --pass-env names one; each step prints its
// environment to show what it got.
func TestConvergeWithholdsCredentials(t *testing.T) {
	e := newConvergeEnv(t)
	tokenFile := filepath.Join(t.TempDir(), "token")
	if err := os.WriteFile(tokenFile, []byte("file-token-value\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	// The dev agent runs without ACLs, so the token is accepted and ignored.
	t.Setenv("CONSUL_HTTP_TOKEN", "env-token-value")
	t.Setenv("CONSUL_HTTP_TOKEN_FILE", tokenFile)
	t.Setenv("OS_PASSWORD", "os-password-value")
	t.Setenv("OS_CLOUD", "prod-cloud")
	t.Setenv("OS_APPLICATION_CREDENTIAL_SECRET", "app-secret-value")
	t.Setenv("KEEP_ME", "kept")
	mustCode(t, cli(t, e.a, "", "trigger-update", "v1"), 0, "trigger v1")

	envOf := func(step string) string { return filepath.Join(e.stepDir, step+".env") }
	run := func(extra ...string) {
		t.Helper()
		args := []string{"converge", "--force",
			"--update-cmd", "env > " + envOf("update"),
			"--puppet-cmd", "env > " + envOf("puppet"),
			"--validate-cmd", "env > " + envOf("validate"),
			"--hiera-data", e.hiera, "--log-dir", e.logDir, "--lock-file", e.lockFile,
		}
		mustCode(t, cli(t, e.a, "", append(args, extra...)...), 0, "converge")
	}
	check := func(want, notWant []string) {
		t.Helper()
		for _, step := range []string{"update", "puppet", "validate"} {
			data, err := os.ReadFile(envOf(step))
			if err != nil {
				t.Fatal(err)
			}
			env := "\n" + string(data)
			for _, w := range want {
				if !strings.Contains(env, "\n"+w+"\n") {
					t.Errorf("%s step: %q missing from its environment", step, w)
				}
			}
			for _, n := range notWant {
				if strings.Contains(env, n) {
					t.Errorf("%s step inherited %q:\n%s", step, n, data)
				}
			}
		}
	}
	run()
	check([]string{"KEEP_ME=kept", "ORCHESTRATE_VERSION=v1"},
		[]string{"CONSUL_HTTP_TOKEN", "env-token-value", "file-token-value", "OS_PASSWORD", "os-password-value", "OS_CLOUD", "app-secret-value"})

	run("--pass-env", "OS_CLOUD", "--pass-env", "CONSUL_HTTP_TOKEN_FILE")
	check([]string{"KEEP_ME=kept", "OS_CLOUD=prod-cloud", "CONSUL_HTTP_TOKEN_FILE=" + tokenFile},
		[]string{"CONSUL_HTTP_TOKEN=", "env-token-value", "OS_PASSWORD", "app-secret-value"})

	r := cli(t, e.a, "", "converge", "--puppet-cmd", "true", "--pass-env", "OS PASSWORD")
	mustCode(t, r, 2, "--pass-env with a bad name")
	if !strings.Contains(r.stderr, "--pass-env") {
		t.Errorf("error does not name --pass-env: %s", r.stderr)
	}
}

// A converge killed in its Puppet step takes the step with it: the whole
// process group (the step's shell, Puppet, its children) ends with
// converge, so the next run never starts a second Puppet beside it. A
// group a dead run left anyway (recorded beside the lock) is ended by the
// next run before it runs anything.
func TestConvergeKilledTakesItsStepWithIt(t *testing.T) {
	e := newConvergeEnv(t)
	mustCode(t, cli(t, e.a, "", "trigger-update", "v2"), 0, "trigger")
	if err := os.WriteFile(filepath.Join(e.stepDir, "puppet.sleep"), []byte("30"), 0o644); err != nil {
		t.Fatal(err)
	}
	bin := filepath.Join(testutil.BuildCommands(t, "orchestrate"), "orchestrate")
	step, _ := filepath.Abs("testdata/converge/step.sh")
	cmd := exec.Command(bin, "converge", "--consul-addr", e.a.HTTPAddr, "--update-cmd", step+" update",
		"--puppet-cmd", step+" puppet", "--validate-dir", e.checks, "--hiera-data", e.hiera,
		"--log-dir", e.logDir, "--lock-file", e.lockFile)
	cmd.Env = append(os.Environ(), "STEP_DIR="+e.stepDir)
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	var pgid int
	testutil.Eventually(t, 10*time.Second, "the Puppet step to start", func() bool {
		data, err := os.ReadFile(e.lockFile + ".step")
		pgid, _ = strconv.Atoi(strings.TrimSpace(string(data)))
		return err == nil && pgid > 1 && strings.Contains(strings.Join(e.ran(t), " "), "puppet v2")
	})
	cmd.Process.Kill()
	cmd.Wait()
	testutil.Eventually(t, 3*time.Second, "the step's process group to end with converge", func() bool {
		return syscall.Kill(-pgid, 0) == syscall.ESRCH
	})

	// A group left behind (as a step that escaped the guard's kill would
	// be): the next run ends it before its own steps.
	left := exec.Command("sleep", "30")
	left.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := left.Start(); err != nil {
		t.Fatal(err)
	}
	defer left.Process.Kill()
	go left.Wait()
	if err := os.WriteFile(e.lockFile+".step", []byte(strconv.Itoa(left.Process.Pid)+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	os.Remove(filepath.Join(e.stepDir, "puppet.sleep"))
	r := e.converge(t)
	mustCode(t, r, 0, "converge after a dead run")
	if syscall.Kill(-left.Process.Pid, 0) != syscall.ESRCH {
		t.Fatal("the group a dead run left still runs")
	}
	if !strings.Contains(r.stdout, "converged (v2)") {
		t.Fatalf("stdout %q", r.stdout)
	}
}
