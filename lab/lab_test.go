//go:build lab

package lab

import (
	"context"
	"fmt"
	"log/slog"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"testing"
	"time"

	"gopkg.in/yaml.v3"

	"github.com/jiocloud/orchestrate/lab/invariant"
)

// scenario is one of issue 28's: it returns its figures (name -> value)
// for the summary, or fails t.
type scenario struct {
	name string
	run  func(t *testing.T, l *Lab) map[string]string
}

// scenarios in the order they run: each starts from the cloud the last
// left (healthy), and failover, which leaves one reaper, comes last.
var scenarios = []scenario{
	{"bootstrap", scenarioBootstrap},
	{"death", scenarioDeath},
	{"partition", scenarioPartition},
	{"warmpool", scenarioWarmPool},
	{"autoscale", scenarioAutoscale},
	{"rollout", scenarioRollout},
	{"serverloss", scenarioServerLoss},
	{"refresh", scenarioRefresh},
	{"failover", scenarioFailover},
}

// result is a scenario's line in the summary.
type result struct {
	name    string
	pass    bool
	took    time.Duration
	figures map[string]string
}

// TestLab brings the whole cloud up from nothing, runs the scenarios
// LAB_SCENARIOS names (comma list; default all) and prints the summary:
// per scenario pass or fail and its figures, then the timeline of what the
// cloud did. Any invariant violation fails the run.
func TestLab(t *testing.T) {
	if os.Geteuid() != 0 {
		// Never a skip: make lab is asked for by name, and CI runs it.
		t.Fatal("the lab needs root (bridges, nftables, systemd-nspawn, mounts): run make lab as root")
	}
	size, err := SizeFromEnv()
	if err != nil {
		t.Fatal(err)
	}
	want := scenarioNames()
	for _, w := range want {
		if !slices.ContainsFunc(scenarios, func(s scenario) bool { return s.name == w }) {
			var all []string
			for _, s := range scenarios {
				all = append(all, s.name)
			}
			t.Fatalf("LAB_SCENARIOS: no scenario %q (the scenarios: %s)", w, strings.Join(all, ","))
		}
	}
	size.Pool, size.Autoscale = slices.Contains(want, "warmpool"), slices.Contains(want, "autoscale")
	log := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelInfo}))
	ctx := context.Background()
	start := time.Now()
	l, err := Up(ctx, size, log)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Down(context.Background())
	up := time.Since(start)
	var results []result
	for _, s := range scenarios {
		if !slices.Contains(want, s.name) {
			continue
		}
		r := result{name: s.name}
		begin := time.Now()
		r.pass = t.Run(s.name, func(t *testing.T) {
			if s.name != "bootstrap" {
				// Every scenario starts from the cloud at rest: each role at
				// its count, serving the version, its warm pool full.
				l.waitRest(t, 15*time.Minute, "before "+s.name)
			}
			r.figures = s.run(t, l)
		})
		r.took = time.Since(begin)
		if v := l.Violations(); len(v) > 0 {
			r.pass = false
		}
		results = append(results, r)
		if !r.pass {
			break // the cloud is in no known state for the next
		}
	}
	summary := l.summary(size, up, results)
	fmt.Print(summary)
	os.WriteFile(filepath.Join(l.Dir, "summary.txt"), []byte(summary), 0o644)
	if v := l.Violations(); len(v) > 0 {
		t.Fatalf("invariants violated: %v", v)
	}
}

func scenarioNames() []string {
	v := os.Getenv("LAB_SCENARIOS")
	if v == "" || v == "all" {
		var all []string
		for _, s := range scenarios {
			all = append(all, s.name)
		}
		return all
	}
	return strings.Split(v, ",")
}

// summary is the lab's report: sizes, the scenarios and their figures, the
// memory per container, and the timeline.
func (l *Lab) summary(size Size, up time.Duration, results []result) string {
	var b strings.Builder
	fmt.Fprintf(&b, "\n== lab summary: size %s, %d containers, up (network, Consul, image, packages, Nova, ACLs, hypervisor) in %s\n",
		size.Name, size.Servers(), up.Round(time.Second))
	for _, r := range results {
		verdict := "PASS"
		if !r.pass {
			verdict = "FAIL"
		}
		fmt.Fprintf(&b, "%-10s %s  %s", r.name, verdict, r.took.Round(time.Second))
		keys := make([]string, 0, len(r.figures))
		for k := range r.figures {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		for _, k := range keys {
			fmt.Fprintf(&b, "  %s=%s", k, r.figures[k])
		}
		b.WriteString("\n")
	}
	if mem := l.memory(); mem != "" {
		fmt.Fprintf(&b, "memory per container (PSS): %s\n", mem)
	}
	v := l.Violations()
	fmt.Fprintf(&b, "invariant violations: %d\n", len(v))
	b.WriteString("timeline:\n")
	for _, e := range l.Timeline() {
		fmt.Fprintf(&b, "  %s %s\n", e.Time.UTC().Format("15:04:05"), e.What)
	}
	return b.String()
}

// scenarioBootstrap: from nothing, the operator sets the version and
// creates the bootstrap servers; their reapers build every role through
// Nova; the servers converge in dependency order without a human; the
// start gate arms once every role validated; orchestrate status is green.
func scenarioBootstrap(t *testing.T, l *Lab) map[string]string {
	ctx := context.Background()
	if out, code := l.orchestrate(ctx, "trigger-update", "v1"); code != 0 {
		t.Fatalf("trigger-update: %s", out)
	}
	l.version = "v1"
	start := time.Now()
	for i := 1; i <= l.Size.Reapers; i++ {
		if _, err := l.createBootstrap(ctx, fmt.Sprintf("boot%d", i)); err != nil {
			t.Fatal(err)
		}
	}
	l.waitHealthy(t, 25*time.Minute, "bootstrap")
	validated := time.Since(start)
	l.wait(t, 2*time.Minute, "the start gate to arm", func() bool {
		r, err := l.Report(ctx)
		return err == nil && r != nil && r.Armed
	})
	armed := time.Since(start)
	out, code := l.orchestrate(ctx, "status")
	t.Logf("orchestrate status:\n%s", out)
	if code != 0 {
		t.Fatalf("orchestrate status: exit %d", code)
	}
	l.waitRest(t, 15*time.Minute, "the warm pool of "+poolRole)
	return map[string]string{"all_validated": validated.Round(time.Second).String(), "armed_after": armed.Round(time.Second).String(),
		"pool_ready_after": time.Since(start).Round(time.Second).String()}
}

// victim is a serving server of the role with the most servers among
// those that are neither pooled nor autoscaled (their own scenarios try
// those): a death there is replaced by a create through Nova.
func (l *Lab) victim(t *testing.T) invariant.Server {
	t.Helper()
	o, err := l.Observation(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	var pick invariant.Server
	most := 0
	for _, r := range l.Size.Roles {
		if r.Name == poolRole || r.Name == autoscaledRole || r.Count <= most {
			continue
		}
		for _, s := range o.Servers {
			if s.Role == r.Name && !s.Standby && o.Serving[s.Name] {
				pick, most = s, r.Count
				break
			}
		}
	}
	if most == 0 {
		t.Fatal("no serving server of a role without a pool or autoscaling")
	}
	return pick
}

// scenarioDeath: a serving server is made a suspect (its consistent
// Puppet run fails), its failure log read from Swift; then its container
// is powered off hard; the reaper replaces it through Nova, and the log is
// read from Swift again once the machine and its records are gone.
func scenarioDeath(t *testing.T, l *Lab) map[string]string {
	v := l.victim(t)
	ctx := context.Background()
	// First its build fails: its Puppet code cannot write a file it
	// manages (a directory stands in its place), so its consistent run
	// fails on every attempt and the host is marked suspect. Its converge
	// uploads the run's log to the lab's Swift through the grant the
	// reaper gave it, and its record links the log.
	l.Expect(v.Name, "made a suspect (its consistent Puppet run fails), then powered off hard (machine death)")
	l.sh(t, v.Name, "f="+brokenFile(v.Role)+"; rm -rf $f && mkdir -p $f")
	if out, err := l.convergeExit(v.Name, "--force", "--retry-interval", "5s", "--max-attempts", "2"); err == nil {
		t.Fatalf("%s: converge passed with its Puppet code broken:\n%s", v.Name, out)
	}
	if out, _ := l.orchestrate(ctx, "get-failures"); !strings.Contains(out, v.Name) || !strings.Contains(out, "suspect") {
		t.Fatalf("%s is no suspect in get-failures:\n%s", v.Name, out)
	}
	before := l.failureLog(t, ctx, v.Name, v.Role)
	start := time.Now()
	if err := l.HV.Kill(v.Name); err != nil {
		t.Fatal(err)
	}
	l.wait(t, 15*time.Minute, v.Name+" replaced and deleted", func() bool {
		ss, err := l.Servers(ctx)
		return err == nil && !slices.ContainsFunc(ss, func(s invariant.Server) bool { return s.ID == v.ID })
	})
	l.waitHealthy(t, 10*time.Minute, "after the death of "+v.Name)
	took := time.Since(start)
	// The machine is gone, its records with it: the log is still read
	// from Swift, as before.
	if after := l.failureLog(t, ctx, v.Name, v.Role); after != before {
		t.Fatalf("%s's failure log read after its death differs from the one read before:\n%s\n---\n%s", v.Name, after, before)
	}
	return map[string]string{"victim": v.Name, "death_to_replacement_serving": took.Round(time.Second).String(),
		"failure_log": fmt.Sprintf("%d bytes from Swift after the machine was gone", len(before))}
}

// brokenFile is a file the lab's Puppet code manages on a server of role
// (lab/puppet: the index its service serves).
func brokenFile(role string) string { return "/var/lib/labroles/" + role + "/www/index.html" }

// failureLog is host's failure log as `orchestrate logs HOST --step
// puppet` reads it from the lab's Swift with the container's key; it must
// be the failing run's: Puppet's error naming the file it could not write.
func (l *Lab) failureLog(t *testing.T, ctx context.Context, host, role string) string {
	t.Helper()
	var out string
	var code int
	l.wait(t, 2*time.Minute, host+"'s failure log in Swift", func() bool {
		out, code = l.orchestrate(ctx, "logs", host, "--step", "puppet", "--container-url", l.Swift.ContainerURL, "--temp-url-key-file", l.Swift.KeyFile)
		return code == 0
	})
	if !strings.Contains(out, "Error: ") || !strings.Contains(out, brokenFile(role)) {
		t.Fatalf("orchestrate logs %s: the log does not hold Puppet's error on %s:\n%s", host, brokenFile(role), out)
	}
	// Once the reaper has forgotten the host's records, orchestrate says
	// on stderr that it reads the log its departed record links: a notice
	// whose presence depends on how far the reaper got, not the log.
	gone := "orchestrate: " + host + " is gone: "
	var kept []string
	for _, line := range strings.SplitAfter(out, "\n") {
		if !strings.HasPrefix(line, gone) {
			kept = append(kept, line)
		}
	}
	return strings.Join(kept, "")
}

// scenarioPartition: 60% of the role servers are cut from the Consul
// servers and the other containers for longer than any grace: the reaper
// pauses, nothing is created or deleted; healed, the cloud is as it was.
func scenarioPartition(t *testing.T, l *Lab) map[string]string {
	ctx := context.Background()
	before, err := l.Servers(ctx)
	if err != nil {
		t.Fatal(err)
	}
	var roleAddrs, others []netip.Addr
	for _, c := range l.HV.Containers() {
		isRole := slices.ContainsFunc(before, func(s invariant.Server) bool {
			return s.ID == c.ID && s.Role != bootstrapRole && s.Role != "" && !s.Standby
		})
		if isRole {
			roleAddrs = append(roleAddrs, c.Address)
		} else {
			others = append(others, c.Address)
		}
	}
	sort.Slice(roleAddrs, func(i, j int) bool { return roleAddrs[i].Less(roleAddrs[j]) })
	n := (len(roleAddrs)*6 + 9) / 10
	cut, kept := roleAddrs[:n], roleAddrs[n:]
	to := append(append(append([]netip.Addr(nil), l.Consul.Addrs...), kept...), others...)
	if err := l.Net.Partition(ctx, "lab60", cut, to); err != nil {
		t.Fatal(err)
	}
	healed := false
	defer func() {
		if !healed {
			l.Net.Heal(ctx, "lab60")
		}
	}()
	paused := l.wait(t, 5*time.Minute, "the reaper to pause", func() bool {
		r, err := l.Report(ctx)
		return err == nil && r != nil && r.Paused
	})
	l.hold(t, 60*time.Second) // well past critical_grace: still nothing
	if err := l.Net.Heal(ctx, "lab60"); err != nil {
		t.Fatal(err)
	}
	healed = true
	l.waitHealthy(t, 10*time.Minute, "after the partition healed")
	after, err := l.Servers(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if ids(before) != ids(after) {
		t.Fatalf("servers changed over the partition:\nbefore %s\nafter  %s", ids(before), ids(after))
	}
	return map[string]string{"cut": fmt.Sprintf("%d/%d", len(cut), len(roleAddrs)), "paused_after": paused.Round(time.Second).String()}
}

func ids(ss []invariant.Server) string {
	var out []string
	for _, s := range ss {
		out = append(out, s.Name+"="+s.ID)
	}
	sort.Strings(out)
	return strings.Join(out, " ")
}

// scenarioFailover: a replacement is under way when the leading reaper's
// container is killed; the other takes the lock within the documented
// bound (2 x session_ttl + lock_delay + the api's 5 s retry, plus the
// failure detection of the dead node) and finishes the journal: one
// create, no duplicate name.
func scenarioFailover(t *testing.T, l *Lab) map[string]string {
	ctx := context.Background()
	before, err := l.Servers(ctx)
	if err != nil {
		t.Fatal(err)
	}
	v := l.victim(t)
	l.Expect(v.Name, "powered off hard, to start a replacement")
	if err := l.HV.Kill(v.Name); err != nil {
		t.Fatal(err)
	}
	var leader string
	l.wait(t, 5*time.Minute, "the replacement of "+v.Name+" in the journal", func() bool {
		r, err := l.Report(ctx)
		if err != nil || r == nil {
			return false
		}
		for _, j := range r.Journal {
			if j.OldName == v.Name && j.NewName != "" {
				leader = r.Leader
				return true
			}
		}
		return false
	})
	host, _, _ := strings.Cut(leader, "-")
	l.Expect(host, "the leading reaper's machine, killed mid-replacement")
	killed := time.Now()
	if err := l.HV.Kill(host); err != nil {
		t.Fatalf("kill the leader %s: %v", host, err)
	}
	takeover := l.wait(t, 3*time.Minute, "another reaper to lead", func() bool {
		r, err := l.Report(ctx)
		return err == nil && r != nil && !strings.HasPrefix(r.Leader, host+"-") && r.Time.After(killed)
	})
	l.wait(t, 15*time.Minute, v.Name+" replaced and deleted", func() bool {
		ss, err := l.Servers(ctx)
		return err == nil && !slices.ContainsFunc(ss, func(s invariant.Server) bool { return s.ID == v.ID })
	})
	l.waitHealthy(t, 10*time.Minute, "after the failover")
	after, _ := l.Servers(ctx)
	created := 0
	for _, s := range after {
		if !slices.ContainsFunc(before, func(b invariant.Server) bool { return b.ID == s.ID }) {
			created++
		}
	}
	if created != 1 {
		t.Fatalf("%d servers created for one replacement across the failover: %s", created, ids(after))
	}
	return map[string]string{"killed_leader": host, "takeover": takeover.Round(time.Second).String()}
}

// scenarioServerLoss: one of the three Consul servers killed: nothing
// changes; a second one killed (quorum lost): the reaper acts on nothing
// and every node keeps its last good hiera data, whole; both back: the
// cloud recovers without a human.
func scenarioServerLoss(t *testing.T, l *Lab) map[string]string {
	ctx := context.Background()
	before, err := l.Servers(ctx)
	if err != nil {
		t.Fatal(err)
	}
	// Server 1 (index 0) is the one the lab reads through: lose the others.
	if err := l.Consul.Kill(2); err != nil {
		t.Fatal(err)
	}
	l.hold(t, 45*time.Second)
	l.waitHealthy(t, 2*time.Minute, "one Consul server lost")
	if err := l.Consul.Kill(1); err != nil {
		t.Fatal(err)
	}
	lost := time.Now()
	for time.Since(lost) < 90*time.Second {
		l.hold(t, 10*time.Second)
		now, err := l.Servers(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if ids(now) != ids(before) {
			t.Fatalf("servers changed without quorum:\nbefore %s\nnow    %s", ids(before), ids(now))
		}
		for _, s := range now {
			if s.Role == bootstrapRole {
				continue
			}
			f, ok := l.hieraFile(ctx, s.Name)
			if !ok {
				continue
			}
			var m map[string]any
			if !f.Exists || yaml.Unmarshal(f.Data, &m) != nil || len(m) == 0 {
				t.Fatalf("%s's services.yaml without quorum: exists %v, %d bytes, not whole", s.Name, f.Exists, len(f.Data))
			}
		}
	}
	back := time.Now()
	for _, i := range []int{1, 2} {
		if err := l.Consul.Restart(ctx, i); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := l.Consul.WaitLeader(ctx, 2*time.Minute); err != nil {
		t.Fatal(err)
	}
	recovered := l.waitHealthy(t, 10*time.Minute, "quorum back")
	after, err := l.Servers(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if ids(after) != ids(before) {
		t.Fatalf("servers changed over the loss of quorum:\nbefore %s\nafter  %s", ids(before), ids(after))
	}
	return map[string]string{"quorum_lost_for": back.Sub(lost).Round(time.Second).String(), "recovered_in": recovered.Round(time.Second).String()}
}
