package main

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/hashicorp/consul/api"

	"github.com/jiocloud/orchestrate/internal/nodeid"
	"github.com/jiocloud/orchestrate/internal/store"
	"github.com/jiocloud/orchestrate/internal/store/reaperkv"
	"github.com/jiocloud/orchestrate/internal/store/schema"
	"github.com/jiocloud/orchestrate/reaper"
	"github.com/jiocloud/orchestrate/reaper/daemon"
	"github.com/jiocloud/orchestrate/reaper/simcloud"

	"github.com/jiocloud/orchestrate/internal/cli"
)

// reaperConfig is the demo's reaper.yaml: the same file format as in
// production, with times shortened so the demo takes seconds. The safety
// rules are the defaults: one replacement in flight per role, 10
// destructive actions per hour, pause above 45% of the fleet or 55% of a
// role unhealthy. Every server it builds gets a token of its own, minted
// with the key in keyFile (node_identity).
func reaperConfig(keyFile string) string {
	var b strings.Builder
	fmt.Fprintf(&b, "node_identity: {key_file: %q}\n", keyFile)
	b.WriteString(`dry_run: false
interval: 1s
session_ttl: 10s
lock_delay: 1s
listen: ""
drain_period: 2s
cloud_timeout: 30s
roles:
`)
	for _, r := range roles {
		fmt.Fprintf(&b, `  - name: %s
    desired: %d
    min_healthy: 1
    boot_grace: 10s
    critical_grace: 3s
    boot_timeout: 60s
    boot: {flavor: demo.small, image: demo-image, networks: [none], name_template: "%s{n}"}
`, r.name, r.count, r.name)
		if r.name == "lb" {
			// Step 8: lb keeps one standby, claimed instead of a build.
			b.WriteString("    warm_pool: {size: 1}\n")
		}
		if r.name == "compute" {
			// Step 7: compute follows its nodes' load reports.
			b.WriteString(`    drain_timeout: 10s
    autoscale:
      metric: {source: consul, name: load, max_age: 10s}
      target: 0.6
      min: 2
      max: 6
      scale_out: {max_step: 2, cooldown: 3s}
      scale_in: {max_step: 1, cooldown: 4s, stabilization: 5s}
`)
		}
	}
	return b.String()
}

func (d *demo) reaperYAML() string { return filepath.Join(d.dir, "reaper.yaml") }

// reaperRun is the reaper of steps 5 and 6, running in-process against
// the simulated cloud.
type reaperRun struct {
	d       *demo
	cloud   *simcloud.Cloud
	logPath string
	mu      sync.Mutex
	booted  []string // guarded by mu: servers the cloud brought up
	// builtIn is how long step 5's replacement by a build took.
	builtIn time.Duration
	// firstTokens are the sealed tokens of the first servers, by server
	// ID (guarded by mu): the demo minted them, so the reaper cannot log
	// them out.
	firstTokens map[string]string
}

// boot plays a server the reaper built coming up: cloud-init writes its
// token from its user data, its agent registers its Consul node with its
// role's service (as after Puppet ran), and its watch runs converge with
// its token: the reaper counts it as serving once it validated the
// current version.
func (r *reaperRun) boot(s reaper.Server) {
	d := r.d
	secret, err := nodeToken(r.cloud.UserData(s.Name))
	if err == nil {
		err = d.writeToken(s.Name, secret)
	}
	if err != nil {
		fmt.Printf("   (%s has no token of its own: %v)\n", s.Name, err)
	}
	if err := d.sim.up(context.Background(), s.Name, s.Metadata["role"]); err != nil {
		fmt.Printf("   (simulated boot of %s failed: %v)\n", s.Name, err)
	}
	out, err := d.converge(d.steps, s.Name, 0)
	if err != nil {
		fmt.Printf("   (converge of %s failed: %v)\n", s.Name, err)
	}
	say("%s boots, its token from its user data, and its watch runs converge: %s", s.Name, strings.TrimSpace(out))
	r.mu.Lock()
	r.booted = append(r.booted, s.Name)
	r.mu.Unlock()
}

// gone plays a deleted server: its node leaves the catalog and its disk,
// token file and all, is gone. The token of a first server, which the
// reaper did not mint and so does not log out, the demo logs out, as the
// operator who made it would.
func (r *reaperRun) gone(s reaper.Server) {
	d := r.d
	d.sim.down(context.Background(), s.Name)
	_ = os.Remove(d.tokenFile(s.Name))
	r.mu.Lock()
	sealed, first := r.firstTokens[s.ID]
	delete(r.firstTokens, s.ID)
	r.mu.Unlock()
	if first {
		if err := d.minter.Revoke(context.Background(), sealed); err != nil {
			fmt.Printf("   (logging out %s's token failed: %v)\n", s.Name, err)
		}
	}
}

// poolStep: lb keeps a standby (warm_pool: {size: 1}); lb2's checks die
// and the reaper claims the standby instead of building a server.
func (r *reaperRun) poolStep() error {
	d := r.d
	if err := d.waitFor("lb's standby to be ready", 30*time.Second, func() bool {
		st := r.state()
		return st != nil && len(st.Roles) > 0 && poolOf(st, "lb") != nil && poolOf(st, "lb").States[reaperkv.StandbyReady] == 1
	}); err != nil {
		printLogTail(r.logPath)
		return err
	}
	say("lb's pool holds one ready standby, kept in Consul maintenance (no DNS answer, in no hiera key):")
	if _, err := d.orch(0, "pool", "status"); err != nil {
		return err
	}
	logFrom := fileSize(r.logPath)
	// lb2 by its ID: once it is deleted, the refill may give its name to
	// the new standby.
	var lb2 string
	for _, s := range r.cloud.Servers() {
		if s.Name == "lb2" {
			lb2 = s.ID
		}
	}
	say("lb2's checks turn critical")
	killed := time.Now()
	if err := d.sim.setHealth(d.ctx, "lb2", "lb", api.HealthCritical); err != nil {
		return err
	}
	var claim reaperkv.PoolClaim
	if err := d.waitFor("lb2 to be replaced from the pool", 60*time.Second, func() bool {
		st := r.state()
		if st == nil || len(st.Journal) > 0 {
			return false
		}
		for _, s := range r.cloud.Servers() {
			if s.ID == lb2 {
				return false
			}
		}
		p := poolOf(st, "lb")
		if p == nil || len(p.Claims) == 0 || p.Claims[0].Serving == 0 {
			return false
		}
		claim = p.Claims[0]
		return true
	}); err != nil {
		printLogTail(r.logPath)
		return err
	}
	took := time.Since(killed)
	printLogFrom(r.logPath, logFrom, "claim", "drain", "delete", "refill")
	say("the standby %s served %s after its claim; lb2 was replaced %s after its checks turned critical, against %s for compute3's replacement by a build in step 5",
		claim.Host, claim.Serving.Round(100*time.Millisecond), took.Round(100*time.Millisecond), r.builtIn.Round(100*time.Millisecond))
	if err := d.waitFor("the pool to refill", 30*time.Second, func() bool {
		st := r.state()
		return st != nil && poolOf(st, "lb") != nil && poolOf(st, "lb").States[reaperkv.StandbyReady] == 1
	}); err != nil {
		return err
	}
	say("the pool refilled once lb2's replacement was done (no standby is created while any role needs a server):")
	_, err := d.orch(0, "pool", "status", "lb")
	return err
}

// poolOf is role's warm pool in the report, or nil.
func poolOf(st *reaperkv.ReaperReport, role string) *reaperkv.PoolReport {
	for _, r := range st.Roles {
		if r.Name == role {
			return r.Pool
		}
	}
	return nil
}

// state reads the reaper's report of its last cycle (nil when none).
func (r *reaperRun) state() *reaperkv.ReaperReport {
	s, err := store.New(r.d.agent.Client, schema.DefaultPrefix)
	if err != nil {
		return nil
	}
	st, _ := s.ReaperReport(r.d.ctx)
	return st
}

// reaperStep runs the reaper against the simulated cloud: it replaces a
// node whose checks die, then pauses when most of the fleet looks unhealthy.
func (d *demo) reaperStep() error {
	step(5, "The reaper replaces a node whose checks stay critical")
	r, err := d.startReaper()
	if err != nil {
		return err
	}
	if err := r.replaceDead(); err != nil {
		return err
	}
	step(6, "60% of the fleet looks unhealthy at once: the reaper pauses instead of reaping")
	if err := r.pauseOnPartition(); err != nil {
		return err
	}
	step(7, "Autoscaling: compute grows with its load, and shrinks by draining its least loaded servers first")
	if err := r.autoscaleStep(); err != nil {
		return err
	}
	step(8, "Warm pool: lb2 is replaced by a standby, claimed instead of built")
	return r.poolStep()
}

// startReaper fills the simulated cloud with the demo's servers, starts the
// reaper on it and waits until it leads and is armed.
func (d *demo) startReaper() (*reaperRun, error) {
	r := &reaperRun{d: d, cloud: simcloud.New(), logPath: filepath.Join(d.dir, "reaper.log"), firstTokens: map[string]string{}}
	r.cloud.BootDelay = 2 * time.Second
	r.cloud.DeleteDelay = 500 * time.Millisecond
	for _, nr := range allNodes() {
		s := r.cloud.Add(reaper.Server{Name: nr[0], Created: time.Now().Add(-time.Hour), Metadata: map[string]string{"role": nr[1]}})
		r.firstTokens[s.ID] = d.firstTokens[nr[0]]
	}
	r.cloud.OnActive = r.boot
	r.cloud.OnDelete = r.gone
	say("the simulated cloud holds the 12 servers above; servers it creates boot in 2s and register in Consul")

	say("reaper.yaml (step 1): dry_run false, 1s cycles, critical_grace 3s, drain 2s; safety limits at their defaults;")
	say("node_identity: each server it builds gets its own token in its user data (cloud-init writes %s)", nodeid.TokenFile)
	logf, err := os.Create(r.logPath)
	if err != nil {
		return nil, err
	}
	rctx, stop := context.WithCancel(d.ctx)
	done := make(chan int, 1)
	go func() {
		defer logf.Close()
		done <- daemon.RunWithCloud(rctx, []string{"--config", d.reaperYAML(), "--consul-addr", d.agent.HTTPAddr, "--token-file", d.tokenFile(reaperToken)},
			cli.IO{Stdout: logf, Stderr: logf}, r.cloud)
	}()
	fmt.Printf("   %s$ reaper --config reaper.yaml --token-file tokens/reaper.token   # in-process, with the simulated cloud as its provider\n", reaperToken)
	d.stoppers = append(d.stoppers, func() {
		stop()
		select {
		case <-done:
		case <-time.After(15 * time.Second):
		}
	})
	if err := d.waitFor("the reaper to lead and arm", 30*time.Second, func() bool {
		st := r.state()
		return st != nil && st.Leader != "" && st.Armed
	}); err != nil {
		return nil, err
	}
	say("it leads, and it is armed: every role reached its count with validation success in step 4")
	return r, nil
}

// replaceDead kills compute3's checks and waits for its replacement.
func (r *reaperRun) replaceDead() error {
	d := r.d
	compute3, err := d.tokenOf("compute3")
	if err != nil {
		return err
	}
	say("compute3's checks turn critical (its machine died)")
	killed := time.Now()
	if err := d.sim.setHealth(d.ctx, "compute3", "compute", api.HealthCritical); err != nil {
		return err
	}
	if err := d.waitFor("compute3 to be replaced", 60*time.Second, func() bool {
		names := map[string]bool{}
		for _, s := range r.cloud.Servers() {
			names[s.Name] = true
		}
		r.mu.Lock()
		n := len(r.booted)
		r.mu.Unlock()
		return !names["compute3"] && n > 0
	}); err != nil {
		printLogTail(r.logPath)
		return err
	}
	if err := d.waitFor("the replacement to finish", 30*time.Second, func() bool {
		st := r.state()
		return st != nil && len(st.Journal) == 0 && len(st.Planned) == 0
	}); err != nil {
		printLogTail(r.logPath)
		return err
	}
	r.builtIn = time.Since(killed)
	say("the reaper's log (one line per state change):")
	printLog(r.logPath, "replace", "create", "drain", "delete", "deregister", "journal", "action")
	say("compute3 was replaced by a build %s after its checks turned critical (critical grace 3s, boot 2s, converge, and compute's drain_timeout 10s: a dead machine answers no drain request)", r.builtIn.Round(100*time.Millisecond))
	var names []string
	for _, s := range r.cloud.Servers() {
		names = append(names, s.Name+" "+s.Status)
	}
	say("the cloud now: %s", strings.Join(names, ", "))
	if err := r.replacementTokens(compute3); err != nil {
		return err
	}
	_, err = d.orch(0, "reaper", "status")
	return err
}

// replacementTokens shows the token the reaper gave compute3's
// replacement, and that compute3's own (secret) no longer works.
func (r *reaperRun) replacementTokens(compute3 string) error {
	d := r.d
	var built string
	r.mu.Lock()
	for _, b := range r.booted {
		if built == "" && roleOf(b) == "compute" {
			built = b
		}
	}
	r.mu.Unlock()
	say("the reaper logged in for %s before creating it and handed it its token in its user data (cloud-init wrote it):", built)
	if err := d.showToken(built); err != nil {
		return err
	}
	if err := d.waitFor("compute3's token logged out", 10*time.Second, func() bool {
		gone, err := d.tokenGone(compute3)
		return err == nil && gone
	}); err != nil {
		return err
	}
	say("compute3's token, made in step 1, was logged out when its server went, as the operator who made it would")
	say("(the reaper logs out the tokens it minted): Consul now answers \"ACL not found\" to it")
	return nil
}

// pauseOnPartition turns most of the fleet critical at once and shows
// that the reaper pauses, touches nothing, and resumes when it heals.
func (r *reaperRun) pauseOnPartition() error {
	d := r.d
	var sick []string
	for _, n := range d.sim.names() {
		if len(sick) >= 8 {
			break
		}
		sick = append(sick, n)
	}
	say("checks of %s turn critical (a partition, not 8 dead machines)", strings.Join(sick, ", "))
	if err := d.setHealth(sick, api.HealthCritical); err != nil {
		return err
	}
	deletesBefore := r.cloud.Deletes.Load()
	createsBefore := r.cloud.Creates.Load()
	if err := d.waitFor("the reaper to pause", 30*time.Second, func() bool {
		st := r.state()
		return st != nil && st.Paused
	}); err != nil {
		printLogTail(r.logPath)
		return err
	}
	say("paused; watching for 6 more seconds (several cycles past the critical grace)...")
	time.Sleep(6 * time.Second)
	if _, err := d.orch(0, "reaper", "status"); err != nil {
		return err
	}
	if got := r.cloud.Deletes.Load() - deletesBefore; got != 0 {
		return fmt.Errorf("the reaper deleted %d servers while paused", got)
	}
	if got := r.cloud.Creates.Load() - createsBefore; got != 0 {
		return fmt.Errorf("the reaper created %d servers while paused", got)
	}
	say("no server was created or deleted while paused")
	say("the partition heals")
	if err := d.setHealth(sick, api.HealthPassing); err != nil {
		return err
	}
	if err := d.waitFor("the reaper to resume", 30*time.Second, func() bool {
		st := r.state()
		return st != nil && !st.Paused
	}); err != nil {
		return err
	}
	say("the reaper resumed, with nothing to do")
	return nil
}

// setHealth turns every check of nodes to status. Demo nodes are named
// <role><n>, the reaper's name template included.
func (d *demo) setHealth(nodes []string, status string) error {
	for _, n := range nodes {
		if err := d.sim.setHealth(d.ctx, n, strings.TrimRight(n, "0123456789"), status); err != nil {
			return err
		}
	}
	return nil
}

// printLog prints the reaper's log lines containing any of words.
func printLog(path string, words ...string) { printLogFrom(path, 0, words...) }

// printLogFrom prints the lines after byte offset from that contain any
// of words.
func printLogFrom(path string, from int64, words ...string) {
	data, err := os.ReadFile(path)
	if err != nil || from > int64(len(data)) {
		return
	}
	for _, line := range strings.Split(string(data[from:]), "\n") {
		for _, w := range words {
			if strings.Contains(line, w) {
				fmt.Printf("     %s\n", line)
				break
			}
		}
	}
}

// printLogTail prints the end of the reaper's log, when a step failed.
func printLogTail(path string) {
	data, _ := os.ReadFile(path)
	lines := strings.Split(strings.TrimSpace(string(data)), "\n")
	if len(lines) > 30 {
		lines = lines[len(lines)-30:]
	}
	fmt.Println("   the reaper's log ends:")
	indent(strings.Join(lines, "\n"))
}
