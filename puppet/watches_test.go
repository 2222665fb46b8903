package puppet_test

import (
	"context"
	"encoding/json"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/consul/api"

	"github.com/jiocloud/orchestrate/internal/consultest"
	"github.com/jiocloud/orchestrate/internal/store"
	"github.com/jiocloud/orchestrate/internal/store/schema"
	"github.com/jiocloud/orchestrate/internal/testutil"
	"github.com/jiocloud/orchestrate/watch"
)

// node is class orchestrate as a node has it: the module's defaults,
// except that every path is under the root (%[1]s) and the binaries are
// the test's (%[2]s). The node needs keystone's address (its dependencies
// hash); the two Puppet steps are stand-ins (%[3]s, %[4]s) and the agent
// is reloaded with the real consul CLI (%[5]s).
const node = `
class { 'orchestrate':
  manage_package     => false,
  config_dir         => '%[1]s/etc/orchestrate',
  hiera_data_file    => '%[1]s/var/lib/orchestrate/hiera/services.yaml',
  watch_config_file  => '%[1]s/etc/consul.d/orchestrate-watches.json',
  consul_token       => Sensitive('node-secret-4b1f'),
  token_owner        => 'root',
  token_group        => 'root',
  consul_reload      => '%[5]s',
  orchestrate_bin    => '%[2]s/orchestrate',
  hiera_services_bin => '%[2]s/hiera-services',
  dependencies       => { 'keystone' => { 'addressable' => 1 } },
  watch_args         => ['--consistent-cmd', '%[3]s', '--eventual-cmd', '%[4]s',
    '--converge-arg=--log-dir=%[1]s/var/log/orchestrate', '--converge-arg=--lock-file=%[1]s/run/lock/orchestrate-converge.lock'],
}
`

// TestModuleWatchesWaitThenConverge applies class orchestrate with
// Debian's puppet on a real Consul agent, whose configuration directory
// the module writes its watches into (and reloads it), and lets the
// agent's own watches run the real binaries. A node whose eventual step
// needs keystone, which no host has registered, is recorded pending on
// keystone, never failed (get-failures finds nothing); keystone
// registering makes the watches re-render, re-run the eventual step, and
// the node converges and reports the version.
//
// Before 2026-11-25 the generated converge read its own default hiera
// data file instead of the module's: it found no data and recorded the
// waiting node as failed.
func TestModuleWatchesWaitThenConverge(t *testing.T) {
	w := newWorld(t)
	consul := consultest.RequireBinary(t)
	steps := t.TempDir()
	hieraData := filepath.Join(w.root, "var/lib/orchestrate/hiera/services.yaml")
	ran := filepath.Join(steps, "ran")
	consistent := script(t, steps, "consistent", `echo "consistent $ORCHESTRATE_VERSION" >> `+ran)
	// The eventual stand-in fails, as Puppet code that needs keystone's
	// address would, until the module's hiera data holds one.
	eventual := script(t, steps, "eventual", `echo "eventual $ORCHESTRATE_VERSION" >> `+ran+`
grep -q '"services::keystone::address": \["' `+hieraData+` || exit 6`)

	confDir := filepath.Join(w.root, "etc/consul.d")
	a := consultest.Start(t, consultest.Options{NodeName: "web1", ConfigDir: confDir, HandlerEnv: true})
	agentLog := func() string { b, _ := os.ReadFile(a.LogPath); return string(b) }
	// Puppet's execs (watch-config asks the agent for the node's name,
	// the reload) reach the agent as a node's do: at its address.
	w.env = []string{"CONSUL_HTTP_ADDR=" + a.HTTPAddr}
	reload := consul + " reload -http-addr=" + a.HTTPAddr
	manifest := strings.NewReplacer("%[3]s", consistent, "%[4]s", eventual, "%[5]s", reload).Replace(node)
	code, out := w.apply(t, manifest)
	if code != 2 {
		t.Fatalf("puppet apply: exit %d, want 2 (changes):\n%s", code, out)
	}

	// The watches the module wrote run converge on the module's data file.
	_, watches := w.file(t, "etc/consul.d/orchestrate-watches.json")
	var cfg struct{ Watches []watch.Watch }
	if err := json.Unmarshal([]byte(watches), &cfg); err != nil {
		t.Fatalf("the watch file: %v\n%s", err, watches)
	}
	for _, wa := range cfg.Watches {
		if wa.Args[0] == filepath.Join(w.bin, "orchestrate") && wa.Args[1] != "heartbeat" && argAfter(wa.Args, "--hiera-data") != hieraData {
			t.Errorf("the %s watch runs converge on %q, want the module's %s", wa.Type, argAfter(wa.Args, "--hiera-data"), hieraData)
		}
	}

	// The reloaded agent runs the services watch: the data appears.
	testutil.Eventually(t, 30*time.Second, "hiera-services writing "+hieraData, func() bool {
		b, err := os.ReadFile(hieraData)
		return err == nil && strings.Contains(string(b), `"orchestrate::dependencies_met": false`)
	}, agentLog)

	st, err := store.New(a.Client, schema.DefaultPrefix)
	if err != nil {
		t.Fatal(err)
	}
	status := func() map[string]store.Status {
		snap, err := st.Snapshot(context.Background())
		if err != nil || snap.Hosts["web1"] == nil {
			return nil
		}
		return snap.Hosts["web1"].Status
	}
	orch(t, w, a, 0, "trigger-update", "v1")
	testutil.Eventually(t, 30*time.Second, "web1's eventual step recorded pending on keystone", func() bool {
		s := status()
		return s != nil && s["eventual"].State == store.StatePending
	}, agentLog)
	s := status()
	if !strings.Contains(s["eventual"].Detail, "waiting on dependencies: keystone") || s["puppet"].State != store.StateSuccess {
		t.Fatalf("web1's status: eventual %+v, puppet %+v; want pending on keystone after the consistent step succeeded", s["eventual"], s["puppet"])
	}
	if out := orch(t, w, a, 0, "get-failures"); strings.Contains(out, "web1") {
		t.Fatalf("get-failures lists the waiting node:\n%s", out)
	}

	if _, err := a.Client.Catalog().Register(&api.CatalogRegistration{Node: "ks1", Address: "10.0.0.9",
		Service: &api.AgentService{ID: "keystone", Service: "keystone", Port: 5000}}, nil); err != nil {
		t.Fatal(err)
	}
	testutil.Eventually(t, 60*time.Second, "web1 converged to v1 once keystone registered", func() bool {
		code, _ := orchRun(w, a, "verify-hosts", "v1", "web1")
		return code == 0
	}, agentLog)
	s = status()
	for _, cat := range []string{"puppet", "eventual", "validation"} {
		if s[cat].State != store.StateSuccess || s[cat].Version != "v1" {
			t.Errorf("web1's %s status %+v, want success at v1", cat, s[cat])
		}
	}
	b, _ := os.ReadFile(ran)
	if n := strings.Count(string(b), "consistent v1"); n != 1 {
		t.Errorf("the consistent step ran %d times, want once:\n%s", n, b)
	}
	orch(t, w, a, 0, "get-failures")
}

// script writes an executable shell script name in dir and returns its path.
func script(t *testing.T, dir, name, body string) string {
	t.Helper()
	p := filepath.Join(dir, name+".sh")
	if err := os.WriteFile(p, []byte("#!/bin/sh\n"+body+"\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	return p
}

func argAfter(args []string, flag string) string {
	for i, a := range args {
		if a == flag && i+1 < len(args) {
			return args[i+1]
		}
	}
	return ""
}

// orchRun runs the built orchestrate against the agent and returns its
// exit code (-1: it could not run) and output.
func orchRun(w *world, a *consultest.Agent, args ...string) (int, string) {
	cmd := exec.Command(filepath.Join(w.bin, "orchestrate"), append(args, "--consul-addr", a.HTTPAddr)...)
	out, err := cmd.CombinedOutput()
	var ee *exec.ExitError
	switch {
	case errors.As(err, &ee):
		return ee.ExitCode(), string(out)
	case err != nil:
		return -1, err.Error()
	}
	return 0, string(out)
}

// orch runs the built orchestrate against the agent, wants exit code
// want, and returns its output.
func orch(t *testing.T, w *world, a *consultest.Agent, want int, args ...string) string {
	t.Helper()
	code, out := orchRun(w, a, args...)
	if code != want {
		t.Fatalf("orchestrate %v: exit %d, want %d:\n%s", args, code, want, out)
	}
	return out
}
