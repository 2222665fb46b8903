package orchestrate

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/hashicorp/consul/api"

	"github.com/jiocloud/orchestrate/internal/consultest"
	"github.com/jiocloud/orchestrate/internal/rollout"
	"github.com/jiocloud/orchestrate/internal/store"
	"github.com/jiocloud/orchestrate/internal/testutil"
	"github.com/jiocloud/orchestrate/watch"
)

// mostAtOnce is the largest number of hosts in their consistent step for
// version at the same time.
func mostAtOnce(evs []rolloutEvent, version string) int {
	var mine []rolloutEvent
	for _, e := range evs {
		if e.version == version {
			mine = append(mine, e)
		}
	}
	sort.SliceStable(mine, func(i, j int) bool {
		if mine[i].at.Equal(mine[j].at) {
			return mine[i].kind == "end" // an end and a start at once: not overlapping
		}
		return mine[i].at.Before(mine[j].at)
	})
	n, most := 0, 0
	for _, e := range mine {
		if e.kind == "start" {
			n++
		} else {
			n--
		}
		most = max(most, n)
	}
	return most
}

// rolloutNodeWatches are the watches watch-config generates for one host
// of role, its consistent step the stand-in script. All hosts share one
// agent: each has its own --host, lock, log directory and services.yaml.
func rolloutNodeWatches(t *testing.T, dir, role, host string) []watch.Watch {
	t.Helper()
	script, _ := filepath.Abs("testdata/rollout/consistent.sh")
	hd := filepath.Join(dir, host)
	out := filepath.Join(hd, "services.yaml")
	return generatedWatches(t, "--hiera-services", builtBinary(t, "hiera-services"), "--orchestrate", builtBinary(t, "orchestrate"),
		"--out", out, "--consistent-cmd", script+" "+host, "--role", role,
		"--converge-arg=--host="+host, "--converge-arg=--log-dir="+filepath.Join(hd, "log"),
		"--converge-arg=--lock-file="+filepath.Join(hd, "converge.lock"), "--converge-arg=--hiera-data="+out,
		"--converge-arg=--no-checks", "--converge-arg=--slot-ttl=10s")
}

// startRolloutAgent starts one agent with the generated watches of every
// host of roles (role → hosts); the stand-in step's files are in
// dir/steps, each host's in dir/<host>.
func startRolloutAgent(t *testing.T, roles map[string][]string) (a *consultest.Agent, dir string) {
	t.Helper()
	dir = t.TempDir()
	stepDir := filepath.Join(dir, "steps")
	if err := os.MkdirAll(stepDir, 0o755); err != nil {
		t.Fatal(err)
	}
	var ws []watch.Watch
	for role, hosts := range roles {
		for _, h := range hosts {
			ws = append(ws, rolloutNodeWatches(t, dir, role, h)...)
		}
	}
	a = consultest.Start(t, consultest.Options{NodeName: "rollout-node", HCL: agentConfig(t, ws), HandlerEnv: true, Env: []string{"STEP_DIR=" + stepDir}})
	return a, dir
}

func touch(t *testing.T, path, content string) {
	t.Helper()
	if err := os.WriteFile(path, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
}

// TestRolloutThroughGeneratedWatches: six hosts of a role converge through
// the watches watch-config generates, on a real agent, each deciding for
// itself. With --max-unavailable 2 never more than two are in their
// consistent step at once (and two are, so the bound is what held them);
// with three failures and --max-failures 2 the rollout halts with three
// failed and no host starting after, until `rollout resume`, after which
// the rest converge and the failed ones are not rebuilt by the rollout
// watch; a host killed while holding the only slot frees it when its
// session expires.
func TestRolloutThroughGeneratedWatches(t *testing.T) {
	hosts := []string{"web1", "web2", "web3", "web4", "web5", "web6"}
	a, dir := startRolloutAgent(t, map[string][]string{"web": hosts})
	stepDir := filepath.Join(dir, "steps")
	events := filepath.Join(stepDir, "events")
	agentLog := func() string { log, _ := os.ReadFile(a.LogPath); return tailString(string(log), 4000) }
	st := mustStore(t, a)
	ctx := context.Background()
	onVersion := func(version string, hs ...string) bool {
		return cli(t, a, "", append([]string{"verify-hosts", version}, hs...)...).code == 0
	}

	// 0. New hosts (no version yet) serve nothing: the bound does not
	// hold them back.
	mustCode(t, cli(t, a, "", "rollout", "web", "--max-unavailable", "2"), 0, "rollout web --max-unavailable 2")
	mustCode(t, cli(t, a, "", "trigger-update", "v1"), 0, "trigger-update v1")
	testutil.Eventually(t, 60*time.Second, "all six new hosts on v1", func() bool { return onVersion("v1", hosts...) }, agentLog)
	if most := mostAtOnce(readEvents(t, events), "v1"); most < 3 {
		t.Fatalf("new hosts were bounded by --max-unavailable 2: at most %d built at once", most)
	}

	// 1. Two at a time.
	mustCode(t, cli(t, a, "", "trigger-update", "v2"), 0, "trigger-update v2")
	sawSlots := false
	testutil.Eventually(t, 60*time.Second, "all six hosts on v2", func() bool {
		if s := cli(t, a, "", "status", "--no-catalog").stdout; strings.Contains(s, "slots in use 2/2") {
			sawSlots = true
		}
		return onVersion("v2", hosts...)
	}, agentLog)
	evs := readEvents(t, events)
	if most := mostAtOnce(evs, "v2"); most != 2 {
		t.Fatalf("at most %d hosts were in their consistent step at once, want 2 (the bound, reached)\n%v", most, evs)
	}
	for _, h := range hosts {
		if n := started(evs, "v2")[h]; n != 1 {
			t.Fatalf("%s ran its consistent step %d times for v2, want 1", h, n)
		}
	}
	if !sawSlots {
		t.Error("status never showed the two slots in use")
	}

	// 2. Three failures with --max-failures 2: halted. web1-3 fail; so
	// that they go first, web4-6's converges are held behind their own
	// converge locks until the halt (a converge waits for the lock).
	mustCode(t, cli(t, a, "", "rollout", "web", "--max-failures", "2"), 0, "rollout web --max-failures 2")
	for _, h := range []string{"web1", "web2", "web3"} {
		touch(t, filepath.Join(stepDir, h+".fail"), "")
	}
	var unlocks []func()
	for _, h := range []string{"web4", "web5", "web6"} {
		// A handler fired by the last change may hold it for a moment.
		lctx, cancel := context.WithTimeout(ctx, 30*time.Second)
		unlock, err := watch.Lock(lctx, filepath.Join(dir, h, "converge.lock"), true)
		cancel()
		if err != nil {
			t.Fatal(err)
		}
		unlocks = append(unlocks, unlock)
	}
	mustCode(t, cli(t, a, "", "trigger-update", "v3"), 0, "trigger-update v3")
	var r *store.Rollout
	testutil.Eventually(t, 60*time.Second, "the rollout of v3 halted, no slot in use", func() bool {
		var err error
		r, err = st.Rollout(ctx, "web")
		return err == nil && rollout.Halted(r, "v3") != "" && len(r.Slots) == 0
	}, agentLog)
	if got := strings.Join(r.Failed("v3"), ","); got != "web1,web2,web3" {
		t.Fatalf("failed v3: %s, want web1,web2,web3", got)
	}
	for _, unlock := range unlocks {
		unlock()
	}
	testutil.Eventually(t, 30*time.Second, "web4-6 waiting on the halt", func() bool {
		snap, err := st.Snapshot(ctx)
		if err != nil {
			return false
		}
		for _, h := range []string{"web4", "web5", "web6"} {
			if p := snap.Hosts[h].Status[store.CategoryPuppet]; !p.Waiting || p.Version != "v3" {
				return false
			}
		}
		return true
	}, agentLog)
	before := started(readEvents(t, events), "v3")
	// Every change of the rollout woke every host; give stragglers time.
	time.Sleep(3 * time.Second)
	after := started(readEvents(t, events), "v3")
	if fmt.Sprint(before) != fmt.Sprint(after) {
		t.Fatalf("hosts started after the halt: %v, then %v", before, after)
	}
	var untouched []string
	for _, h := range hosts {
		if after[h] == 0 {
			untouched = append(untouched, h)
		}
	}
	if strings.Join(untouched, ",") != "web4,web5,web6" {
		t.Fatalf("untouched after the halt: %v, want web4-6 (started: %v)", untouched, after)
	}
	snap, err := st.Snapshot(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for _, h := range untouched {
		hs := snap.Hosts[h]
		p := hs.Status[store.CategoryPuppet]
		if hs.Version != "v2" || p.State != store.StatePending || !p.Waiting || !strings.Contains(p.Detail, "halted") {
			t.Fatalf("untouched %s: version %s, puppet %+v; want v2, pending, waiting on the halt", h, hs.Version, p)
		}
	}
	status := cli(t, a, "", "status", "--no-catalog")
	if !strings.Contains(status.stdout, "HALTED: 3 hosts failed v3 (web1, web2, web3)") {
		t.Fatalf("status does not show the halt:\n%s", status.stdout)
	}
	res := cli(t, a, "", "rollout", "resume", "web")
	mustCode(t, res, 0, "rollout resume web")
	if !strings.Contains(res.stdout, "failures forgiven: web1, web2, web3") {
		t.Fatalf("resume said: %s", res.stdout)
	}
	testutil.Eventually(t, 60*time.Second, "web4-6 on v3 after the resume", func() bool {
		return onVersion("v3", "web4", "web5", "web6")
	}, agentLog)
	// The failed hosts' builds are not re-run by the rollout's changes.
	time.Sleep(time.Second)
	for h, n := range started(readEvents(t, events), "v3") {
		if n != 1 {
			t.Fatalf("%s ran its consistent step %d times for v3, want 1", h, n)
		}
	}

	// 3. A holder killed in its consistent step frees the only slot when
	// its session expires (TTL 10 s: within 10-20 s).
	for _, h := range hosts {
		_ = os.Remove(filepath.Join(stepDir, h+".fail"))
		_ = os.Remove(filepath.Join(stepDir, h+".sleep"))
	}
	touch(t, filepath.Join(stepDir, "web1.sleep"), "600")
	mustCode(t, cli(t, a, "", "rollout", "web", "--max-unavailable", "1", "--max-failures", "none"), 0, "rollout web --max-unavailable 1")
	mustCode(t, cli(t, a, "", "trigger-update", "v4"), 0, "trigger-update v4")
	testutil.Eventually(t, 60*time.Second, "web1 in its consistent step for v4", func() bool {
		return started(readEvents(t, events), "v4")["web1"] == 1
	}, agentLog)
	killed := killConverge(t, filepath.Join(stepDir, "web1.pids"))
	killedAt := time.Now()
	took := testutil.Eventually(t, 40*time.Second, "another host starts once web1's slot is freed", func() bool {
		r, err := st.Rollout(ctx, "web")
		return err == nil && !contains(r.Holders(), "web1")
	}, agentLog)
	if took < 9*time.Second || took > 25*time.Second {
		t.Fatalf("web1's slot was freed %s after its converge (pid %d) was killed, want within one to two session TTLs (10-20 s)", took, killed)
	}
	t.Logf("slot of a killed holder freed after %s (session TTL 10s)", took.Round(100*time.Millisecond))
	others := []string{"web2", "web3", "web4", "web5", "web6"}
	testutil.Eventually(t, 60*time.Second, "the other hosts on v4", func() bool { return onVersion("v4", others...) }, agentLog)
	// While web1 held the slot, nobody else started; the others went one
	// at a time.
	var web1Start time.Time
	var rest []rolloutEvent
	for _, e := range readEvents(t, events) {
		switch {
		case e.version != "v4":
		case e.host == "web1":
			web1Start = e.at
		default:
			rest = append(rest, e)
		}
	}
	for _, e := range rest {
		if e.kind == "start" && e.at.After(web1Start) && e.at.Before(killedAt.Add(9*time.Second)) {
			t.Fatalf("%s started at %s while the killed web1 still held the only slot", e.host, e.at.Format(time.StampMicro))
		}
	}
	if most := mostAtOnce(rest, "v4"); most != 1 {
		t.Fatalf("with --max-unavailable 1, %d hosts were in their consistent step at once", most)
	}
}

func contains(xs []string, x string) bool {
	for _, v := range xs {
		if v == x {
			return true
		}
	}
	return false
}

// killConverge kills, with SIGKILL, the converge that runs the stand-in
// step whose PIDs are in pidsFile, and the step's process group: a node's
// converge dying mid-step. It returns the converge's PID.
func killConverge(t *testing.T, pidsFile string) int {
	t.Helper()
	data, err := os.ReadFile(pidsFile)
	if err != nil {
		t.Fatal(err)
	}
	var step, parent int
	if _, err := fmt.Sscan(string(data), &step, &parent); err != nil {
		t.Fatalf("%s: %v", pidsFile, err)
	}
	// The step runs under /bin/sh -c, which may or may not have exec'd it.
	for i := 0; i < 3; i++ {
		comm, _ := os.ReadFile(fmt.Sprintf("/proc/%d/comm", parent))
		if strings.TrimSpace(string(comm)) == "orchestrate" {
			break
		}
		stat, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", parent))
		if err != nil {
			t.Fatal(err)
		}
		fs := strings.Fields(string(stat[strings.LastIndexByte(string(stat), ')')+1:]))
		parent, _ = strconv.Atoi(fs[1])
	}
	if comm, _ := os.ReadFile(fmt.Sprintf("/proc/%d/comm", parent)); strings.TrimSpace(string(comm)) != "orchestrate" {
		t.Fatalf("no orchestrate converge above step %d (found %d %q)", step, parent, comm)
	}
	pgid, err := syscall.Getpgid(step)
	if err != nil {
		t.Fatal(err)
	}
	if err := syscall.Kill(parent, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	_ = syscall.Kill(-pgid, syscall.SIGKILL)
	return parent
}

// TestRolloutAfterRole: role b rolls out after role a (--after a:2): no
// host of b starts its consistent step before two hosts of a report the
// version, and then b goes on by itself, woken by a's progress.
func TestRolloutAfterRole(t *testing.T) {
	a, dir := startRolloutAgent(t, map[string][]string{"a": {"a1", "a2", "a3"}, "b": {"b1", "b2"}})
	stepDir := filepath.Join(dir, "steps")
	agentLog := func() string { log, _ := os.ReadFile(a.LogPath); return tailString(string(log), 4000) }
	touch(t, filepath.Join(stepDir, "sleep"), "0.5")
	mustCode(t, cli(t, a, "", "rollout", "a", "--max-unavailable", "1"), 0, "rollout a")
	mustCode(t, cli(t, a, "", "rollout", "b", "--after", "a:2"), 0, "rollout b --after a:2")
	mustCode(t, cli(t, a, "", "trigger-update", "v2"), 0, "trigger-update v2")
	testutil.Eventually(t, 60*time.Second, "all five hosts on v2", func() bool {
		return cli(t, a, "", "verify-hosts", "v2", "a1", "a2", "a3", "b1", "b2").code == 0
	}, agentLog)
	snap, err := mustStore(t, a).Snapshot(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	var aDone []time.Time
	for _, h := range []string{"a1", "a2", "a3"} {
		aDone = append(aDone, snap.Hosts[h].VersionTime)
	}
	sort.Slice(aDone, func(i, j int) bool { return aDone[i].Before(aDone[j]) })
	for _, e := range readEvents(t, filepath.Join(stepDir, "events")) {
		if e.kind == "start" && strings.HasPrefix(e.host, "b") && e.at.Before(aDone[1]) {
			t.Fatalf("%s started at %s, before the second host of a reported v2 at %s", e.host, e.at.Format(time.StampMicro), aDone[1].Format(time.StampMicro))
		}
	}
}

// TestRolloutCommand: the policy is set flag by flag (flags not given keep
// their value), the --after role's follower mark moves with it, and bad
// input exits 2 naming what is wrong and writes nothing.
func TestRolloutCommand(t *testing.T) {
	a := consultest.Start(t, consultest.Options{})
	mustCode(t, cli(t, a, "", "trigger-update", "v2"), 0, "trigger-update")
	r := cli(t, a, "", "rollout", "web", "--max-unavailable", "2", "--max-failures", "1", "--after", "db:3")
	mustCode(t, r, 0, "rollout web")
	if !strings.Contains(r.stdout, "rollout of web to v2 (max-unavailable 2, max-failures 1, after db:3): slots in use 0/2") {
		t.Fatalf("rollout printed %q", r.stdout)
	}
	mustCode(t, cli(t, a, "", "rollout", "web", "--max-failures", "none"), 0, "rollout web --max-failures none")
	r = cli(t, a, "", "rollout", "web", "--json")
	mustCode(t, r, 0, "rollout web --json")
	if !strings.Contains(r.stdout, `"policy": "max-unavailable 2, max-failures none, after db:3"`) {
		t.Fatalf("rollout --json: %s", r.stdout)
	}
	keys := strings.Join(allKeys(t, a.Client), " ")
	if !strings.Contains(keys, "orchestrate/rollout/db/followers/web") {
		t.Fatalf("no follower mark under db: %s", keys)
	}
	mustCode(t, cli(t, a, "", "rollout", "web", "--after", "lb"), 0, "rollout web --after lb")
	keys = strings.Join(allKeys(t, a.Client), " ")
	if strings.Contains(keys, "rollout/db/followers/web") || !strings.Contains(keys, "rollout/lb/followers/web") {
		t.Fatalf("the follower mark did not move from db to lb: %s", keys)
	}
	r = cli(t, a, "", "rollout", "resume", "web")
	mustCode(t, r, 0, "rollout resume web, not halted")
	if !strings.Contains(r.stdout, "not halted") {
		t.Fatalf("resume of a rollout that is not halted said %q", r.stdout)
	}

	before := allKeys(t, a.Client)
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"rollout"}, "got 0 arguments"},
		{[]string{"rollout", "a", "b"}, "usage"},
		{[]string{"rollout", "resume"}, "orchestrate rollout resume ROLE"},
		{[]string{"rollout", "resume", "web", "--max-failures", "1"}, "takes no policy flags"},
		{[]string{"rollout", "web", "--max-unavailable", "0"}, "--max-unavailable \"0\": want a count of at least 1, or all"},
		{[]string{"rollout", "web", "--max-unavailable", "two"}, "--max-unavailable \"two\""},
		{[]string{"rollout", "web", "--max-failures", "-1"}, "--max-failures \"-1\""},
		{[]string{"rollout", "web", "--after", "web"}, "role web cannot roll out after itself"},
		{[]string{"rollout", "lb", "--after", "web"}, "makes a circle: lb after web after lb"},
		{[]string{"rollout", "web", "--after", "db:0"}, "the count after the colon must be at least 1"},
		{[]string{"rollout", "web", "--after", "d b"}, "white space"},
		{[]string{"rollout", "a/b", "--max-unavailable", "1"}, "contains a slash"},
		{[]string{"converge", "--host", "h1", "--consistent-cmd", "true", "--slot-wake"}, "--slot-wake needs --role"},
		{[]string{"converge", "--host", "h1", "--consistent-cmd", "true", "--role", "web", "--slot-ttl", "5s"}, "--slot-ttl 5s"},
	} {
		r := cli(t, a, "", tc.args...)
		mustCode(t, r, 2, strings.Join(tc.args, " "))
		if !strings.Contains(r.stderr, tc.want) {
			t.Errorf("%v: stderr %q does not name %q", tc.args, r.stderr, tc.want)
		}
	}
	if after := allKeys(t, a.Client); fmt.Sprint(after) != fmt.Sprint(before) {
		t.Fatalf("bad input wrote keys: %v, then %v", before, after)
	}

	// A value written by hand is named, with exit 2.
	if _, err := a.Client.KV().Put(&api.KVPair{Key: "orchestrate/rollout/web/hosts/web1", Value: []byte("{")}, nil); err != nil {
		t.Fatal(err)
	}
	for _, args := range [][]string{{"rollout", "web"}, {"status", "--no-catalog"}} {
		r = cli(t, a, "", args...)
		mustCode(t, r, 2, strings.Join(args, " ")+" with a corrupt rollout record")
		if !strings.Contains(r.stderr, "orchestrate/rollout/web/hosts/web1") {
			t.Fatalf("%v did not name the corrupt key: %s", args, r.stderr)
		}
	}
}

// TestConvergeWaitsForASlot: a host whose role's only slot is taken
// records that it waits (pending, not a failure, no step run), exits 0 as
// a handler and 1 otherwise, and runs once the slot is given back; the
// rollout watch's --slot-wake does nothing for a host that is not waiting.
func TestConvergeWaitsForASlot(t *testing.T) {
	e := newConvergeEnv(t)
	a := e.a
	mustCode(t, cli(t, a, "", "trigger-update", "v1"), 0, "trigger")
	mustCode(t, cli(t, a, "", "report-version", "--host", "node1", "v1"), 0, "report")
	mustCode(t, cli(t, a, "", "rollout", "web", "--max-unavailable", "1"), 0, "rollout")
	mustCode(t, cli(t, a, "", "trigger-update", "v2"), 0, "trigger")
	mustCode(t, e.converge(t, "--role", "web", "--slot-wake", "--handler"), 0, "slot-wake, not waiting")
	if ran := e.ran(t); len(ran) != 0 {
		t.Fatalf("--slot-wake ran steps of a host not waiting: %v", ran)
	}
	// Another host holds the only slot.
	st := mustStore(t, a)
	slots := rollout.New(st, a.Client.Session(), slog.New(slog.NewTextHandler(io.Discard, nil)))
	other, _, err := slots.Acquire(context.Background(), "web", "other", "v2", false)
	if err != nil || other == nil {
		t.Fatalf("no slot for the other host: %v", err)
	}
	r := e.converge(t, "--role", "web", "--handler")
	mustCode(t, r, 0, "handler converge waiting for a slot")
	if !strings.Contains(r.stdout, "waiting for a rollout slot") {
		t.Fatalf("converge said %q", r.stdout)
	}
	mustCode(t, e.converge(t, "--role", "web"), 1, "interactive converge waiting for a slot")
	if ran := e.ran(t); len(ran) != 0 {
		t.Fatalf("steps ran without a slot: %v", ran)
	}
	snap, err := st.Snapshot(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if p := snap.Hosts["node1"].Status[store.CategoryPuppet]; p.State != store.StatePending || !p.Waiting || !strings.Contains(p.Detail, "1 at a time") {
		t.Fatalf("puppet status while waiting: %+v", p)
	}
	if err := other.Release(context.Background(), store.RolloutDone, ""); err != nil {
		t.Fatal(err)
	}
	mustCode(t, e.converge(t, "--role", "web", "--slot-wake", "--handler"), 0, "slot-wake after the slot was given back")
	if cli(t, a, "", "verify-hosts", "v2", "node1").code != 0 {
		t.Fatalf("node1 not on v2 after the slot freed; ran %v", e.ran(t))
	}
	r2, err := st.Rollout(context.Background(), "web")
	if err != nil || r2.Hosts["node1"].State != store.RolloutDone || len(r2.Slots) != 0 {
		t.Fatalf("rollout after node1 converged: %+v %v", r2, err)
	}
}

// An upgrade in the middle of a rollout: while a slot of the older layout
// (rollout/<role>/slot/<session>) is held, converge grants no slot and
// says so in the host's waiting record, and `orchestrate rollout` says
// what to do; once it is given back the host converges. An older halt
// holds until `rollout resume`.
func TestConvergeWaitsForOlderLayoutSlots(t *testing.T) {
	e := newConvergeEnv(t)
	a := e.a
	mustCode(t, cli(t, a, "", "trigger-update", "v1"), 0, "trigger")
	mustCode(t, cli(t, a, "", "report-version", "--host", "node1", "v1"), 0, "report")
	mustCode(t, cli(t, a, "", "trigger-update", "v2"), 0, "trigger")
	id, _, err := a.Client.Session().CreateNoChecks(&api.SessionEntry{TTL: "60s", Behavior: api.SessionBehaviorDelete}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if ok, _, err := a.Client.KV().Acquire(&api.KVPair{Key: "orchestrate/rollout/web/slot/" + id, Session: id,
		Value: []byte(`{"host":"web7","version":"v2","time":"2026-11-20T10:00:00Z"}`)}, nil); err != nil || !ok {
		t.Fatalf("an older slot: %v %v", ok, err)
	}
	r := e.converge(t, "--role", "web", "--handler")
	mustCode(t, r, 0, "converge with an older slot held")
	if ran := e.ran(t); len(ran) != 0 {
		t.Fatalf("steps ran while an older slot was held: %v", ran)
	}
	snap, err := mustStore(t, a).Snapshot(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if p := snap.Hosts["node1"].Status[store.CategoryPuppet]; !p.Waiting || !strings.Contains(p.Detail, "started by an older orchestrate is in progress") {
		t.Fatalf("node1's waiting record: %+v", p)
	}
	r = cli(t, a, "", "rollout", "web")
	mustCode(t, r, 0, "rollout web")
	if !strings.Contains(r.stdout, "slots in use 1/all (web7)") || !strings.Contains(r.stdout, "no slot is granted: a rollout of web started by an older orchestrate") ||
		!strings.Contains(r.stdout, "consul session destroy SESSION") || !strings.Contains(r.stdout, id) {
		t.Fatalf("rollout web with an older slot held:\n%s", r.stdout)
	}
	if _, err := a.Client.Session().Destroy(id, nil); err != nil {
		t.Fatal(err)
	}
	// An older halt of v2: holds until resumed.
	if _, err := a.Client.KV().Put(&api.KVPair{Key: "orchestrate/rollout/web/state",
		Value: []byte(`{"seq":3,"halted":{"version":"v2","reason":"2 hosts failed v2 (web7, web8), more than max_failures 1","time":"2026-11-20T10:00:00Z"}}`)}, nil); err != nil {
		t.Fatal(err)
	}
	mustCode(t, e.converge(t, "--role", "web", "--slot-wake", "--handler"), 0, "slot-wake under an older halt")
	if ran := e.ran(t); len(ran) != 0 {
		t.Fatalf("steps ran under an older halt: %v", ran)
	}
	t.Setenv("COLUMNS", "200") // the reason on one line
	if r = cli(t, a, "", "status", "--no-catalog"); !strings.Contains(r.stdout, "HALTED: 2 hosts failed v2 (web7, web8), more than max_failures 1 (halted by an older orchestrate)") {
		t.Fatalf("status under an older halt:\n%s", r.stdout)
	}
	mustCode(t, cli(t, a, "", "rollout", "resume", "web"), 0, "rollout resume web")
	mustCode(t, e.converge(t, "--role", "web", "--slot-wake", "--handler"), 0, "slot-wake after the resume")
	if cli(t, a, "", "verify-hosts", "v2", "node1").code != 0 {
		t.Fatalf("node1 not on v2 after the older slot went and the resume; ran %v", e.ran(t))
	}
	keys := strings.Join(allKeys(t, a.Client), " ")
	if strings.Contains(keys, "rollout/web/state") || !strings.Contains(keys, "rollout/web/resume") {
		t.Fatalf("keys after the resume: %s", keys)
	}
}
