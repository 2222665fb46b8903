package main

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"
)

// nodeNames lists role's simulated nodes: db1, db2, ...
func nodeNames(role string, n int) []string {
	var out []string
	for i := 1; i <= n; i++ {
		out = append(out, role+strconv.Itoa(i))
	}
	return out
}

// allNodes is every simulated node with its role.
func allNodes() [][2]string {
	var out [][2]string
	for _, r := range roles {
		for _, n := range nodeNames(r.name, r.count) {
			out = append(out, [2]string{n, r.name})
		}
	}
	return out
}

func (d *demo) services() string { return filepath.Join(d.dir, "hiera", "services.yaml") }

// hieraStep: hiera-services in watch mode renders the dependency state of a
// controller that needs 2 functional db and 1 functional lb.
func (d *demo) hieraStep() error {
	step(2, "hiera-services renders services.yaml and a controller's dependency state")
	deps := filepath.Join(d.dir, "controller-dependencies.yaml")
	if err := os.WriteFile(deps, []byte("db: {addressable: 2, functional: 2}\nlb: {functional: 1}\n"), 0o644); err != nil {
		return err
	}
	say("controller1's dependencies (%s): db: {addressable: 2, functional: 2}, lb: {functional: 1}", filepath.Base(deps))
	changes := filepath.Join(d.dir, "puppet-runs.log")
	_, err := d.start("hiera-services", "--watch", "--wait", "100ms:500ms", "--out", d.services(),
		"--dependencies", deps, "--exec", "echo puppet would run now >> "+changes, "--log-level", "warn")
	if err != nil {
		return err
	}
	show := func() {
		grepFile(d.services(), `"orchestrate::`)
	}
	if err := d.waitFor("the first render", 20*time.Second, func() bool {
		return fileHas(d.services(), `"orchestrate::dependencies_met": false`)
	}); err != nil {
		return err
	}
	say("empty catalog: nothing is there yet")
	show()

	say("db1 and db2 come up")
	for _, n := range []string{"db1", "db2"} {
		if err := d.sim.up(d.ctx, n, "db"); err != nil {
			return err
		}
	}
	if err := d.waitFor("db instances in services.yaml", 20*time.Second, func() bool {
		return fileHas(d.services(), `"orchestrate::dependencies::db::functional": 2`)
	}); err != nil {
		return err
	}
	show()
	say("lb1 comes up")
	if err := d.sim.up(d.ctx, "lb1", "lb"); err != nil {
		return err
	}
	if err := d.waitFor("dependencies_met: true", 20*time.Second, func() bool {
		return fileHas(d.services(), `"orchestrate::dependencies_met": true`)
	}); err != nil {
		return err
	}
	show()
	say("and what Puppet's hiera sees of the db service:")
	grepFile(d.services(), `"services::db::`, `"healthy_services::db::address"`)
	if err := d.waitFor("--exec runs", 10*time.Second, func() bool { return fileHas(changes, "puppet") }); err != nil {
		return err
	}
	data, _ := os.ReadFile(changes)
	say("--exec ran %d times: once per real change of the file, never for a render that changed nothing", strings.Count(string(data), "\n"))
	return nil
}

// blockerStep: service-blocker waits for a third functional db.
func (d *demo) blockerStep() error {
	step(3, "service-blocker waits for 3 functional db endpoints (Consul DNS + TCP)")
	b, err := d.start("service-blocker", "--dns", d.agent.DNSAddr, "--mode", "functional", "--timeout", "60s", "db:3")
	if err != nil {
		return err
	}
	if err := d.waitFor("the blocker's progress line", 20*time.Second, func() bool {
		return strings.Contains(b.output(), "db: 2/3")
	}); err != nil {
		return err
	}
	time.Sleep(time.Second)
	say("after a second it is still waiting:")
	indent(b.output())
	say("db3 comes up")
	upAt := time.Now()
	if err := d.sim.up(d.ctx, "db3", "db"); err != nil {
		return err
	}
	code, err := b.wait(20 * time.Second)
	if err != nil {
		return err
	}
	say("service-blocker exited %d, %s after db3 registered:", code, time.Since(upAt).Round(time.Millisecond))
	indent(b.output())
	if code != 0 {
		return fmt.Errorf("service-blocker exited %d", code)
	}
	say("the rest of the cloud comes up: lb2, controller1-3, compute1-4")
	for _, nr := range allNodes() {
		if err := d.sim.up(d.ctx, nr[0], nr[1]); err != nil {
			return err
		}
	}
	return nil
}

// stepScripts are the stand-in update, Puppet and validation commands of
// the rolling version; a file broken-<host> makes the validation of host
// fail.
type stepScripts struct {
	update, puppet, validate, broken string
}

func (d *demo) writeStepScripts() (*stepScripts, error) {
	dir := filepath.Join(d.dir, "steps")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, err
	}
	sc := &stepScripts{broken: filepath.Join(dir, "broken-")}
	for _, f := range []struct {
		path *string
		name string
		body string
	}{
		{&sc.update, "update", `echo "apt-get dist-upgrade to snapshot $ORCHESTRATE_VERSION (stand-in)"` + "\n"},
		{&sc.puppet, "puppet", "echo 'puppet apply --detailed-exitcodes (stand-in): changes applied'\nexit 2\n"},
		{&sc.validate, "check_api", `if [ -e "` + sc.broken + `$ORCHESTRATE_HOST" ]; then echo "API check failed on $ORCHESTRATE_HOST"; exit 1; fi` + "\necho ok\n"},
	} {
		*f.path = filepath.Join(dir, f.name)
		if err := os.WriteFile(*f.path, []byte("#!/bin/sh\n"+f.body), 0o755); err != nil {
			return nil, err
		}
	}
	return sc, nil
}

// converge runs one node's converge with the stand-in steps and checks its
// exit code.
func (d *demo) converge(sc *stepScripts, node string, want int) (string, error) {
	c := execIn(d, "orchestrate", "converge", "--host", node, "--no-checks", "--log-level", "warn",
		"--update-cmd", sc.update, "--puppet-cmd", sc.puppet, "--validate-cmd", sc.validate,
		"--hiera-data", d.services(), "--log-dir", filepath.Join(d.dir, "converge-logs"),
		"--lock-file", filepath.Join(d.dir, "locks", node+".lock"))
	out, code, err := c()
	if err != nil {
		return "", err
	}
	if code != want {
		return out, fmt.Errorf("converge %s: exit %d, expected %d: %s", node, code, want, out)
	}
	return out, nil
}

// convergeAll converges every node; those in failing must fail.
func (d *demo) convergeAll(sc *stepScripts, failing map[string]bool) error {
	say("each node's watch runs `orchestrate converge` (update, Puppet, validation, report):")
	var lines []string
	for _, nr := range allNodes() {
		want := 0
		if failing[nr[0]] {
			want = 1
		}
		out, err := d.converge(sc, nr[0], want)
		if err != nil {
			return err
		}
		lines = append(lines, strings.TrimSpace(out))
	}
	indent(strings.Join(lines, "\n"))
	return nil
}

// rollingStep: a rolling version with converge on every node.
func (d *demo) rollingStep() error {
	step(4, "A rolling version: trigger-update, then converge on every node")
	sc, err := d.writeStepScripts()
	if err != nil {
		return err
	}
	d.steps = sc
	for _, r := range roles {
		if _, err := d.orch(0, "scale", r.name, strconv.Itoa(r.count)); err != nil {
			return err
		}
	}
	if _, err := d.orch(0, "trigger-update", "v1"); err != nil {
		return err
	}
	if err := d.convergeAll(sc, nil); err != nil {
		return err
	}
	say("a watch re-firing on a converged node costs nothing:")
	out, err := d.converge(sc, "db1", 0)
	if err != nil {
		return err
	}
	indent(out)
	return d.failedValidation(sc)
}

// failedValidation rolls v2 with compute2's validation failing, shows how
// the failure reads, and fixes it.
func (d *demo) failedValidation(sc *stepScripts) error {
	say("now v2; compute2's API check will fail")
	if err := os.WriteFile(sc.broken+"compute2", nil, 0o644); err != nil {
		return err
	}
	if _, err := d.orch(0, "trigger-update", "v2"); err != nil {
		return err
	}
	if err := d.convergeAll(sc, map[string]bool{"compute2": true}); err != nil {
		return err
	}
	if _, err := d.orch(0, "status", "--no-catalog"); err != nil {
		return err
	}
	if _, err := d.orch(1, "get-failures"); err != nil {
		return err
	}
	hosts := filepath.Join(d.dir, "hosts")
	var names []string
	for _, nr := range allNodes() {
		names = append(names, nr[0])
	}
	if err := os.WriteFile(hosts, []byte(strings.Join(names, "\n")+"\n"), 0o644); err != nil {
		return err
	}
	if _, err := d.orch(1, "verify-hosts", "v2", "--from-file", hosts); err != nil {
		return err
	}
	say("an operator fixes compute2; its next converge re-runs Puppet and validation")
	if err := os.Remove(sc.broken + "compute2"); err != nil {
		return err
	}
	out, err := d.converge(sc, "compute2", 0)
	if err != nil {
		return err
	}
	indent(out)
	if _, err := d.orch(0, "verify-hosts", "v2", "--from-file", hosts); err != nil {
		return err
	}
	_, err = d.orch(0, "status", "--no-catalog")
	return err
}

// execIn returns a function running bin/name quietly and returning its
// output and exit code.
func execIn(d *demo, name string, args ...string) func() (string, int, error) {
	return func() (string, int, error) {
		c := d.command(name, args...)
		out, err := c.CombinedOutput()
		code, err := exitCode(err)
		return string(out), code, err
	}
}
