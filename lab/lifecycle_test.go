//go:build lab

package lab

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hashicorp/consul/api"

	"github.com/jiocloud/orchestrate/internal/paths"
	"github.com/jiocloud/orchestrate/internal/store"
	"github.com/jiocloud/orchestrate/internal/store/schema"
	"github.com/jiocloud/orchestrate/lab/invariant"
	"github.com/jiocloud/orchestrate/watch"
)

// serversOf are the members (no standbys) of role in Nova's list.
func serversOf(ss []invariant.Server, role string) []invariant.Server {
	var out []invariant.Server
	for _, s := range ss {
		if s.Role == role && !s.Standby {
			out = append(out, s)
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out
}

// sh runs a shell command inside server name's container.
func (l *Lab) sh(t *testing.T, name, script string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	out, err := l.HV.Exec(ctx, name, "sh", "-c", script)
	if err != nil {
		t.Fatalf("%s: %q: %v\n%s", name, script, err, out)
	}
	return strings.TrimSpace(string(out))
}

// scenarioWarmPool: the pool of poolRole holds one stopped standby; a
// serving member is powered off hard; the reaper claims the standby (Nova
// start, maintenance ended) instead of creating a server, it serves, and
// the pool is refilled.
func scenarioWarmPool(t *testing.T, l *Lab) map[string]string {
	ctx := context.Background()
	recs, err := l.poolRecords(ctx)
	if err != nil || len(recs) != 1 {
		t.Fatalf("pool records: %+v, %v", recs, err)
	}
	standby := recs[0].Host
	o, err := l.Observation(ctx)
	if err != nil {
		t.Fatal(err)
	}
	members := serversOf(o.Servers, poolRole)
	if len(members) == 0 {
		t.Fatalf("no member of %s", poolRole)
	}
	v := members[0]
	l.Expect(v.Name, "powered off hard, for the warm pool to replace")
	start := time.Now()
	if err := l.HV.Kill(v.Name); err != nil {
		t.Fatal(err)
	}
	var serving time.Duration
	l.wait(t, 10*time.Minute, "standby "+standby+" serving as a member of "+poolRole, func() bool {
		o, err := l.Observation(ctx)
		if err != nil {
			return false
		}
		for _, s := range serversOf(o.Servers, poolRole) {
			if s.Name == standby && o.Serving[s.Name] {
				serving = time.Since(start)
				return true
			}
		}
		return false
	})
	l.wait(t, 10*time.Minute, v.Name+" deleted", func() bool {
		ss, err := l.Servers(ctx)
		return err == nil && !slices.ContainsFunc(ss, func(s invariant.Server) bool { return s.ID == v.ID })
	})
	// No server was created for the member: the only new server of the
	// role is the pool's refill, a standby.
	refill := time.Now()
	l.waitRest(t, 15*time.Minute, "the pool refilled")
	after, err := l.Servers(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range after {
		if s.Role == poolRole && !s.Standby && !slices.ContainsFunc(o.Servers, func(b invariant.Server) bool { return b.ID == s.ID }) {
			t.Fatalf("%s was created as a member of %s: the standby was not claimed", s.Name, poolRole)
		}
	}
	return map[string]string{"victim": v.Name, "claimed": standby, "death_to_standby_serving": serving.Round(time.Second).String(),
		"pool_refilled_in": time.Since(refill).Round(time.Second).String()}
}

// loadGenerator makes every member of autoscaledRole report the load it
// gives it (orchestrate report-metric load, run on the node with the
// node's own token, as the workload would) every 15 s until stop.
type loadGenerator struct {
	mu   sync.Mutex
	load map[string]string // host -> value; "" for the rest
	rest string
}

func (g *loadGenerator) set(rest string, hosts map[string]string) {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.rest, g.load = rest, hosts
}

func (l *Lab) runLoad(ctx context.Context, g *loadGenerator) {
	tick := time.NewTicker(15 * time.Second)
	defer tick.Stop()
	for {
		ss, err := l.Servers(ctx)
		if err == nil {
			for _, s := range serversOf(ss, autoscaledRole) {
				g.mu.Lock()
				v, ok := g.load[s.Name]
				if !ok {
					v = g.rest
				}
				g.mu.Unlock()
				cctx, cancel := context.WithTimeout(ctx, 20*time.Second)
				out, err := l.HV.Exec(cctx, s.Name, "orchestrate", "report-metric", "load", v, "--role", autoscaledRole)
				cancel()
				if err != nil {
					l.Log.Debug("load report", "host", s.Name, "err", err, "out", string(out))
				}
			}
		}
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
	}
}

// scenarioAutoscale: the load generator raises autoscaledRole's load well
// over its target: the reaper scales out by one; the load falls, lowest on
// one host: after the stabilization window that host (the least loaded)
// is asked to drain, its handler marks it draining and answers drained,
// and only then is it deleted.
func scenarioAutoscale(t *testing.T, l *Lab) map[string]string {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var count int
	for _, r := range l.Size.Roles {
		if r.Name == autoscaledRole {
			count = r.Count
		}
	}
	g := &loadGenerator{rest: "0.9"}
	done := make(chan struct{})
	go func() { defer close(done); l.runLoad(ctx, g) }()
	defer func() { cancel(); <-done }()
	start := time.Now()
	out := l.wait(t, 10*time.Minute, fmt.Sprintf("%s scaled out to %d serving", autoscaledRole, count+1), func() bool {
		o, err := l.Observation(ctx)
		if err != nil {
			return false
		}
		n := 0
		for _, s := range serversOf(o.Servers, autoscaledRole) {
			if o.Serving[s.Name] {
				n++
			}
		}
		return n == count+1
	})
	ss, err := l.Servers(ctx)
	if err != nil {
		t.Fatal(err)
	}
	members := serversOf(ss, autoscaledRole)
	// The oldest (first named) member is the least loaded: the rule picks
	// by load, not by age or name order alone.
	victim := members[0]
	loads := map[string]string{victim.Name: "0.05"}
	g.set("0.2", loads)
	lowered := time.Now()
	var sawDraining, sawAnswer bool
	l.wait(t, 10*time.Minute, victim.Name+" drained and deleted", func() bool {
		if !sawDraining {
			cctx, c := context.WithTimeout(ctx, 5*time.Second)
			_, err := l.HV.Exec(cctx, victim.Name, "test", "-e", "/var/lib/labroles/"+autoscaledRole+"/www/draining")
			c()
			sawDraining = err == nil
		}
		if !sawAnswer {
			p, _, err := l.Admin.KV().Get(store.DrainAnswerKey(schema.DefaultPrefix, victim.Name), nil)
			if err == nil && p != nil {
				var a schema.DrainAnswer
				sawAnswer = json.Unmarshal(p.Value, &a) == nil && a.Drained
			}
		}
		ss, err := l.Servers(ctx)
		if err != nil {
			return false
		}
		if !slices.ContainsFunc(ss, func(s invariant.Server) bool { return s.ID == victim.ID }) {
			return true
		}
		if n := len(serversOf(ss, autoscaledRole)); n < count+1 {
			t.Fatalf("%s is down to %d servers while %s, the least loaded, stays: another host was taken", autoscaledRole, n, victim.Name)
		}
		return false
	})
	scaledIn := time.Since(lowered)
	if !sawDraining || !sawAnswer {
		t.Fatalf("%s deleted: its drain handler's mark seen %v, its drained answer seen %v", victim.Name, sawDraining, sawAnswer)
	}
	cancel()
	<-done
	return map[string]string{"scale_out_serving": out.Round(time.Second).String(), "scale_in_deleted": scaledIn.Round(time.Second).String(),
		"drained": victim.Name, "took_from_start": time.Since(start).Round(time.Second).String()}
}

// convergeOn re-runs on host what its current_version watch runs (the
// operator's "run it again" after a fix), without --handler, so a failure
// shows in its exit code.
func (l *Lab) convergeOn(t *testing.T, host string) string {
	t.Helper()
	out, err := l.convergeExit(host)
	if err != nil {
		t.Fatalf("%s: converge again: %v\n%s", host, err, out)
	}
	return out
}

// convergeExit is convergeOn's run with extra arguments (--force, ...),
// its failure returned.
func (l *Lab) convergeExit(host string, extra ...string) (string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	raw, err := l.HV.Exec(ctx, host, "cat", paths.WatchConfig)
	if err != nil {
		return string(raw), fmt.Errorf("%s: %s: %w", host, paths.WatchConfig, err)
	}
	var cfg struct{ Watches []watch.Watch }
	if err := json.Unmarshal(raw, &cfg); err != nil {
		return "", fmt.Errorf("%s: %s: %w", host, paths.WatchConfig, err)
	}
	for _, w := range cfg.Watches {
		if w.Type == "key" && strings.HasSuffix(w.Key, "/current_version") {
			args := slices.DeleteFunc(slices.Clone(w.Args), func(a string) bool { return a == "--handler" })
			args = append(args, extra...)
			out, err := l.HV.Exec(ctx, host, args...)
			return string(out), err
		}
	}
	return "", fmt.Errorf("%s: no current_version watch in %s", host, paths.WatchConfig)
}

// scenarioRollout: poolRole's rollout policy allows one host at a time and
// no failure; its validation fails on one host (the lab's fail file).
// trigger-update v2: never two of its hosts in their update at once, the
// failing host fails validation and the role halts while the other roles
// roll on. The fix (the
// file removed, converge run again on the host) and `rollout resume` bring
// every host to v2.
func scenarioRollout(t *testing.T, l *Lab) map[string]string {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	role := poolRole
	ss, err := l.Servers(ctx)
	if err != nil {
		t.Fatal(err)
	}
	hosts := serversOf(ss, role)
	if len(hosts) < 2 {
		t.Fatalf("role %s has %d members, want 2 or more", role, len(hosts))
	}
	failing := hosts[len(hosts)-1].Name
	if out, code := l.orchestrate(ctx, "rollout", role, "--max-unavailable", "1", "--max-failures", "0"); code != 0 {
		t.Fatalf("rollout policy: %s", out)
	}
	l.sh(t, failing, "mkdir -p /etc/labroles && echo lab > /etc/labroles/fail-validation")
	// Slots held at once, polled every 500 ms for the whole scenario.
	var mu sync.Mutex
	most := 0
	go func() {
		for ctx.Err() == nil {
			pairs, _, err := l.Admin.KV().List(schema.DefaultPrefix+"/rollout/"+role+"/slot/", (&api.QueryOptions{}).WithContext(ctx))
			if err == nil {
				n := 0
				for _, p := range pairs {
					// A member's claim held by its session (a new host, the
					// pool's rebuilt standby, is not bound by the policy).
					host := p.Key[strings.LastIndex(p.Key, "/")+1:]
					if p.Session != "" && slices.ContainsFunc(hosts, func(s invariant.Server) bool { return s.Name == host }) {
						n++
					}
				}
				mu.Lock()
				most = max(most, n)
				mu.Unlock()
			}
			time.Sleep(500 * time.Millisecond)
		}
	}()
	start := time.Now()
	if out, code := l.orchestrate(ctx, "trigger-update", "v2"); code != 0 {
		t.Fatalf("trigger-update v2: %s", out)
	}
	l.version = "v2"
	var halted string
	l.wait(t, 10*time.Minute, "the rollout of "+role+" to halt", func() bool {
		out, _ := l.orchestrate(ctx, "rollout", role)
		if strings.Contains(out, "HALTED") {
			halted = out
			return true
		}
		return false
	})
	haltedAfter := time.Since(start)
	t.Logf("halted: %s", halted)
	// Every other role reaches v2 while role is halted.
	for _, r := range l.Size.Roles {
		if r.Name == role {
			continue
		}
		l.wait(t, 10*time.Minute, r.Name+" on v2", func() bool {
			ss, err := l.Servers(ctx)
			if err != nil {
				return false
			}
			names := []string{"verify-hosts", "v2"}
			for _, s := range serversOf(ss, r.Name) {
				names = append(names, s.Name)
			}
			_, code := l.orchestrate(ctx, names...)
			return code == 0
		})
	}
	// The halt holds: the role's hosts are not all on v2, the failing one
	// is not.
	if _, code := l.orchestrate(ctx, "verify-hosts", "v2", failing); code == 0 {
		t.Fatalf("%s reports v2 although its validation fails", failing)
	}
	l.sh(t, failing, "rm -f /etc/labroles/fail-validation")
	if out, code := l.orchestrate(ctx, "rollout", "resume", role); code != 0 {
		t.Fatalf("rollout resume: %s", out)
	}
	resumed := time.Now()
	l.convergeOn(t, failing)
	l.waitHealthy(t, 10*time.Minute, "after the resume")
	mu.Lock()
	held := most
	mu.Unlock()
	if held > 1 {
		t.Fatalf("%d slots of %s held at once, policy allows 1", held, role)
	}
	if held == 0 {
		t.Fatalf("no slot of %s seen held: the rollout was not paced (or the poll missed every one)", role)
	}
	if out, code := l.orchestrate(ctx, "rollout", role, "--max-unavailable", "all", "--max-failures", "none"); code != 0 {
		t.Fatalf("rollout policy back: %s", out)
	}
	return map[string]string{"failing_host": failing, "halted_after": haltedAfter.Round(time.Second).String(),
		"max_slots_held": fmt.Sprint(held), "resume_to_all_v2": time.Since(resumed).Round(time.Second).String()}
}
