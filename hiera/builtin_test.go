package hiera

import (
	"bytes"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/jiocloud/orchestrate/internal/consultest"
	"github.com/jiocloud/orchestrate/internal/store/reaperkv"
	"github.com/jiocloud/orchestrate/internal/testutil"
	"github.com/jiocloud/orchestrate/templates"
)

// TestBuiltinMatchesTemplate: the built-in template executed in Go
// (executeBuiltin) writes the very bytes text/template writes from the
// same template, in once mode and in --watch, for a catalog with
// tagged addresses, every check state, a standby, a name that cannot form
// a hiera key, strings Hiera would interpolate, dependencies, expected
// services, a selection and a datacenter in the queries.
func TestBuiltinMatchesTemplate(t *testing.T) {
	a := consultest.Start(t, consultest.Options{})
	for _, i := range []inst{
		{node: "db1", nodeAddr: "10.0.0.5", svc: "mysql", port: 3306, status: "passing", tagged: map[string]string{"eth1": "192.168.0.5"}},
		{node: "db2", nodeAddr: "10.0.0.6", svc: "mysql", port: 3306, status: "warning"},
		{node: "db3", nodeAddr: "10.0.0.7", svc: "mysql", port: 3307, status: "critical"},
		{node: "mq1", nodeAddr: "10.0.0.8", svc: "rabbitmq", status: "passing"},
		{node: "web1", nodeAddr: "10.0.1.1", svc: "web", id: "web-a", addr: "%{hiera('secret')}", port: 80},
		{node: "web2", nodeAddr: "10.0.1.2", svc: "web", port: 80, status: "passing"},
		{node: "odd1", nodeAddr: "10.0.2.1", svc: "bad name!", port: 1, status: "passing"},
	} {
		register(t, a.Client, i)
	}
	maintain(t, a.Client, "web2", "10.0.1.2", reaperkv.StandbyNotesPrefix+" standby of the warm pool of role web")
	dir := t.TempDir()
	deps := filepath.Join(dir, "deps.yaml")
	if err := os.WriteFile(deps, []byte("mysql: {addressable: 2, functional: 1}\nkeystone: {addressable: 1}\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	// The same template, made different so that text/template runs it.
	forced := filepath.Join(dir, "forced.ctmpl")
	if err := os.WriteFile(forced, []byte(templates.ServicesYAML+`{{- /* not the built-in */ -}}`), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, flags := range [][]string{
		nil,
		{"--dependencies", deps, "--expect-service", "horizon"},
		{"--service", "mysql", "--dependencies", deps},
		{"--service-regex", "^(web|rabbit)", "--datacenter", "dc1"},
	} {
		builtin, viaTemplate := filepath.Join(dir, "builtin.yaml"), filepath.Join(dir, "template.yaml")
		os.Remove(builtin)
		os.Remove(viaTemplate)
		if code, stderr := runHS(t, a, append([]string{"--out", builtin}, flags...)...); code != 0 {
			t.Fatalf("%v: exit %d: %s", flags, code, stderr)
		}
		if code, stderr := runHS(t, a, append([]string{"--out", viaTemplate, "--template", forced}, flags...)...); code != 0 {
			t.Fatalf("%v --template: exit %d: %s", flags, code, stderr)
		}
		b1, _ := os.ReadFile(builtin)
		b2, _ := os.ReadFile(viaTemplate)
		if !bytes.Equal(b1, b2) || len(b1) == 0 {
			t.Fatalf("%v: built-in in Go:\n%s\nthrough text/template:\n%s", flags, b1, b2)
		}
	}
	// --watch, through a change.
	w1, w2 := filepath.Join(dir, "w1.yaml"), filepath.Join(dir, "w2.yaml")
	r1 := startHS("--consul-addr", a.HTTPAddr, "--out", w1, "--watch", "--dependencies", deps)
	defer r1.stop(t)
	r2 := startHS("--consul-addr", a.HTTPAddr, "--out", w2, "--watch", "--dependencies", deps, "--template", forced)
	defer r2.stop(t)
	register(t, a.Client, inst{node: "db4", nodeAddr: "10.0.0.9", svc: "mysql", port: 3306, status: "passing"})
	testutil.Eventually(t, 20*time.Second, "both watches to render the change alike", func() bool {
		b1, _ := os.ReadFile(w1)
		b2, _ := os.ReadFile(w2)
		return bytes.Contains(b1, []byte("10.0.0.9")) && bytes.Equal(b1, b2)
	})
}
