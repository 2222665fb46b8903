package main

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/hashicorp/consul/api"
	"github.com/jiocloud/orchestrate/internal/store/schema"
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
	_, err := d.start("controller1", "hiera-services", "--watch", "--wait", "100ms:500ms", "--out", d.services(),
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
	say("--exec ran %d times: after real changes of the file (those within its 5 s splay join one run), never for a render that changed nothing", strings.Count(string(data), "\n"))
	return nil
}

// blockerStep: service-blocker waits for a third functional db.
func (d *demo) blockerStep() error {
	step(3, "service-blocker waits for 3 functional db endpoints (Consul DNS, passing checks, TCP)")
	b, err := d.start("controller1", "service-blocker", "--dns", d.agent.DNSAddr, "--mode", "functional", "--timeout", "60s", "db:3")
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
// the rolling versions; a file broken-<host> makes the validation of host
// fail, and while a file hold-<host> exists its Puppet run waits.
type stepScripts struct {
	update, puppet, validate, broken, hold string
}

func (d *demo) writeStepScripts() (*stepScripts, error) {
	dir := filepath.Join(d.dir, "steps")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, err
	}
	sc := &stepScripts{broken: filepath.Join(dir, "broken-"), hold: filepath.Join(dir, "hold-")}
	for _, f := range []struct {
		path *string
		name string
		body string
	}{
		{&sc.update, "update", `echo "apt-get dist-upgrade to snapshot $ORCHESTRATE_VERSION (stand-in)"` + "\n"},
		{&sc.puppet, "puppet", `while [ -e "` + sc.hold + `$ORCHESTRATE_HOST" ]; do sleep 0.1; done` + "\necho 'puppet apply --detailed-exitcodes (stand-in): changes applied'\nexit 2\n"},
		{&sc.validate, "check_api", `if [ -e "` + sc.broken + `$ORCHESTRATE_HOST" ]; then echo "API check failed on $ORCHESTRATE_HOST"; exit 1; fi` + "\necho ok\n"},
	} {
		*f.path = filepath.Join(dir, f.name)
		if err := os.WriteFile(*f.path, []byte("#!/bin/sh\n"+f.body), 0o755); err != nil {
			return nil, err
		}
	}
	return sc, nil
}

// convergeCmd is one node's converge with the stand-in steps, in its role.
func (d *demo) convergeCmd(sc *stepScripts, node string, extra ...string) []string {
	return append([]string{"converge", "--host", node, "--role", roleOf(node), "--no-checks", "--log-level", "warn",
		"--update-cmd", sc.update, "--consistent-cmd", sc.puppet, "--validate-cmd", sc.validate,
		"--hiera-data", d.services(), "--log-dir", filepath.Join(d.dir, "converge-logs"),
		"--lock-file", filepath.Join(d.dir, "locks", node+".lock")}, extra...)
}

// converge runs one node's converge and checks its exit code.
func (d *demo) converge(sc *stepScripts, node string, want int, extra ...string) (string, error) {
	c := execIn(d, node, "orchestrate", d.convergeCmd(sc, node, extra...)...)
	out, code, err := c()
	if err != nil {
		return "", err
	}
	if code != want {
		return out, fmt.Errorf("converge %s: exit %d, expected %d: %s", node, code, want, out)
	}
	return out, nil
}

// convergeAll converges every node of roles (all roles when none are
// named), one after the other.
func (d *demo) convergeAll(sc *stepScripts, roles ...string) error {
	var lines []string
	for _, nr := range allNodes() {
		if len(roles) > 0 && !slices.Contains(roles, nr[1]) {
			continue
		}
		out, err := d.converge(sc, nr[0], 0, "--handler")
		if err != nil {
			return err
		}
		lines = append(lines, strings.TrimSpace(out))
	}
	indent(strings.Join(lines, "\n"))
	return nil
}

func roleOf(node string) string { return strings.TrimRight(node, "0123456789") }

// rollingStep: versions roll out through converge on every node, each
// deciding for itself; compute rolls two at a time and halts.
func (d *demo) rollingStep() error {
	step(4, "Rolling versions: every node converges itself; the product's rollout paces each role")
	sc, err := d.writeStepScripts()
	if err != nil {
		return err
	}
	d.steps = sc
	for _, r := range roles {
		if _, err := d.orch(0, "scale", r.name, strconv.Itoa(r.count), "--yes"); err != nil {
			return err
		}
	}
	if _, err := d.orch(0, "rollout", "compute", "--max-unavailable", "2", "--max-failures", "1"); err != nil {
		return err
	}
	if _, err := d.orch(0, "trigger-update", "v1"); err != nil {
		return err
	}
	say("each node's current_version watch runs `orchestrate converge --role ROLE` (update, consistent Puppet, validation, report);")
	say("new nodes run no version yet and serve nothing, so no update slot bounds them:")
	if err := d.convergeAll(sc); err != nil {
		return err
	}
	say("a watch re-firing on a converged node costs nothing:")
	out, err := d.converge(sc, "db1", 0, "--handler")
	if err != nil {
		return err
	}
	indent(out)
	return d.haltedRollout(sc)
}

// haltedRollout rolls v2: compute takes two slots at a time, compute2 and
// compute3 fail validation, the rollout halts, a node's attempt to forge
// another's status is refused, and an operator fixes and resumes it.
func (d *demo) haltedRollout(sc *stepScripts) error {
	say("now v2; compute2's and compute3's API checks will fail")
	for _, n := range []string{"compute2", "compute3"} {
		if err := os.WriteFile(sc.broken+n, nil, 0o644); err != nil {
			return err
		}
	}
	if _, err := d.orch(0, "trigger-update", "v2"); err != nil {
		return err
	}
	say("db, lb and controller have no rollout policy: their nodes converge at once")
	if err := d.convergeAll(sc, "db", "lb", "controller"); err != nil {
		return err
	}
	if err := d.slotsInUse(sc); err != nil {
		return err
	}
	hosts, err := d.halts(sc)
	if err != nil {
		return err
	}
	if err := d.forgedStatusRefused(); err != nil {
		return err
	}
	return d.resumeRollout(sc, hosts)
}

// slotsInUse: compute1 and compute2 take compute's two update slots and
// hold them (their Puppet runs held), compute3 and compute4 wait; the
// held runs then finish, compute1 converged and compute2 failed.
func (d *demo) slotsInUse(sc *stepScripts) error {
	say("compute1 and compute2 take compute's two update slots (their Puppet runs are held, to look):")
	var running []*exec.Cmd
	for _, n := range []string{"compute1", "compute2"} {
		if err := os.WriteFile(sc.hold+n, nil, 0o644); err != nil {
			return err
		}
		c, err := d.command(n, "orchestrate", d.convergeCmd(sc, n, "--handler")...)
		if err != nil {
			return err
		}
		if err := c.Start(); err != nil {
			return err
		}
		running = append(running, c)
		if err := d.waitFor(n+" holding a slot", 20*time.Second, func() bool {
			out, code, err := execIn(d, operator, "orchestrate", "rollout", "compute", "--json")()
			return err == nil && code == 0 && strings.Contains(out, `"`+n+`"`)
		}); err != nil {
			return err
		}
	}
	say("compute3's and compute4's watches fire too: they wait, and say so in KV (exit 0 as handlers):")
	for _, n := range []string{"compute3", "compute4"} {
		out, err := d.converge(sc, n, 0, "--handler")
		if err != nil {
			return err
		}
		indent(out)
	}
	if _, err := d.orch(0, "rollout", "compute"); err != nil {
		return err
	}
	say("the held runs finish: compute1 converges, compute2 fails validation; each gives its slot back")
	for i, n := range []string{"compute1", "compute2"} {
		if err := os.Remove(sc.hold + n); err != nil {
			return err
		}
		if err := running[i].Wait(); err != nil && n == "compute1" {
			return fmt.Errorf("converge %s: %w", n, err)
		}
	}
	return nil
}

// halts: woken by the slots given back, compute3 takes one and fails
// too, which halts the rollout and leaves compute4 on v1; status,
// get-failures and verify-hosts show it. It returns the file of every
// host's name that verify-hosts reads.
func (d *demo) halts(sc *stepScripts) (string, error) {
	say("every change of compute's rollout fires its keyprefix watch: the waiting nodes run `converge --slot-wake`")
	say("compute3 takes a slot and fails too: two failures, more than --max-failures 1, halt the rollout;")
	say("compute4 is left untouched on v1:")
	for _, c := range []struct {
		node string
		want int
	}{{"compute3", 1}, {"compute4", 0}} {
		out, err := d.converge(sc, c.node, c.want, "--handler", "--slot-wake")
		if err != nil {
			return "", err
		}
		indent(out)
	}
	if _, err := d.orch(0, "status", "--no-catalog"); err != nil {
		return "", err
	}
	if _, err := d.orch(1, "get-failures"); err != nil {
		return "", err
	}
	hosts := filepath.Join(d.dir, "hosts")
	var names []string
	for _, nr := range allNodes() {
		names = append(names, nr[0])
	}
	if err := os.WriteFile(hosts, []byte(strings.Join(names, "\n")+"\n"), 0o644); err != nil {
		return "", err
	}
	_, err := d.orch(1, "verify-hosts", "v2", "--from-file", hosts)
	return hosts, err
}

// forgedStatusRefused: compute1's token cannot write compute4's status
// (a failed Puppet run would count against the rollout, and a suspect
// one could make the reaper replace a healthy server): exit 3, and no
// key under the prefix changes.
func (d *demo) forgedStatusRefused() error {
	say("could a node blame another? compute1's token tries to record a failed Puppet run for compute4:")
	kv := d.agent.Client.KV()
	qo := (&api.QueryOptions{RequireConsistent: true}).WithContext(d.ctx)
	_, before, err := kv.Keys(schema.PrefixDir(schema.DefaultPrefix), "", qo)
	if err != nil {
		return err
	}
	if _, err := d.orchAs(3, "compute1", "update-status", "puppet", "failed", "--host", "compute4", "--detail", "forged by compute1"); err != nil {
		return err
	}
	_, after, err := kv.Keys(schema.PrefixDir(schema.DefaultPrefix), "", qo)
	if err != nil {
		return err
	}
	if after.LastIndex != before.LastIndex {
		return fmt.Errorf("the KV store changed (index %d to %d) on a refused write", before.LastIndex, after.LastIndex)
	}
	say("refused (its token writes orchestrate/hosts/compute1/ and nothing of another host): no key changed (KV index %d before and after)", after.LastIndex)
	return nil
}

// resumeRollout: an operator fixes compute2 and compute3, re-runs their
// converge and resumes the rollout, which lets compute4 through.
func (d *demo) resumeRollout(sc *stepScripts, hosts string) error {
	say("an operator fixes compute2 and compute3, re-runs their converge, and resumes the rollout for compute4")
	for _, n := range []string{"compute2", "compute3"} {
		if err := os.Remove(sc.broken + n); err != nil {
			return err
		}
	}
	if _, err := d.orch(0, "rollout", "resume", "compute"); err != nil {
		return err
	}
	for _, n := range []string{"compute2", "compute3", "compute4"} {
		extra := []string{"--handler"}
		if n == "compute4" {
			extra = append(extra, "--slot-wake") // woken by the resume
		}
		out, err := d.converge(sc, n, 0, extra...)
		if err != nil {
			return err
		}
		indent(out)
	}
	if _, err := d.orch(0, "verify-hosts", "v2", "--from-file", hosts); err != nil {
		return err
	}
	_, err := d.orch(0, "status", "--no-catalog")
	return err
}

// execIn returns a function running bin/name quietly with who's token
// and returning its output and exit code.
func execIn(d *demo, who, name string, args ...string) func() (string, int, error) {
	return func() (string, int, error) {
		c, err := d.command(who, name, args...)
		if err != nil {
			return "", 0, err
		}
		out, err := c.CombinedOutput()
		code, err := exitCode(err)
		return string(out), code, err
	}
}
