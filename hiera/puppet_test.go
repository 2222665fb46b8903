package hiera

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/jiocloud/orchestrate/internal/consultest"
	"github.com/jiocloud/orchestrate/internal/testutil"
)

// puppetLookup runs the real `puppet lookup KEY --hiera_config` against the
// rendered file and returns the value decoded from JSON.
func puppetLookup(t *testing.T, puppet, out, key string) any {
	t.Helper()
	dir := t.TempDir()
	hieraYAML := filepath.Join(dir, "hiera.yaml")
	conf := "---\nversion: 5\ndefaults:\n  datadir: " + filepath.Dir(out) + "\n  data_hash: yaml_data\nhierarchy:\n  - name: services\n    path: " + filepath.Base(out) + "\n"
	facts := filepath.Join(dir, "facts.json")
	if err := os.WriteFile(hieraYAML, []byte(conf), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(facts, []byte("{}"), 0o644); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, puppet, "lookup", key, "--hiera_config", hieraYAML, "--facts", facts, "--render-as", "json")
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		t.Fatalf("puppet lookup %s: %v\nstdout: %s\nstderr: %s", key, err, stdout.String(), stderr.String())
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
	deps := filepath.Join(t.TempDir(), "deps.yaml")
	if err := os.WriteFile(deps, []byte("mysql: {addressable: 2, functional: 2}\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	out := outPath(t)
	if code, stderr := runHS(t, a, "--out", out, "--dependencies", deps); code != 0 {
		t.Fatalf("exit %d: %s", code, stderr)
	}
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
