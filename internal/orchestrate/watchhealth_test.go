package orchestrate

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/consul/api"

	"github.com/jiocloud/orchestrate/internal/consultest"
	"github.com/jiocloud/orchestrate/internal/testutil"
	"github.com/jiocloud/orchestrate/watch"
)

// TestGeneratedWatchesSeeHealth starts a real agent with the configuration
// watch-config generates, handlers inheriting the agent's environment as in
// production, and changes only the check of a dependency's instance:
// critical → passing → warning → passing → critical. Each change reaches
// services.yaml within 2 s and runs --exec once (without a splay, so at
// once). A changed address, a new
// service and a removed instance reach it within 2 s too.
func TestGeneratedWatchesSeeHealth(t *testing.T) {
	consultest.RequireBinary(t)
	hs := builtBinary(t, "hiera-services")
	dir := t.TempDir()
	deps := filepath.Join(dir, "deps.yaml")
	if err := os.WriteFile(deps, []byte("web: {addressable: 1, functional: 1}\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	out := filepath.Join(dir, "hiera", "services.yaml")
	execs := filepath.Join(dir, "execs")
	ws := generatedWatches(t, "--hiera-services", hs, "--orchestrate", builtBinary(t, "orchestrate"),
		"--out", out, "--dependencies", deps, "--exec", "echo run >> "+execs, "--hiera-arg=--splay=0")
	a := consultest.Start(t, consultest.Options{NodeName: "node1", HCL: agentConfig(t, ws), HandlerEnv: true})
	dump := func() string {
		data, _ := os.ReadFile(out)
		return "file:\n" + string(data)
	}

	testutil.Eventually(t, 10*time.Second, "first render at agent start", func() bool {
		return fileHas(out, `"orchestrate::dependencies_met": false`)
	}, dump)
	reg := func(addr, status string) {
		t.Helper()
		err := a.Client.Agent().ServiceRegister(&api.AgentServiceRegistration{ID: "web", Name: "web", Address: addr, Port: 80,
			Check: &api.AgentServiceCheck{CheckID: "web-ttl", TTL: "10m", Status: status}})
		if err != nil {
			t.Fatal(err)
		}
	}
	reg("10.0.0.5", api.HealthCritical)
	testutil.Eventually(t, 2*time.Second, "a new dependency instance", func() bool {
		return fileHas(out, `"services::web::address": ["10.0.0.5"]`, `"orchestrate::dependencies::web::addressable": 0`)
	}, dump)
	// Let every watch that fired for the registration finish: no one
	// event marks the last of them.
	time.Sleep(time.Second)

	for _, step := range []struct {
		status string
		want   []string
	}{
		{api.HealthPassing, []string{`"orchestrate::dependencies_met": true`, `"healthy_services::web::address": ["10.0.0.5"]`}},
		{api.HealthWarning, []string{`"orchestrate::dependencies_met": false`, `"orchestrate::dependencies::web::addressable": 1`, `"orchestrate::dependencies::web::functional": 0`}},
		{api.HealthPassing, []string{`"orchestrate::dependencies_met": true`}},
		{api.HealthCritical, []string{`"orchestrate::dependencies_met": false`, `"orchestrate::dependencies::web::addressable": 0`, `"healthy_services::web::address": []`}},
	} {
		before := lineCount(execs)
		// Only the check changes: no registration of anything.
		if err := a.Client.Agent().UpdateTTL("web-ttl", "same output", step.status); err != nil {
			t.Fatal(err)
		}
		took := testutil.Eventually(t, 2*time.Second, "check turned "+step.status, func() bool { return fileHas(out, step.want...) }, dump)
		t.Logf("check turned %s: in services.yaml after %s", step.status, took.Round(time.Millisecond))
		time.Sleep(time.Second) // a second run of --exec would show by now
		if n := lineCount(execs) - before; n != 1 {
			t.Errorf("check turned %s: --exec ran %d times, want 1", step.status, n)
		}
	}

	// The agent keeps the check's state across the re-registration.
	reg("10.0.0.6", api.HealthPassing)
	testutil.Eventually(t, 2*time.Second, "a changed address", func() bool {
		return fileHas(out, `"services::web::address": ["10.0.0.6"]`)
	}, dump)
	if _, err := a.Client.Catalog().Register(&api.CatalogRegistration{Node: "db1", Address: "10.0.1.1",
		Service: &api.AgentService{ID: "db", Service: "db", Port: 5432}}, nil); err != nil {
		t.Fatal(err)
	}
	testutil.Eventually(t, 2*time.Second, "a new service", func() bool { return fileHas(out, `"services::db::address": ["10.0.1.1"]`) }, dump)
	if _, err := a.Client.Catalog().Deregister(&api.CatalogDeregistration{Node: "db1", ServiceID: "db"}, nil); err != nil {
		t.Fatal(err)
	}
	testutil.Eventually(t, 2*time.Second, "a removed instance", func() bool {
		data, _ := os.ReadFile(out)
		return len(data) > 0 && !strings.Contains(string(data), "services::db::")
	}, dump)
}

// TestGeneratedWatchesQuietHandlers: with the generated configuration (both
// forms: converge with --puppet-cmd, pending-update without), the agent's
// log holds no handler error across start, reload and three fires of the
// current_version watch that find nothing to do.
func TestGeneratedWatchesQuietHandlers(t *testing.T) {
	consultest.RequireBinary(t)
	dir := t.TempDir()
	fires := filepath.Join(dir, "fires")
	orch := countingWrapper(t, dir, builtBinary(t, "orchestrate"), fires)
	hs := countingWrapper(t, dir, builtBinary(t, "hiera-services"), fires)
	deps := filepath.Join(dir, "deps.yaml")
	if err := os.WriteFile(deps, []byte("web: {functional: 1}\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	out := filepath.Join(dir, "services.yaml")
	converging := generatedWatches(t, "--hiera-services", hs, "--orchestrate", orch, "--out", out, "--dependencies", deps,
		"--puppet-cmd", "true", "--converge-arg=--log-dir="+filepath.Join(dir, "log"),
		"--converge-arg=--lock-file="+filepath.Join(dir, "converge.lock"), "--converge-arg=--hiera-data="+out)
	asking := generatedWatches(t, "--hiera-services", hs, "--orchestrate", orch, "--out", out)
	var ws []watch.Watch
	ws = append(ws, converging...)
	for _, w := range asking {
		if w.Type == "key" {
			ws = append(ws, w) // pending-update --handler
		}
	}
	a := consultest.Start(t, consultest.Options{NodeName: "node1", HCL: agentConfig(t, ws), HandlerEnv: true})
	logText := func() string { data, _ := os.ReadFile(a.LogPath); return string(data) }
	// Wait until the handlers ran and no more start: n fires, stable.
	settle := func(atLeast int, what string) {
		t.Helper()
		testutil.Eventually(t, 30*time.Second, what, func() bool {
			n := lineCount(fires)
			if n < atLeast {
				return false
			}
			time.Sleep(700 * time.Millisecond)
			return lineCount(fires) == n
		}, logText)
	}
	// Start: services, service web, two current_version watches.
	settle(len(ws), "handlers at agent start")
	// The first version converges (a real change); later fires find nothing to do.
	mustCode(t, cli(t, a, "", "trigger-update", "v1"), 0, "trigger-update")
	testutil.Eventually(t, 30*time.Second, "node1 at v1", func() bool { return cli(t, a, "", "verify-hosts", "v1", "node1").code == 0 }, logText)
	n := lineCount(fires)
	settle(n, "handlers after trigger-update")

	n = lineCount(fires)
	if err := a.Client.Agent().Reload(); err != nil {
		t.Fatal(err)
	}
	settle(n+len(ws), "handlers after reload")
	for i := 0; i < 3; i++ {
		n = lineCount(fires)
		// The same version with new flags: the key's index moves, so the
		// watch fires (Consul skips a write of an identical entry), and
		// there is nothing to do.
		if _, err := a.Client.KV().Put(&api.KVPair{Key: "orchestrate/current_version", Value: []byte("v1"), Flags: uint64(i + 1)}, nil); err != nil {
			t.Fatal(err)
		}
		settle(n+2, "no-op fire "+strconv.Itoa(i+1))
	}
	log := logText()
	for _, line := range strings.Split(log, "\n") {
		// Consul's own CA can log this once while a dev server starts:
		// nothing a handler did.
		if strings.Contains(line, "agent.server.cert-manager") && strings.Contains(line, "CA has not finished initializing") {
			continue
		}
		if strings.Contains(line, "watch handler") || strings.Contains(line, "[ERROR]") {
			t.Errorf("agent log: %s", line)
		}
	}
	t.Logf("%d handler runs, agent log %d bytes", lineCount(fires), len(log))
}

// TestGeneratedWatchesIdleCatalog: on a catalog of 1,000 services whose TTL
// checks are refreshed every 10 s without changing, the generated watches
// (the services watch and one per dependency) run hiera-services zero
// times in a minute; nor does a check flapping on a service the node does
// not watch.
func TestGeneratedWatchesIdleCatalog(t *testing.T) {
	consultest.RequireBinary(t)
	dir := t.TempDir()
	renders := filepath.Join(dir, "renders")
	hs := countingWrapper(t, dir, builtBinary(t, "hiera-services"), renders)
	const services, dependencies = 1000, 10
	var depsYAML strings.Builder
	for i := 0; i < dependencies; i++ {
		fmt.Fprintf(&depsYAML, "svc%d: {functional: 1}\n", i*97)
	}
	deps := filepath.Join(dir, "deps.yaml")
	if err := os.WriteFile(deps, []byte(depsYAML.String()), 0o644); err != nil {
		t.Fatal(err)
	}
	out := filepath.Join(dir, "services.yaml")
	// The agent keeps Consul's default limits: at most 200 concurrent HTTP
	// connections per client address. hiera-services holds one query per
	// service it outputs, so this node outputs the first 100 services
	// (and its dependencies), as docs/hiera-services.md tells large catalogs to do;
	// the watches still see the whole catalog.
	ws := generatedWatches(t, "--hiera-services", hs, "--orchestrate", builtBinary(t, "orchestrate"),
		"--out", out, "--dependencies", deps, "--hiera-arg=--service-regex=^svc[0-9]?[0-9]$")
	if len(ws) != 3+dependencies {
		t.Fatalf("%d watches generated, want the services watch, %d service watches, the version's and the heartbeat's key watches", len(ws), dependencies)
	}
	a := consultest.Start(t, consultest.Options{HCL: agentConfig(t, ws), HandlerEnv: true})
	ag := a.Client.Agent()
	for i := 0; i < services; i++ {
		id := "svc" + strconv.Itoa(i)
		err := ag.ServiceRegister(&api.AgentServiceRegistration{ID: id, Name: id, Port: 1000 + i,
			Check: &api.AgentServiceCheck{CheckID: id + "-ttl", TTL: "30s", Status: api.HealthPassing}})
		if err != nil {
			t.Fatal(err)
		}
	}
	refresh := func() {
		t.Helper()
		for i := 0; i < services; i++ {
			if err := ag.UpdateTTL("svc"+strconv.Itoa(i)+"-ttl", "ok", api.HealthPassing); err != nil {
				t.Fatal(err)
			}
		}
	}
	refresh()
	testutil.Eventually(t, 60*time.Second, "the catalog rendered", func() bool {
		return fileHas(out, `"services::svc99::port": [1099]`, `"orchestrate::dependencies_met": true`, `"orchestrate::dependencies::svc873::functional": 1`)
	})
	// Let the registrations' renders finish: no new render for 3 s.
	for last := -1; last != lineCount(renders); {
		last = lineCount(renders)
		time.Sleep(3 * time.Second)
	}
	before := lineCount(renders)
	for round := 0; round < 6; round++ {
		refresh()
		time.Sleep(10 * time.Second) // six rounds: the idle minute measured
	}
	if n := lineCount(renders) - before; n != 0 {
		t.Errorf("%d renders in a minute of TTL refreshes on an unchanged catalog, want 0", n)
	}
	t.Logf("renders before the idle minute: %d, during it: %d", before, lineCount(renders)-before)

	// Health churn elsewhere in the fleet (a service this node neither
	// outputs nor depends on, flapping) costs nothing either: only the
	// watched services' health re-renders.
	before = lineCount(renders)
	for i := 0; i < 6; i++ {
		status := api.HealthCritical
		if i%2 == 1 {
			status = api.HealthPassing
		}
		if err := ag.UpdateTTL("svc500-ttl", "flap "+strconv.Itoa(i), status); err != nil {
			t.Fatal(err)
		}
		time.Sleep(time.Second) // one flap a second
	}
	if n := lineCount(renders) - before; n != 0 {
		t.Errorf("%d renders while an unwatched service's check flapped, want 0", n)
	}
}
