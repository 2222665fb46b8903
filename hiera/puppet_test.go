package hiera

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/jiocloud/orchestrate/internal/consultest"
	"github.com/jiocloud/orchestrate/internal/testutil"
)

// renderWithDeps writes a dependencies file holding deps, renders once
// with it and returns the output and dependencies paths.
func renderWithDeps(t *testing.T, a *consultest.Agent, deps string) (out, depsPath string) {
	t.Helper()
	depsPath = filepath.Join(t.TempDir(), "deps.yaml")
	if err := os.WriteFile(depsPath, []byte(deps), 0o644); err != nil {
		t.Fatal(err)
	}
	out = outPath(t)
	if code, stderr := runHS(t, a, "--out", out, "--dependencies", depsPath); code != 0 {
		t.Fatalf("exit %d: %s", code, stderr)
	}
	return out, depsPath
}

// puppetSecret and puppetFQDN are what the hiera hierarchy and the facts
// of puppetLookup hold besides the rendered file; no lookup of rendered
// data may ever return them.
const (
	puppetSecret = "TOPSECRET-db-password"
	puppetFQDN   = "leaked.attacker.example"
)

// puppetLookup runs the real `puppet lookup KEY --hiera_config` against the
// rendered file and returns the value decoded from JSON.
func puppetLookup(t *testing.T, puppet, out, key string) any {
	t.Helper()
	dir := t.TempDir()
	hieraYAML := filepath.Join(dir, "hiera.yaml")
	// A second level holds secrets and the facts hold an fqdn, as on a
	// real node: a value that Hiera interpolated would return one of them.
	secrets := filepath.Join(dir, "secrets.yaml")
	conf := "---\nversion: 5\ndefaults:\n  data_hash: yaml_data\nhierarchy:\n" +
		"  - name: services\n    path: " + out + "\n    datadir: /\n" +
		"  - name: secrets\n    path: " + secrets + "\n    datadir: /\n"
	facts := filepath.Join(dir, "facts.json")
	for path, data := range map[string]string{
		hieraYAML: conf,
		secrets:   "secret: " + puppetSecret + "\nx: " + puppetSecret + "\n",
		facts: `{"fqdn": "` + puppetFQDN + `", "hostname": "leaked", "domain": "attacker.example", "clientcert": "` + puppetFQDN +
			`", "networking": {"fqdn": "` + puppetFQDN + `"}}`,
	} {
		if err := os.WriteFile(path, []byte(data), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, puppet, "lookup", key, "--hiera_config", hieraYAML, "--facts", facts, "--render-as", "json")
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		t.Fatalf("puppet lookup %s: %v\nstdout: %s\nstderr: %s", key, err, stdout.String(), stderr.String())
	}
	if strings.Contains(stdout.String(), puppetSecret) || strings.Contains(stdout.String(), puppetFQDN) {
		t.Errorf("puppet lookup %s returned a secret or fact: %s", key, stdout.String())
	}
	lines := strings.Split(strings.TrimSpace(stdout.String()), "\n")
	var v any
	if err := json.Unmarshal([]byte(lines[len(lines)-1]), &v); err != nil {
		t.Fatalf("puppet lookup %s printed %q: %v", key, stdout.String(), err)
	}
	return v
}

// TestPuppetLookup renders from a real agent and reads the file back with
// real `puppet lookup`: the tagged addresses as registered (hostile ones
// included), and orchestrate::dependencies_met flipping from false to true
// as instances register and pass.
func TestPuppetLookup(t *testing.T) {
	puppet := testutil.RequirePuppet(t)
	a := consultest.Start(t, consultest.Options{})
	register(t, a.Client, inst{node: "db1", nodeAddr: "10.0.0.5", svc: "mysql", port: 3306, status: "passing",
		tagged: map[string]string{"eth0": "10.1.0.5"}})
	register(t, a.Client, inst{node: "db2", nodeAddr: "10.0.0.6", svc: "mysql", port: 3306, status: "critical",
		tagged: map[string]string{"eth0": "yes"}})
	register(t, a.Client, inst{node: "db3", nodeAddr: "10.0.0.7", svc: "mysql", port: 3306, status: "warning",
		tagged: map[string]string{"eth0": "p\nq: [r]"}})
	out, deps := renderWithDeps(t, a, "mysql: {addressable: 2, functional: 2}\n")
	got := puppetLookup(t, puppet, out, "services::mysql::eth0")
	want := []any{"10.1.0.5", "p\nq: [r]", "yes"}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("puppet lookup services::mysql::eth0 = %#v, want %#v", got, want)
	}
	if got := puppetLookup(t, puppet, out, "orchestrate::dependencies_met"); got != false {
		t.Errorf("dependencies_met with 1 passing of 2 = %#v, want false", got)
	}

	register(t, a.Client, inst{node: "db4", nodeAddr: "10.0.0.8", svc: "mysql", port: 3306, status: "passing",
		tagged: map[string]string{"eth0": "10.1.0.8"}})
	if code, stderr := runHS(t, a, "--out", out, "--dependencies", deps); code != 0 {
		t.Fatalf("exit %d: %s", code, stderr)
	}
	if got := puppetLookup(t, puppet, out, "orchestrate::dependencies_met"); got != true {
		t.Errorf("dependencies_met with 2 passing of 2 = %#v, want true", got)
	}
}

// TestPuppetLookupHostile registers Hiera interpolation tokens as addresses,
// node names and tagged addresses, renders, and reads each key back with
// real `puppet lookup` against a hierarchy that also holds a secret and
// facts: every value comes back as the characters registered, never as
// the secret, a fact or another key's value.
func TestPuppetLookupHostile(t *testing.T) {
	puppet := testutil.RequirePuppet(t)
	a := consultest.Start(t, consultest.Options{})
	tokens := []string{
		"%{x}", "%{lookup('x')}", "%{lookup('secret')}", `%{lookup("secret")}`, "%{alias('secret')}",
		"%{scope('x')}", "%{}", "%%{x}", "%", "%{::fqdn}", "%{facts.fqdn}", "%{literal('%')}",
		"%{hiera('secret')}", "a%{secret}b", "%{literal('%')}{lookup('secret')}",
	}
	for i, tok := range tokens {
		register(t, a.Client, inst{node: "node" + tok, nodeAddr: "10.0.0.1", svc: "interp", id: "interp-" + strconv.Itoa(i),
			addr: tok, port: 80, status: "passing", tagged: map[string]string{"eth0": tok}})
	}
	out, _ := renderWithDeps(t, a, "interp: {functional: 100}\n")
	want := func(prefix string) []any {
		var w []string
		for _, tok := range tokens {
			w = append(w, prefix+tok)
		}
		sort.Strings(w)
		var out []any
		for _, s := range w {
			out = append(out, s)
		}
		return out
	}
	for key, w := range map[string][]any{
		"services::interp::address":         want(""),
		"services::interp::eth0":            want(""),
		"services::interp::nodes":           want("node"),
		"healthy_services::interp::address": want(""),
		"orchestrate::unmet_dependencies":   {"interp"},
	} {
		if got := puppetLookup(t, puppet, out, key); !reflect.DeepEqual(got, w) {
			t.Errorf("puppet lookup %s =\n %#v\nwant\n %#v", key, got, w)
		}
	}
}

// TestPuppetLookupDefaults: a declared dependency with no instance yet has
// its keys, as empty lists, so Puppet code that looks it up (without a
// default) compiles before the first instance registers; once one
// registers, the next render carries it.
func TestPuppetLookupDefaults(t *testing.T) {
	puppet := testutil.RequirePuppet(t)
	a := consultest.Start(t, consultest.Options{})
	out, deps := renderWithDeps(t, a, "keystone: {addressable: 1}\n")
	for _, key := range []string{"services::keystone::address", "healthy_services::keystone::nodes"} {
		if got := puppetLookup(t, puppet, out, key); !reflect.DeepEqual(got, []any{}) {
			t.Errorf("puppet lookup %s with no keystone instance = %#v, want []", key, got)
		}
	}
	register(t, a.Client, inst{node: "ks1", nodeAddr: "10.0.0.9", svc: "keystone", port: 5000, status: "passing"})
	if code, stderr := runHS(t, a, "--out", out, "--dependencies", deps); code != 0 {
		t.Fatalf("exit %d: %s", code, stderr)
	}
	if got := puppetLookup(t, puppet, out, "healthy_services::keystone::address"); !reflect.DeepEqual(got, []any{"10.0.0.9"}) {
		t.Errorf("puppet lookup healthy_services::keystone::address = %#v, want [10.0.0.9]", got)
	}
}
