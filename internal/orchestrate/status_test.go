package orchestrate

import (
	"bytes"
	"context"
	"encoding/json"
	"flag"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/consul/api"

	"github.com/jiocloud/orchestrate/internal/consultest"
	"github.com/jiocloud/orchestrate/internal/store"
	"github.com/jiocloud/orchestrate/internal/store/reaperkv"
	"github.com/jiocloud/orchestrate/internal/store/schema"
)

var update = flag.Bool("update", false, "rewrite the golden files under testdata/status/")

// statusNow is the fixed clock of the status screens' tests.
var statusNow = time.Date(2026, 11, 27, 12, 0, 0, 0, time.UTC)

// statusCloud is a cloud built in a real Consul agent: catalog nodes
// with their role's service check, the hosts' own records written
// through the store as the nodes write them, and a reaper report as the
// reaper writes it.
type statusCloud struct {
	t      *testing.T
	a      *consultest.Agent
	st     *store.Store
	report reaperkv.ReaperReport
}

// newStatusCloud starts the agent (node boot1, datacenter dc1) with the
// desired version v42 and an armed reaper whose report is 20 s old.
func newStatusCloud(t *testing.T) *statusCloud {
	t.Helper()
	c := &statusCloud{t: t, a: consultest.Start(t, consultest.Options{NodeName: "boot1"})}
	c.st = mustStore(t, c.a)
	c.st.Now = func() time.Time { return statusNow.Add(-2 * time.Hour) }
	if err := c.st.SetCurrentVersion(context.Background(), "v42"); err != nil {
		t.Fatal(err)
	}
	c.report = reaperkv.ReaperReport{Time: statusNow.Add(-20 * time.Second), Leader: "boot1-4711", Interval: 30 * time.Second,
		Armed: true, Planned: []string{}, Actions: []reaperkv.PlanAction{}}
	return c
}

// holdBack adds an action the reaper holds back to the report, as the
// reaper writes it: the line in blocked and the action as data.
func (c *statusCloud) holdBack(a reaperkv.PlanAction, line string) {
	a.Held, a.Text = true, line
	c.report.Blocked = append(c.report.Blocked, line)
	c.report.Actions = append(c.report.Actions, a)
}

// role adds a role of desired count with its hosts, each in the catalog
// with a passing check, on v42 with puppet and validation success, and
// the role in the reaper's report with every host serving.
func (c *statusCloud) role(name string, hosts ...string) {
	c.t.Helper()
	ctx := context.Background()
	if err := c.st.SetDesired(ctx, name, len(hosts)); err != nil {
		c.t.Fatal(err)
	}
	for _, h := range hosts {
		c.check(h, name, api.HealthPassing)
		if err := c.st.ReportVersion(ctx, h, "v42"); err != nil {
			c.t.Fatal(err)
		}
		c.status(h, store.CategoryPuppet, store.StateSuccess, "")
		c.status(h, store.CategoryValidation, store.StateSuccess, "")
	}
	c.report.Roles = append(c.report.Roles, reaperkv.RoleReport{Name: name, Desired: len(hosts), Count: len(hosts), Healthy: len(hosts),
		States: map[string]int{reaperkv.ServerHealthy: len(hosts)}, Members: hosts})
}

// check registers host in the catalog with its role's service check in
// status.
func (c *statusCloud) check(host, role, status string) {
	c.t.Helper()
	_, err := c.a.Client.Catalog().Register(&api.CatalogRegistration{Node: host, Address: "10.0.0.1",
		Service: &api.AgentService{ID: role, Service: role},
		Check:   &api.AgentCheck{Node: host, CheckID: "service:" + role, Name: role + " answers", Status: status, ServiceID: role}}, nil)
	if err != nil {
		c.t.Fatal(err)
	}
}

// status writes host's own status record, dated ago before now.
func (c *statusCloud) status(host, category, state, detail string) {
	c.t.Helper()
	v := store.StatusValue{Version: "v42", Detail: detail, Time: statusNow.Add(-time.Hour)}
	if err := c.st.UpdateStatus(context.Background(), host, category, state, v); err != nil {
		c.t.Fatal(err)
	}
}

// roleReport is the role in the reaper's report, to change.
func (c *statusCloud) roleReport(name string) *reaperkv.RoleReport {
	for i := range c.report.Roles {
		if c.report.Roles[i].Name == name {
			return &c.report.Roles[i]
		}
	}
	c.t.Fatalf("no role %s", name)
	return nil
}

// put writes value as JSON at key under the prefix.
func (c *statusCloud) put(key string, value any) {
	c.t.Helper()
	data, err := json.Marshal(value)
	if err != nil {
		c.t.Fatal(err)
	}
	if _, err := c.a.Client.KV().Put(&api.KVPair{Key: key, Value: data}, nil); err != nil {
		c.t.Fatal(err)
	}
}

// publish writes the reaper's report where the reaper does.
func (c *statusCloud) publish() {
	c.put(reaperkv.ReaperKey(schema.DefaultPrefix, reaperkv.ReaperStateKey), c.report)
}

// run runs orchestrate at statusNow, 80 columns wide.
func (c *statusCloud) run(args ...string) result {
	c.t.Helper()
	c.t.Setenv("COLUMNS", "80")
	c.t.Setenv("CONSUL_HTTP_ADDR", c.a.HTTPAddr)
	var out, errb bytes.Buffer
	ctx := withClock(context.Background(), func() time.Time { return statusNow })
	code := Run(ctx, args, IO{Stdin: strings.NewReader(""), Stdout: &out, Stderr: &errb})
	return result{code: code, stdout: out.String(), stderr: errb.String()}
}

// golden compares got with testdata/status/NAME.golden (-update writes it).
func golden(t *testing.T, name, got string) {
	t.Helper()
	path := filepath.Join("testdata", "status", name+".golden")
	if *update {
		if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, []byte(got), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%v (run with -update to write it)", err)
	}
	if got != string(want) {
		t.Errorf("%s differs from %s:\n--- got\n%s--- want\n%s", name, path, got, want)
	}
	for i, line := range strings.Split(strings.TrimSuffix(got, "\n"), "\n") {
		if n := cells(line); n > 80 {
			t.Errorf("%s line %d is %d columns wide: %q", name, i+1, n, line)
		}
	}
}

// healthyCloud is three roles, every server serving.
func healthyCloud(t *testing.T) *statusCloud {
	c := newStatusCloud(t)
	c.role("db", "db1", "db2", "db3")
	c.role("lb", "lb1", "lb2")
	c.role("web", "web1", "web2", "web3")
	return c
}

// The four screens an operator sees, at 80 columns, from a real Consul.
func TestStatusScreens(t *testing.T) {
	for _, tc := range []struct {
		name  string
		build func(c *statusCloud)
	}{
		{"healthy", func(c *statusCloud) {}},
		{"partition", partition},
		{"halted-rollout", haltedRollout},
		{"capacity", capacityShortage},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := healthyCloud(t)
			tc.build(c)
			c.publish()
			r := c.run("status")
			mustCode(t, r, 0, "status")
			golden(t, tc.name, r.stdout)
		})
	}
}

// partition: half the fleet's checks fail at once and the reaper pauses
// rather than replace it.
func partition(c *statusCloud) {
	for _, h := range []string{"web2", "web3", "db2", "db3", "lb2"} {
		c.check(h, strings.TrimRight(h, "0123456789"), api.HealthCritical)
	}
	c.report.Paused = true
	c.report.PauseReason = "5 of 8 servers look unhealthy at once, more than max_unhealthy_percent 40%: a partition, not 5 broken servers"
	for _, r := range []struct {
		role string
		bad  []string
	}{{"db", []string{"db2", "db3"}}, {"lb", []string{"lb2"}}, {"web", []string{"web2", "web3"}}} {
		rr := c.roleReport(r.role)
		rr.Healthy -= len(r.bad)
		rr.States = map[string]int{reaperkv.ServerHealthy: rr.Healthy, reaperkv.ServerUnhealthy: len(r.bad)}
		for _, h := range r.bad {
			rr.Attention = append(rr.Attention, reaperkv.ServerReport{Name: h, ID: "id-" + h, State: reaperkv.ServerUnhealthy})
			c.holdBack(reaperkv.PlanAction{Op: reaperkv.PlanReplace, Role: r.role, Host: h, Reason: "unhealthy", Why: reaperkv.HoldPaused, WhyText: "paused"},
				r.role+": replacement of "+h+" (unhealthy) waits: paused")
		}
	}
}

// haltedRollout: two web hosts failed v42, more than max_failures 1;
// the third waits for a slot.
func haltedRollout(c *statusCloud) {
	ctx := context.Background()
	one := 1
	if _, err := c.st.SetRolloutPolicy(ctx, "web", func(p *store.RolloutPolicy) error {
		p.MaxUnavailable, p.MaxFailures = 1, &one
		return nil
	}); err != nil {
		c.t.Fatal(err)
	}
	details := map[string]string{"web1": "Exec[apt-get install nova-api] returned 100", "web2": "Service[apache2] failed to start\x1b[2J\x1b[H all green"}
	for _, h := range []string{"web1", "web2"} {
		c.status(h, store.CategoryPuppet, store.StateFailed, details[h])
		if err := c.st.SetRolloutHost(ctx, "web", h, store.RolloutHost{Version: "v42", State: store.RolloutFailed, Detail: details[h], Time: statusNow.Add(-40 * time.Minute)}); err != nil {
			c.t.Fatal(err)
		}
	}
	if err := c.st.SetRolloutHost(ctx, "web", "web3", store.RolloutHost{Version: "v42", State: store.RolloutPending, Time: statusNow.Add(-30 * time.Minute)}); err != nil {
		c.t.Fatal(err)
	}
	c.status("web3", store.CategoryPuppet, store.StatePending, "waiting for a rollout slot: the rollout of web to v42 is halted")
}

// capacityShortage: db scaled to 5 while the project's quota allows 3;
// the reaper backs off its creates. web replaces a server meanwhile.
func capacityShortage(c *statusCloud) {
	if err := c.st.SetDesired(context.Background(), "db", 5); err != nil {
		c.t.Fatal(err)
	}
	capRec := schema.CapacityRecord{State: "exhausted", Class: "quota", Since: statusNow.Add(-25 * time.Minute), Time: statusNow.Add(-time.Minute),
		Reason: "create db4: Quota exceeded for cores: Requested 8, but already used 96 of 100 cores"}
	c.put(store.CapacityKey(schema.DefaultPrefix, "db"), capRec)
	db := c.roleReport("db")
	db.Desired, db.Capacity = 5, &capRec
	db.Pool = &reaperkv.PoolReport{Size: 2, States: map[string]int{}, Why: "the warm pool's backoff holds (a quota or capacity error)"}
	c.report.RoleBackoff = map[string]reaperkv.RoleBackoff{"db": {Until: statusNow.Add(4 * time.Minute), Reason: "Quota exceeded for cores"}}
	c.holdBack(reaperkv.PlanAction{Op: "create", Role: "db", Reason: "2 below desired 5", Why: reaperkv.HoldBackoff, WhyText: "the create backoff holds (quota, capacity or a failed create)"},
		"db: 2 below desired 5; creates wait: the create backoff holds (quota, capacity or a failed create)")
	web := c.roleReport("web")
	web.Autoscale = &reaperkv.AutoscaleReport{Source: "consul", Metric: "cpu", Target: 60, Min: 2, Max: 6,
		Last: &reaperkv.ScaleDecision{Time: statusNow.Add(-20 * time.Second), Desired: 3, Recommended: 3, New: 3, Result: reaperkv.ResultHold, Reason: "hold: cpu 52 near target 60"}}
	c.report.Journal = []reaperkv.JournalEntry{{ID: "web.18a.1", Kind: reaperkv.KindReplace, Role: "web", Reason: "max age 720h", Phase: reaperkv.PhaseBooting,
		OldName: "web1", NewName: "web4", Started: statusNow.Add(-3 * time.Minute), Updated: statusNow.Add(-2 * time.Minute)}}
}

// --problems answers: exit 0 and "no problems" on a healthy cloud, exit 1
// with only the roles that are wrong otherwise.
func TestStatusProblems(t *testing.T) {
	c := healthyCloud(t)
	c.publish()
	r := c.run("status", "--problems")
	mustCode(t, r, 0, "status --problems, healthy")
	if !strings.HasSuffix(r.stdout, "no problems\n") || strings.Contains(r.stdout, "healthy:") {
		t.Fatalf("status --problems, healthy:\n%s", r.stdout)
	}
	partition(c)
	c.publish()
	r = c.run("status", "--problems")
	mustCode(t, r, 1, "status --problems in a partition")
	if !strings.Contains(r.stdout, "web: serving 1/3") || strings.Contains(r.stdout, "healthy:") {
		t.Fatalf("status --problems in a partition:\n%s", r.stdout)
	}
	mustCode(t, c.run("status"), 0, "status without --problems in a partition")

	// A spent budget holds the role's replacements.
	c.report.Paused, c.report.Blocked, c.report.Actions = false, nil, []reaperkv.PlanAction{}
	c.holdBack(reaperkv.PlanAction{Op: reaperkv.PlanReplace, Role: "web", Host: "web2", Reason: "unhealthy", Why: reaperkv.HoldBudgetHour, WhyText: "max_actions_per_hour (6) reached"},
		"web: replacement of web2 (unhealthy) waits: max_actions_per_hour (6) reached")
	c.publish()
	if r = c.run("status", "--role", "web"); !strings.Contains(r.stdout, "  reaper holds: budget spent: max_actions_per_hour (6) reached\n") {
		t.Fatalf("status --role web with the budget spent:\n%s", r.stdout)
	}
}

// --role keeps the roles asked for (repeated or a comma list); a bad or
// unknown role is exit 2 naming it.
func TestStatusRole(t *testing.T) {
	c := healthyCloud(t)
	haltedRollout(c)
	c.publish()
	r := c.run("status", "--role", "db", "--role", "lb")
	mustCode(t, r, 0, "status --role db --role lb")
	if !strings.Contains(r.stdout, "healthy: db 3/3, lb 2/2\n") || strings.Contains(r.stdout, "web") {
		t.Fatalf("status --role db --role lb:\n%s", r.stdout)
	}
	r = c.run("status", "--role", "web,db", "--problems")
	mustCode(t, r, 1, "status --role web,db --problems")
	if !strings.Contains(r.stdout, "rollout halted") || strings.Contains(r.stdout, "db:") {
		t.Fatalf("status --role web,db --problems:\n%s", r.stdout)
	}
	mustCode(t, c.run("status", "--role", "db", "--problems"), 0, "status --role db --problems")
	for _, tc := range []struct{ role, want string }{
		{"nova", "status --role nova: no such role (known: db, lb, web)"},
		{"we b", "status --role"},
		{"", "status --role"},
	} {
		r := c.run("status", "--role", tc.role)
		mustCode(t, r, 2, "status --role "+tc.role)
		if !strings.Contains(r.stderr, tc.want) || r.stdout != "" {
			t.Errorf("status --role %q: stdout %q, stderr %q, want %q", tc.role, r.stdout, r.stderr, tc.want)
		}
	}
}

// --host is one host in detail: its states with detail and time, its
// checks, and what the reaper thinks of it.
func TestStatusHost(t *testing.T) {
	c := healthyCloud(t)
	partition(c)
	haltedRollout(c)
	c.publish()
	r := c.run("status", "--host", "web2")
	mustCode(t, r, 0, "status --host web2")
	golden(t, "host-web2", r.stdout)
	r = c.run("status", "--host", "web2", "--json")
	mustCode(t, r, 0, "status --host web2 --json")
	var d hostDetail
	if err := json.Unmarshal([]byte(r.stdout), &d); err != nil {
		t.Fatal(err)
	}
	if d.Schema != 1 || d.Role != "web" || d.Status[store.CategoryPuppet].State != store.StateFailed || len(d.Checks) != 1 || len(d.Reaper) == 0 {
		t.Fatalf("status --host web2 --json = %+v", d)
	}
	for _, args := range [][]string{{"--host", "web9"}, {"--host", "web 2"}, {"--host", "web2", "--role", "web"}} {
		r := c.run(append([]string{"status"}, args...)...)
		mustCode(t, r, 2, strings.Join(args, " "))
		if r.stdout != "" || !strings.Contains(r.stderr, "--host") {
			t.Errorf("status %v: stdout %q, stderr %q", args, r.stdout, r.stderr)
		}
	}
}

// --json is schema 1: every list [] and every map {} when empty, never
// null, in the raw bytes.
func TestStatusJSON(t *testing.T) {
	c := newStatusCloud(t)
	r := c.run("status", "--json")
	mustCode(t, r, 0, "status --json of an empty cloud")
	if strings.Contains(r.stdout, "null") {
		t.Fatalf("status --json has a null:\n%s", r.stdout)
	}
	for _, want := range []string{`"schema": 1`, `"roles": []`, `"alerts": []`, `"problems": []`, `"rollouts": []`, `"capacity": {}`, `"checks": []`} {
		if !strings.Contains(r.stdout, want) {
			t.Errorf("status --json lacks %s:\n%s", want, r.stdout)
		}
	}
	c = healthyCloud(t)
	capacityShortage(c)
	c.publish()
	r = c.run("status", "--json")
	mustCode(t, r, 0, "status --json")
	if strings.Contains(r.stdout, "null") {
		t.Fatalf("status --json has a null:\n%s", r.stdout)
	}
	var rep statusReport
	if err := json.Unmarshal([]byte(r.stdout), &rep); err != nil {
		t.Fatal(err)
	}
	if rep.Schema != 1 || rep.Datacenter != "dc1" || rep.CurrentVersion != "v42" || !rep.Time.Equal(statusNow) || rep.ProblemCount != 1 ||
		len(rep.Roles) != 3 || rep.Roles[0].Name != "db" || rep.Roles[0].State != roleProblem || rep.Roles[0].Capacity == nil ||
		rep.Roles[1].Name != "web" || rep.Roles[1].State != roleBusy || len(rep.Roles[1].InFlight) != 1 || rep.Roles[2].State != roleHealthy ||
		rep.Summary.Hosts != 9 || rep.Reaper.State == nil {
		t.Fatalf("status --json = %+v", rep)
	}
}

// Text from Consul reaches the terminal escaped, never raw, wherever the
// screen shows it; Consul unreachable is exit 3.
func TestStatusHostileAndUnreachable(t *testing.T) {
	c := healthyCloud(t)
	hostile := "boom\x1b]0;owned\x07\x1b[2J\r\n\u202e\u009b31m"
	c.report.Paused, c.report.PauseReason, c.report.Leader = true, hostile, "boot1"+hostile
	c.holdBack(reaperkv.PlanAction{Op: hostile, Role: "web", Host: "web2", Reason: hostile, Why: reaperkv.HoldWhy(hostile), WhyText: hostile}, "web: "+hostile)
	c.report.Actions = append(c.report.Actions, reaperkv.PlanAction{Op: "delete", Role: hostile, Host: hostile, Reason: hostile, Text: hostile})
	c.report.Errors = []string{hostile}
	c.status("db1", store.CategoryValidation, store.StateFailed, hostile)
	c.publish()
	for _, args := range [][]string{{"status"}, {"status", "--host", "db1"}, {"status", "--problems"}} {
		r := c.run(args...)
		if strings.ContainsAny(r.stdout, "\x1b\x07\r\u202e\u009b") || !strings.Contains(r.stdout, `\x1b[2J`) {
			t.Errorf("%v printed control characters raw, or not at all:\n%q", args, r.stdout)
		}
	}
	// A report the reaper did not write: the screen says so, exit 2
	// naming the key.
	if _, err := c.a.Client.KV().Put(&api.KVPair{Key: "orchestrate/reaper/state", Value: []byte("{\"roles\": 3}")}, nil); err != nil {
		t.Fatal(err)
	}
	r := c.run("status")
	mustCode(t, r, 2, "status with a report the reaper did not write")
	if !strings.Contains(r.stdout, "! reaper report unreadable: orchestrate/reaper/state holds a value the reaper\n") ||
		!strings.Contains(r.stdout, "healthy: db, lb, web") || !strings.Contains(r.stderr, "orchestrate/reaper/state") {
		t.Fatalf("status with a corrupt report:\nstdout %s\nstderr %s", r.stdout, r.stderr)
	}
	for _, args := range [][]string{{"status"}, {"reaper", "status"}} {
		r := c.run(args...)
		out := r.stdout + r.stderr
		if !strings.Contains(out, "orchestrate/reaper/state holds a value the reaper did not write: field roles: want a list, got a number") ||
			strings.Contains(out, "reaperkv") || strings.Contains(out, "[]") {
			t.Errorf("%v with a corrupt report does not say what is wrong in the value's terms:\n%s", args, out)
		}
	}
	t.Setenv("CONSUL_HTTP_ADDR", "127.0.0.1:1")
	var out, errb bytes.Buffer
	if code := Run(context.Background(), []string{"status"}, IO{Stdin: strings.NewReader(""), Stdout: &out, Stderr: &errb}); code != 3 {
		t.Fatalf("status with Consul unreachable: exit %d\n%s", code, errb.String())
	}
}

// The README and docs/orchestrate.md show the golden screens as they are.
func TestStatusDocsShowTheGoldens(t *testing.T) {
	for doc, screens := range map[string][]string{
		"../../README.md":           {"partition"},
		"../../docs/orchestrate.md": {"capacity", "host-web2"},
	} {
		text, err := os.ReadFile(doc)
		if err != nil {
			t.Fatal(err)
		}
		for _, name := range screens {
			g, err := os.ReadFile(filepath.Join("testdata", "status", name+".golden"))
			if err != nil {
				t.Fatal(err)
			}
			if !strings.Contains(string(text), "```\n"+string(g)+"```") {
				t.Errorf("%s does not show testdata/status/%s.golden as it is", doc, name)
			}
		}
	}
}

// A report from a reaper older than the actions list (no "actions" key)
// is not read for roles: its planned and held-back lines are shown under
// the reaper's line, with a note, and under no role.
func TestStatusOlderReaperReport(t *testing.T) {
	c := healthyCloud(t)
	partition(c)
	c.report.Planned = []string{"create web web4 (2 of desired 3)"}
	data, err := json.Marshal(c.report)
	if err != nil {
		t.Fatal(err)
	}
	var raw map[string]any
	if err := json.Unmarshal(data, &raw); err != nil {
		t.Fatal(err)
	}
	delete(raw, "actions")
	c.put(reaperkv.ReaperKey(schema.DefaultPrefix, reaperkv.ReaperStateKey), raw)
	r := c.run("status")
	mustCode(t, r, 0, "status with an older reaper's report")
	head, roles, _ := strings.Cut(r.stdout, "\n\n")
	for _, want := range []string{"\n  " + legacyPlanNote + "\n", "\n  next: create web web4 (2 of desired 3)\n",
		"\n  held back: db: replacement of db2 (unhealthy) waits: paused (+4 more:"} {
		if !strings.Contains(head, want) {
			t.Errorf("the reaper's part lacks %q:\n%s", want, r.stdout)
		}
	}
	if strings.Contains(roles, "held back") || strings.Contains(roles, "next:") {
		t.Errorf("an older report's lines are assigned to roles:\n%s", r.stdout)
	}
	r = c.run("status", "--json")
	if !strings.Contains(r.stdout, `"plan_by_role": false`) || !strings.Contains(r.stdout, `"actions": []`) {
		t.Errorf("status --json of an older report: want plan_by_role false and actions []:\n%s", r.stdout)
	}
	c.publish() // the same report from a reaper that writes its actions
	if r = c.run("status"); strings.Contains(r.stdout, legacyPlanNote) || !strings.Contains(r.stdout, "  held back: replace web2 (unhealthy) waits: paused") {
		t.Errorf("a current report is shown as an older one:\n%s", r.stdout)
	}
}

// Double-width characters (CJK, emoji) take two columns: a screen with
// them fits 80 columns as one without them does.
func TestStatusWideCharacters(t *testing.T) {
	wide := "数据库-🚀-ウェブ-サーバー"
	act := reaperkv.PlanAction{Op: "replace", Role: wide, Host: wide + "2", Reason: "unhealthy: " + wide + wide, Held: true,
		Why: reaperkv.HoldPaused, WhyText: "paused"}
	rv := newRoleView(wide + wide)
	rv.State, rv.Issues, rv.HeldBack, rv.Actions = roleProblem, []string{"serving 1 of 3 " + wide}, []string{planText(act)}, []reaperkv.PlanAction{act}
	rv.InFlight = []string{"replace " + wide + strings.Repeat("界", 60)}
	healthy := newRoleView(wide)
	healthy.State = roleHealthy
	rep := statusReport{Time: statusNow, Datacenter: wide, CurrentVersion: wide, Alerts: []string{strings.Repeat(wide, 8)},
		Roles: []roleView{rv, healthy, healthy, healthy, healthy, healthy}, Unassigned: newRoleView(""), Reaper: &reaperReport{}}
	var out bytes.Buffer
	writeScreen(&out, rep, statusOptions{}, 80)
	for i, line := range strings.Split(strings.TrimSuffix(out.String(), "\n"), "\n") {
		if n := cells(line); n > 80 {
			t.Errorf("line %d is %d columns wide: %q", i+1, n, line)
		}
	}
	if !strings.Contains(out.String(), wide) {
		t.Errorf("the wide name is not shown:\n%s", out.String())
	}
	for _, tc := range []struct {
		s    string
		want int
	}{{"web2", 4}, {"数据库", 6}, {"🚀", 2}, {"e\u0301", 1}, {"ｗｅｂ", 6}} {
		if got := cells(tc.s); got != tc.want {
			t.Errorf("cells(%q) = %d, want %d", tc.s, got, tc.want)
		}
	}
}
