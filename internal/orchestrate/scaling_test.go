package orchestrate

import (
	"context"
	"encoding/json"
	"fmt"
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
	"github.com/jiocloud/orchestrate/internal/testutil"
)

// putDrain writes a drain request as the reaper does, each for a new
// journal entry (the reaper's entry IDs never repeat).
func putDrain(t *testing.T, a *consultest.Agent, host string, deadline time.Time) {
	t.Helper()
	entry := fmt.Sprintf("web.%x.1", time.Now().UnixNano())
	data, _ := json.Marshal(schema.DrainRecord{Requested: time.Now().UTC(), Role: "web", Entry: entry, Reason: "surplus", Deadline: deadline})
	if _, err := a.Client.KV().Put(&api.KVPair{Key: store.DrainKey(schema.DefaultPrefix, host), Value: data}, nil); err != nil {
		t.Fatal(err)
	}
}

// putReport writes the reaper's state report as its leader does: role web
// with servers web1-web6 at a count of 4, one of them (web6) being
// replaced by an open operation.
func putReport(t *testing.T, a *consultest.Agent) {
	t.Helper()
	rep := reaperkv.ReaperReport{Time: time.Now().UTC(), Leader: "boot1", Interval: 10 * time.Second,
		Roles:   []reaperkv.RoleReport{{Name: "web", Desired: 4, Count: 6, Members: []string{"web1", "web2", "web3", "web4", "web5", "web6"}}},
		Journal: []reaperkv.JournalEntry{{ID: "web.e9", Kind: reaperkv.KindReplace, Role: "web", Phase: reaperkv.PhaseBooting, OldName: "web6", NewName: "web7"}}}
	data, _ := json.Marshal(rep)
	if _, err := a.Client.KV().Put(&api.KVPair{Key: reaperkv.ReaperKey(schema.DefaultPrefix, reaperkv.ReaperStateKey), Value: data}, nil); err != nil {
		t.Fatal(err)
	}
}

func drainOf(t *testing.T, a *consultest.Agent, host string) *schema.DrainRecord {
	t.Helper()
	d, _, err := mustStore(t, a).Drain(context.Background(), host)
	if err != nil {
		t.Fatal(err)
	}
	return d
}

// The scaling commands: what each writes, and bad input refused with exit
// 2 and nothing written.
func TestScalingCommands(t *testing.T) {
	a := consultest.Start(t, consultest.Options{NodeName: "web1"})
	st := mustStore(t, a)
	ctx := context.Background()

	// report-metric: the node's own key; the role from --role or the
	// environment.
	mustCode(t, cli(t, a, "", "report-metric", "load", "0.73", "--role", "web"), 0, "report-metric")
	t.Setenv("ORCHESTRATE_ROLE", "web")
	mustCode(t, cli(t, a, "", "report-metric", "queue", "12", "--host", "web2"), 0, "report-metric from the environment")
	snap, err := st.Snapshot(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if m := snap.Scaling.Metrics; m["web1"]["load"].Value != 0.73 || m["web1"]["load"].Role != "web" || m["web2"]["queue"].Value != 12 || m["web1"]["load"].Time.IsZero() {
		t.Fatalf("metrics %+v", m)
	}
	t.Setenv("ORCHESTRATE_ROLE", "")

	// scale: the count and the override; --auto removes the override.
	mustCode(t, cli(t, a, "", "scale", "web", "4", "--reason", "launch day"), 0, "scale")
	snap, _ = st.Snapshot(ctx)
	if snap.Desired["web"] != 4 || snap.Scaling.Overrides["web"].Count != 4 || snap.Scaling.Overrides["web"].Reason != "launch day" {
		t.Fatalf("after scale: desired %v, overrides %+v", snap.Desired, snap.Scaling.Overrides)
	}
	mustCode(t, cli(t, a, "", "scale", "web", "--auto"), 0, "scale --auto")
	snap, _ = st.Snapshot(ctx)
	if snap.Desired["web"] != 4 || len(snap.Scaling.Overrides) != 0 {
		t.Fatalf("after scale --auto: desired %v, overrides %+v", snap.Desired, snap.Scaling.Overrides)
	}

	// scale-in before the reaper wrote a report: the role's servers are
	// unknown, so nothing is written.
	before := strings.Join(allKeys(t, a.Client), " ")
	r := cli(t, a, "", "scale-in", "web", "web3")
	mustCode(t, r, 2, "scale-in with no reaper report")
	if !strings.Contains(r.stderr, "the reaper has written no report") {
		t.Fatalf("stderr: %s", r.stderr)
	}
	if after := strings.Join(allKeys(t, a.Client), " "); after != before {
		t.Fatalf("a refused scale-in wrote: %s -> %s", before, after)
	}
	putReport(t, a)
	putDrain(t, a, "web5", time.Now().Add(time.Hour))
	// A mistyped host, one being replaced, one asked to drain: each
	// refused by name, all or nothing (web3 alone would have been taken).
	before = strings.Join(allKeys(t, a.Client), " ")
	for _, tc := range []struct {
		hosts []string
		want  string
	}{
		{[]string{"web3", "nosuchhost"}, "nosuchhost is not a server of role web"},
		{[]string{"web6", "web3"}, "web6 is already leaving: the reaper's operation web.e9 (replace, booting)"},
		{[]string{"web3", "web5"}, "web5 is already leaving: asked to drain"},
		{[]string{"db1"}, "db1 is not a server of role web"},
	} {
		r := cli(t, a, "", append([]string{"scale-in", "web"}, tc.hosts...)...)
		if r.code != 2 || !strings.Contains(r.stderr, tc.want) || !strings.Contains(r.stderr, "nothing written") {
			t.Errorf("scale-in web %s: exit %d, stderr %q; want 2 naming %q", strings.Join(tc.hosts, " "), r.code, r.stderr, tc.want)
		}
	}
	if r := cli(t, a, "", "scale-in", "db", "db1"); r.code != 2 || !strings.Contains(r.stderr, "report has no role db (roles: web)") {
		t.Errorf("scale-in of a role the reaper does not know: exit %d, %s", r.code, r.stderr)
	}
	if after := strings.Join(allKeys(t, a.Client), " "); after != before {
		t.Fatalf("a refused scale-in wrote: %s -> %s", before, after)
	}
	if _, err := a.Client.KV().Delete(store.DrainKey(schema.DefaultPrefix, "web5"), nil); err != nil {
		t.Fatal(err)
	}

	// protect, and scale-in of a protected host refused.
	mustCode(t, cli(t, a, "", "protect", "web1", "--reason", "batch"), 0, "protect")
	before = strings.Join(allKeys(t, a.Client), " ")
	r = cli(t, a, "", "scale-in", "web", "web3", "web1")
	mustCode(t, r, 2, "scale-in of a protected host")
	if !strings.Contains(r.stderr, "web1 is protected") {
		t.Fatalf("stderr: %s", r.stderr)
	}
	if after := strings.Join(allKeys(t, a.Client), " "); after != before {
		t.Fatalf("a refused scale-in wrote: %s -> %s", before, after)
	}
	mustCode(t, cli(t, a, "", "unprotect", "web1"), 0, "unprotect")

	// scale-in: count lowered and the hosts named, in one go; the answer
	// says what changed.
	r = cli(t, a, "", "scale-in", "web", "web3", "web1")
	mustCode(t, r, 0, "scale-in")
	if !strings.Contains(r.stdout, "desired count of role web: 4 → 2 (the reaper drains and deletes web3, web1)") {
		t.Fatalf("stdout: %q", r.stdout)
	}
	snap, _ = st.Snapshot(ctx)
	if snap.Desired["web"] != 2 || len(snap.Scaling.ScaleIn["web"]) != 2 {
		t.Fatalf("after scale-in: desired %v, named %v", snap.Desired, snap.Scaling.ScaleIn)
	}
	// The status shows what the platform needs to see.
	putDrain(t, a, "web3", time.Now().Add(time.Hour))
	status := cli(t, a, "", "status", "--no-catalog").stdout
	for _, want := range []string{"named for scale-in: web1, web3", "draining web3 (surplus)", "no answer yet"} {
		if !strings.Contains(status, want) {
			t.Fatalf("status lacks %q:\n%s", want, status)
		}
	}

	// drained: answers once; the first answer stands.
	mustCode(t, cli(t, a, "", "drained", "web3", "--detail", "moved to web2"), 0, "drained")
	mustCode(t, cli(t, a, "", "drained", "web3", "--failed"), 0, "drained again")
	if d := drainOf(t, a, "web3"); d.Answer == nil || !d.Answer.Drained || d.Answer.Detail != "moved to web2" {
		t.Fatalf("drain record %+v", d)
	}
	r = cli(t, a, "", "drained", "web9")
	mustCode(t, r, 1, "drained without a request")
	if !strings.Contains(r.stderr, "no drain was requested for web9") {
		t.Fatalf("stderr: %s", r.stderr)
	}

	// Bad input: exit 2, named, nothing written.
	before = strings.Join(allKeys(t, a.Client), " ")
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"report-metric", "load", "NaN", "--role", "web"}, "not a finite number"},
		{[]string{"report-metric", "load", "+Inf", "--role", "web"}, "not a finite number"},
		{[]string{"report-metric", "load", "1e999", "--role", "web"}, `"1e999" is not a number`},
		{[]string{"report-metric", "--role", "web", "load", "--", "-0.5"}, "metric value -0.5 is negative"},
		{[]string{"report-metric", "--role", "web", "load", "--", "-Inf"}, "not a finite number"},
		{[]string{"report-metric", "load", "high", "--role", "web"}, `"high" is not a number`},
		{[]string{"report-metric", "load", "0.5"}, "--role (or $ORCHESTRATE_ROLE) is required"},
		{[]string{"report-metric", "a/b", "0.5", "--role", "web"}, "contains a slash"},
		{[]string{"report-metric", "load", "0.5", "--role", "%{lookup('x')}/x"}, "contains a slash"},
		{[]string{"scale", "web", "3", "--auto"}, "--auto takes no count"},
		{[]string{"scale", "web"}, "give a count"},
		{[]string{"scale", "web", "many"}, "not a non-negative integer"},
		{[]string{"scale", "web", "--", "-1"}, "not a non-negative integer"},
		{[]string{"scale-in", "web", "web5", "web5"}, "named twice"},
		{[]string{"scale-in", "web", "web2", "web4", "web5"}, "cannot leave it"},
		{[]string{"scale-in", "web", "web1"}, "already named"},
		{[]string{"protect", "a b"}, "white space"},
		{[]string{"drain"}, "--drain-cmd is required"},
		{[]string{"drained", "../web1"}, `drained: host "../web1"`},
		{[]string{"drained", "web 1"}, "white space"},
	} {
		r := cli(t, a, "", tc.args...)
		if r.code != 2 || !strings.Contains(r.stderr, tc.want) {
			t.Errorf("orchestrate %s: exit %d, stderr %q; want 2 naming %q", strings.Join(tc.args, " "), r.code, r.stderr, tc.want)
		}
	}
	if after := strings.Join(allKeys(t, a.Client), " "); after != before {
		t.Fatalf("bad input wrote: %s -> %s", before, after)
	}
}

// The node's drain handler runs the drain command once per request and
// answers: drained when it succeeded, failed (exit 1) when not; it does
// nothing when there is no request or it was answered.
func TestDrainHandler(t *testing.T) {
	a := consultest.Start(t, consultest.Options{NodeName: "web4"})
	dir := t.TempDir()
	log := filepath.Join(dir, "moved")
	lock := filepath.Join(dir, "drain.lock")
	cmd := "echo \"moved $ORCHESTRATE_HOST ($ORCHESTRATE_DRAIN_REASON)\" >> " + log + "; echo done; test -z \"$CONSUL_HTTP_TOKEN\""
	t.Setenv("CONSUL_HTTP_TOKEN", "must-not-reach-the-command")
	mustCode(t, cli(t, a, "", "drain", "--handler", "--drain-cmd", cmd, "--lock-file", lock), 0, "no request")
	if _, err := os.Stat(log); err == nil {
		t.Fatal("the drain command ran without a request")
	}
	putDrain(t, a, "web4", time.Now().Add(time.Hour))
	mustCode(t, cli(t, a, "", "drain", "--handler", "--drain-cmd", cmd, "--lock-file", lock), 0, "drain")
	d := drainOf(t, a, "web4")
	if d.Answer == nil || !d.Answer.Drained || d.Answer.Detail != "done" {
		t.Fatalf("answer %+v", d.Answer)
	}
	mustCode(t, cli(t, a, "", "drain", "--handler", "--drain-cmd", cmd, "--lock-file", lock), 0, "answered already")
	if data, _ := os.ReadFile(log); string(data) != "moved web4 (surplus)\n" {
		t.Fatalf("the drain command ran %q, want once", data)
	}
	// A failing command: answered failed, exit 1, with what it said.
	putDrain(t, a, "web4", time.Now().Add(time.Hour))
	r := cli(t, a, "", "drain", "--handler", "--drain-cmd", "echo no capacity elsewhere; exit 3", "--lock-file", lock)
	mustCode(t, r, 1, "a failing drain command")
	if d := drainOf(t, a, "web4"); d.Answer == nil || d.Answer.Drained || !strings.Contains(d.Answer.Detail, "--drain-cmd exited 3: no capacity elsewhere") {
		t.Fatalf("answer %+v", d.Answer)
	}
	// The reaper ends the drain (its deadline passed: an abort, or a
	// delete) while the command runs: the answer finds no request, and
	// the handler says so with exit 1.
	putDrain(t, a, "web4", time.Now().Add(time.Hour))
	started := filepath.Join(dir, "started")
	ended := make(chan struct{})
	defer close(ended)
	go func() {
		// Once the command runs, the reaper deletes the request under it.
		for {
			if _, err := os.Stat(started); err == nil {
				break
			}
			select {
			case <-ended:
				return
			case <-time.After(10 * time.Millisecond):
			}
		}
		a.Client.KV().Delete(store.DrainKey(schema.DefaultPrefix, "web4"), nil)
	}()
	r = cli(t, a, "", "drain", "--handler", "--drain-cmd", "touch "+started+"; sleep 2; echo moved", "--lock-file", lock)
	mustCode(t, r, 1, "a drain the reaper ended while its command ran")
	if !strings.Contains(r.stderr, "the reaper ended the drain of web4 before this answer (drained: true) could be recorded") {
		t.Fatalf("stderr %q", r.stderr)
	}
	// A command still running at the deadline is stopped and answered
	// failed: the reaper then ends the drain as the request says.
	putDrain(t, a, "web4", time.Now().Add(time.Second))
	start := time.Now()
	r = cli(t, a, "", "drain", "--handler", "--drain-cmd", "sleep 60", "--lock-file", lock)
	mustCode(t, r, 1, "a drain command past the deadline")
	if took := time.Since(start); took > 15*time.Second {
		t.Fatalf("the drain command ran %s past a deadline 1s away", took)
	}
}

// watch-config --drain-cmd: the agent runs the drain handler when the
// reaper writes the host's drain request, and the command runs once: the
// answer, in a key of its own beside the request, fires nothing, and any
// later run finds the request answered.
func TestDrainWatch(t *testing.T) {
	dir := t.TempDir()
	log := filepath.Join(dir, "moved")
	ws := generatedWatches(t, "--hiera-services", builtBinary(t, "hiera-services"), "--orchestrate", builtBinary(t, "orchestrate"),
		"--out", filepath.Join(dir, "services.yaml"), "--host", "web7", "--drain-cmd", "echo moved >> "+log)
	var drainWatch bool
	for _, w := range ws {
		if w.Type == "key" && w.Key == store.DrainKey(schema.DefaultPrefix, "web7") {
			drainWatch = true
		}
	}
	if !drainWatch {
		t.Fatalf("no key watch on the drain key: %+v", ws)
	}
	// The handler's lock file default is under /run/lock; the test's own.
	// The handler runs through a wrapper that records its starts and ends.
	runs := filepath.Join(dir, "runs")
	for i := range ws {
		if ws[i].Type == "key" && strings.HasSuffix(ws[i].Key, "/drain/web7") {
			ws[i].Args = append(ws[i].Args, "--lock-file", filepath.Join(dir, "drain.lock"))
			ws[i].Args[0] = startEndWrapper(t, dir, ws[i].Args[0], runs)
		}
	}
	a := consultest.Start(t, consultest.Options{NodeName: "web7", HCL: agentConfig(t, ws), HandlerEnv: true})
	agentLog := func() string { b, _ := os.ReadFile(a.LogPath); return string(b) }
	putDrain(t, a, "web7", time.Now().Add(time.Minute))
	testutil.Eventually(t, 20*time.Second, "the drain answered by the node's handler", func() bool {
		d := drainOf(t, a, "web7")
		return d != nil && d.Answer != nil && d.Answer.Drained
	}, agentLog)
	// The run that answered has ended, and any other with it; a later run
	// finds the request answered.
	testutil.Eventually(t, 20*time.Second, "every drain handler run ended", func() bool {
		data, _ := os.ReadFile(runs)
		return strings.Count(string(data), "start\n") == strings.Count(string(data), "end\n")
	}, agentLog)
	if data, _ := os.ReadFile(log); string(data) != "moved\n" {
		t.Fatalf("the drain command ran %q, want once", data)
	}
}

// startEndWrapper writes a script that runs bin with its arguments and
// appends "start" to runs before, "end" after: the test can tell whether
// a run is under way.
func startEndWrapper(t *testing.T, dir, bin, runs string) string {
	t.Helper()
	w := filepath.Join(dir, filepath.Base(bin)+"-start-end")
	script := "#!/bin/sh\necho start >> " + runs + "\n" + bin + " \"$@\"\nrc=$?\necho end >> " + runs + "\nexit $rc\n"
	if err := os.WriteFile(w, []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	return w
}

// A count outside an autoscaled role's min and max (a typo: 40 for 4) is
// refused without --force, and nothing is written.
func TestScaleOutsideAutoscaleNeedsForce(t *testing.T) {
	a := consultest.Start(t, consultest.Options{})
	rep := reaperkv.ReaperReport{Time: time.Now().UTC(), Interval: 10 * time.Second,
		Roles: []reaperkv.RoleReport{{Name: "web", Desired: 4, Autoscale: &reaperkv.AutoscaleReport{Min: 2, Max: 12}}, {Name: "db", Desired: 3}}}
	data, _ := json.Marshal(rep)
	if _, err := a.Client.KV().Put(&api.KVPair{Key: reaperkv.ReaperKey(schema.DefaultPrefix, reaperkv.ReaperStateKey), Value: data}, nil); err != nil {
		t.Fatal(err)
	}
	before := strings.Join(allKeys(t, a.Client), " ")
	for _, n := range []string{"40", "1", "2147483647"} {
		r := cli(t, a, "", "scale", "web", n)
		if r.code != 2 || !strings.Contains(r.stderr, "autoscaled between 2 and 12") || !strings.Contains(r.stderr, "--force") {
			t.Errorf("scale web %s: exit %d, %s", n, r.code, r.stderr)
		}
	}
	if after := strings.Join(allKeys(t, a.Client), " "); after != before {
		t.Fatalf("a refused scale wrote: %s -> %s", before, after)
	}
	r := cli(t, a, "", "scale", "web", "12")
	mustCode(t, r, 0, "scale within bounds")
	if r.stdout != "desired count of role web: none (the reaper's configured 4) → 12 (set by hand; was autoscaled)\n" {
		t.Errorf("stdout %q", r.stdout)
	}
	mustCode(t, cli(t, a, "", "scale", "web", "40", "--force", "--reason", "load test"), 0, "scale --force")
	mustCode(t, cli(t, a, "", "scale", "db", "40"), 0, "scale of a role that is not autoscaled")
}
