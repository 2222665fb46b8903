package rollout

import (
	"context"
	"io"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hashicorp/consul/api"

	"github.com/jiocloud/orchestrate/internal/consultest"
	"github.com/jiocloud/orchestrate/internal/store"
	"github.com/jiocloud/orchestrate/internal/testutil"
)

func intp(n int) *int { return &n }

func TestDecide(t *testing.T) {
	// Claims in line: the n-th host's claim was created at index 10*n.
	slots := func(hosts ...string) []store.RolloutSlot {
		var out []store.RolloutSlot
		for i, h := range hosts {
			out = append(out, store.RolloutSlot{Host: h, Session: "s-" + h, CreateIndex: uint64(10 * (i + 1))})
		}
		return out
	}
	// Failure records written at index 5.
	failed := func(version string, hosts ...string) map[string]store.RolloutHost {
		out := map[string]store.RolloutHost{}
		for _, h := range hosts {
			out[h] = store.RolloutHost{Version: version, State: store.RolloutFailed, Index: 5}
		}
		return out
	}
	resume := func(version string, hosts ...string) *store.RolloutResume {
		return &store.RolloutResume{Version: version, Forgiven: hosts}
	}
	oldHalt := &store.RolloutState{Halted: &store.RolloutHalt{Version: "v2", Reason: "too many"}}
	cases := []struct {
		name    string
		r       store.Rollout
		after   After
		fresh   bool
		claim   uint64 // the host's claim; 0 before claiming
		granted bool
		halt    bool
		reason  string
	}{
		{name: "no policy: no bound", r: store.Rollout{Slots: slots("a", "b", "c")}, granted: true},
		{name: "a free slot", r: store.Rollout{Policy: store.RolloutPolicy{MaxUnavailable: 2}, Slots: slots("a")}, granted: true},
		{name: "every slot in use", r: store.Rollout{Policy: store.RolloutPolicy{MaxUnavailable: 2}, Slots: slots("a", "b")}, reason: "2 at a time"},
		{name: "claims ahead in line take the slots", r: store.Rollout{Policy: store.RolloutPolicy{MaxUnavailable: 2}, Slots: slots("a", "b", "x")}, claim: 30, reason: "2 at a time"},
		{name: "claims behind in line do not count", r: store.Rollout{Policy: store.RolloutPolicy{MaxUnavailable: 2}, Slots: slots("a", "x", "b", "c")}, claim: 20, granted: true},
		{name: "the host's own claim does not count", r: store.Rollout{Policy: store.RolloutPolicy{MaxUnavailable: 1}, Slots: slots("x")}, claim: 10, granted: true},
		{name: "a fresh host is not bounded", r: store.Rollout{Policy: store.RolloutPolicy{MaxUnavailable: 2}, Slots: slots("a", "b")}, fresh: true, granted: true},
		{name: "fresh holders do not count", r: store.Rollout{Policy: store.RolloutPolicy{MaxUnavailable: 2}, Slots: append(slots("a"), store.RolloutSlot{Host: "n", Fresh: true, CreateIndex: 15})}, granted: true},
		{name: "a fresh host waits for its order", r: store.Rollout{Policy: store.RolloutPolicy{After: "db"}}, after: After{Done: 0, Need: 2, NeedOK: true}, fresh: true, reason: "waits for role db"},
		{name: "a fresh host waits on a halt", r: store.Rollout{Legacy: oldHalt}, fresh: true, halt: true, reason: "halted"},
		{name: "failures at the limit go on", r: store.Rollout{Policy: store.RolloutPolicy{MaxFailures: intp(2)}, Hosts: failed("v2", "a", "b")}, granted: true},
		{name: "failures over the limit halt", r: store.Rollout{Policy: store.RolloutPolicy{MaxFailures: intp(2)}, Hosts: failed("v2", "a", "b", "c")}, halt: true, reason: "3 hosts failed v2 (a, b, c), more than max_failures 2"},
		{name: "failures of another version do not count", r: store.Rollout{Policy: store.RolloutPolicy{MaxFailures: intp(0)}, Hosts: failed("v1", "a")}, granted: true},
		{name: "an unreadable record counts as a failure", r: store.Rollout{Policy: store.RolloutPolicy{MaxFailures: intp(0)}, Hosts: map[string]store.RolloutHost{"a": {State: store.RolloutFailed, Unreadable: true}}}, halt: true, reason: "1 hosts failed v2 (a)"},
		{name: "forgiven failures do not count", r: store.Rollout{Policy: store.RolloutPolicy{MaxFailures: intp(1)}, Hosts: failed("v2", "a", "b", "c"),
			Resume: resume("v2", "a", "b"), ResumeIndex: 9}, granted: true},
		{name: "a forgiven host that failed again counts", r: store.Rollout{Policy: store.RolloutPolicy{MaxFailures: intp(1)}, Hosts: failed("v2", "a", "b", "c"),
			Resume: resume("v2", "a", "b"), ResumeIndex: 4}, halt: true, reason: "3 hosts failed v2"},
		{name: "a forgiveness of another version does not count", r: store.Rollout{Policy: store.RolloutPolicy{MaxFailures: intp(1)}, Hosts: failed("v2", "a", "b"),
			Resume: resume("v1", "a", "b"), ResumeIndex: 9}, halt: true},
		{name: "an older orchestrate's resume still forgives", r: store.Rollout{Policy: store.RolloutPolicy{MaxFailures: intp(1)}, Hosts: failed("v2", "a", "b"),
			Legacy: &store.RolloutState{Resumed: resume("v2", "a", "b")}, LegacyIndex: 5}, granted: true},
		{name: "an older orchestrate's halt holds", r: store.Rollout{Legacy: oldHalt, LegacyIndex: 7}, halt: true, reason: "is halted: too many (halted by an older orchestrate)"},
		{name: "a resume lifts an older halt", r: store.Rollout{Legacy: oldHalt, LegacyIndex: 7, Resume: resume("v2"), ResumeIndex: 8}, granted: true},
		{name: "a resume of another version does not", r: store.Rollout{Legacy: oldHalt, LegacyIndex: 7, Resume: resume("v1"), ResumeIndex: 8}, halt: true},
		{name: "an older halt of another version does not hold", r: store.Rollout{Legacy: &store.RolloutState{Halted: &store.RolloutHalt{Version: "v1", Reason: "too many"}}}, granted: true},
		{name: "slots of the older layout block every grant", r: store.Rollout{LegacySlots: []store.RolloutSlot{{Host: "old1", Session: "s1"}}}, fresh: true, reason: "started by an older orchestrate is in progress"},
		{name: "after: not enough hosts yet", r: store.Rollout{Policy: store.RolloutPolicy{After: "db"}}, after: After{Done: 1, Need: 2, NeedOK: true}, reason: "waits for role db: 1 of 2 hosts run v2"},
		{name: "after: enough", r: store.Rollout{Policy: store.RolloutPolicy{After: "db"}}, after: After{Done: 2, Need: 2, NeedOK: true}, granted: true},
		{name: "after: no count known", r: store.Rollout{Policy: store.RolloutPolicy{After: "db"}}, reason: "no desired count"},
		{name: "halt comes before order and bound", r: store.Rollout{Policy: store.RolloutPolicy{MaxFailures: intp(0), After: "db", MaxUnavailable: 1}, Hosts: failed("v2", "a"), Slots: slots("b")}, halt: true},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			tc.r.Role = "web"
			v := Decide(&tc.r, Request{Host: "x", Version: "v2", Fresh: tc.fresh, Claim: tc.claim}, tc.after)
			if v.Granted != tc.granted || v.Halted != tc.halt || !strings.Contains(v.Reason, tc.reason) {
				t.Fatalf("Decide = %+v, want granted %v halt %v reason containing %q", v, tc.granted, tc.halt, tc.reason)
			}
			if !v.Granted && v.Reason == "" {
				t.Fatal("a refusal without a reason")
			}
		})
	}
}

func newSlots(t *testing.T, a *consultest.Agent) (*Slots, *store.Store) {
	t.Helper()
	st, err := store.New(a.Client, "orchestrate")
	if err != nil {
		t.Fatal(err)
	}
	s := New(st, a.Client.Session(), slog.New(slog.NewTextHandler(io.Discard, nil)))
	s.TTL = 10 * time.Second
	return s, st
}

// setPolicy changes web's rollout policy.
func setPolicy(t *testing.T, st *store.Store, change func(*store.RolloutPolicy)) {
	t.Helper()
	if _, err := st.SetRolloutPolicy(context.Background(), "web", func(p *store.RolloutPolicy) error { change(p); return nil }); err != nil {
		t.Fatal(err)
	}
}

// Twenty hosts race for three slots, again and again: the claims never
// grant a fourth, whatever the interleaving, and every host gets through.
func TestSlotsBoundUnderContention(t *testing.T) {
	a := consultest.Start(t, consultest.Options{})
	s, st := newSlots(t, a)
	ctx := context.Background()
	setPolicy(t, st, func(p *store.RolloutPolicy) { p.MaxUnavailable = 3 })
	var holding, most atomic.Int32
	var wg sync.WaitGroup
	done := make([]bool, 20)
	for i := range 20 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			host := "web" + string(rune('a'+i))
			for !done[i] {
				sl, v, err := s.Acquire(ctx, "web", host, "v2", false)
				if err != nil {
					t.Error(err)
					return
				}
				if sl == nil {
					if v.Reason == "" {
						t.Error("refused without a reason")
						return
					}
					time.Sleep(20 * time.Millisecond)
					continue
				}
				n := holding.Add(1)
				for m := most.Load(); n > m && !most.CompareAndSwap(m, n); m = most.Load() {
				}
				// Held long enough that the others, retrying every 20 ms,
				// fill every free slot meanwhile.
				time.Sleep(150 * time.Millisecond)
				holding.Add(-1)
				if err := sl.Release(ctx, store.RolloutDone, ""); err != nil {
					t.Error(err)
					return
				}
				done[i] = true
			}
		}()
	}
	wg.Wait()
	if m := most.Load(); m != 3 {
		t.Fatalf("at most %d hosts held a slot at once, want exactly 3 (the bound, reached)", m)
	}
	r, err := st.Rollout(ctx, "web")
	if err != nil {
		t.Fatal(err)
	}
	if n := len(r.Done("v2")); n != 20 || len(r.Slots) != 0 {
		t.Fatalf("done %d of 20, %d slots still held", n, len(r.Slots))
	}
}

// A failure that puts the role over max_failures halts it: a halt no
// host writes, derived from the hosts' records; no slot is granted until
// a resume, which forgives the failures so far but counts new ones, a
// forgiven host's included.
func TestSlotsHaltAndResume(t *testing.T) {
	a := consultest.Start(t, consultest.Options{})
	s, st := newSlots(t, a)
	ctx := context.Background()
	setPolicy(t, st, func(p *store.RolloutPolicy) { p.MaxFailures = intp(1) })
	fail := func(host string) {
		t.Helper()
		sl, v, err := s.Acquire(ctx, "web", host, "v2", false)
		if err != nil || sl == nil {
			t.Fatalf("%s: no slot: %+v %v", host, v, err)
		}
		if err := sl.Release(ctx, store.RolloutFailed, "puppet exit 1"); err != nil {
			t.Fatal(err)
		}
	}
	haltedNow := func() string {
		t.Helper()
		r, err := st.Rollout(ctx, "web")
		if err != nil {
			t.Fatal(err)
		}
		return Halted(r, "v2")
	}
	// failThen fails host, then wants the rollout halted for a reason
	// containing want ("": not halted).
	failThen := func(host, want string) {
		t.Helper()
		fail(host)
		if why := haltedNow(); (want == "") != (why == "") || !strings.Contains(why, want) {
			t.Fatalf("after %s failed: halted %q, want %q", host, why, want)
		}
	}
	failThen("web1", "")
	failThen("web2", "2 hosts failed v2 (web1, web2)")
	if sl, v, err := s.Acquire(ctx, "web", "web3", "v2", false); err != nil || sl != nil || !strings.Contains(v.Reason, "halted") {
		t.Fatalf("a slot while halted: %v %+v %v", sl, v, err)
	}
	// Another version is another rollout.
	sl, _, err := s.Acquire(ctx, "web", "web3", "v3", false)
	if err != nil || sl == nil {
		t.Fatalf("no slot for a new version: %v", err)
	}
	sl.Abandon()
	resume := func(want string) {
		t.Helper()
		halted, forgiven, err := Resume(ctx, st, "web", "v2")
		if err != nil || !halted || strings.Join(forgiven, ",") != want {
			t.Fatalf("Resume = %v %v %v, want the failures of %s forgiven", halted, forgiven, err, want)
		}
	}
	resume("web1,web2")
	if again, _, _ := Resume(ctx, st, "web", "v2"); again {
		t.Fatal("a second resume found the rollout halted")
	}
	failThen("web3", "") // one new failure: within max_failures 1
	failThen("web4", "(web3, web4)")
	// Resumed again; web1, forgiven twice, fails once more: it counts,
	// with web5.
	resume("web3,web4")
	failThen("web1", "")
	failThen("web5", "2 hosts failed v2 (web1, web5)")
	// No host wrote a halt: the role's keys are the policy, the resume
	// and each host's progress.
	keys, _, err := a.Client.KV().Keys("orchestrate/", "", nil)
	if err != nil {
		t.Fatal(err)
	}
	want := "orchestrate/rollout/web/hosts/web1 orchestrate/rollout/web/hosts/web2 orchestrate/rollout/web/hosts/web3 orchestrate/rollout/web/hosts/web4 orchestrate/rollout/web/hosts/web5 orchestrate/rollout/web/policy orchestrate/rollout/web/resume"
	if got := strings.Join(keys, " "); got != want {
		t.Fatalf("keys after the rollout:\n%s\nwant\n%s", got, want)
	}
}

// A holder that dies gives its slot back when its session expires, within
// one to two TTLs; a later run of the same host gives back the slot its
// dead predecessor left at once.
func TestSlotsOfADeadHolder(t *testing.T) {
	a := consultest.Start(t, consultest.Options{})
	s, st := newSlots(t, a)
	ctx := context.Background()
	setPolicy(t, st, func(p *store.RolloutPolicy) { p.MaxUnavailable = 1 })
	// A holder whose process died: its session stops being renewed.
	dead := func(host string) {
		t.Helper()
		sl, _, err := s.Acquire(ctx, "web", host, "v2", false)
		if err != nil || sl == nil {
			t.Fatalf("no slot for %s: %v", host, err)
		}
		sl.stop() // stop renewing, as a killed process does
	}
	dead("web1")
	start := time.Now()
	if sl, _, _ := s.Acquire(ctx, "web", "web2", "v2", false); sl != nil {
		t.Fatal("a second slot while web1 holds the only one")
	}
	took := testutil.Eventually(t, 30*time.Second, "web1's slot freed by its session's expiry", func() bool {
		r, err := st.Rollout(ctx, "web")
		return err == nil && len(r.Slots) == 0
	})
	if took < s.TTL-time.Second || time.Since(start) > 2*s.TTL+5*time.Second {
		t.Fatalf("the slot was freed after %s, want between the TTL %s and twice it", took, s.TTL)
	}
	t.Logf("a dead holder's slot freed %s after it stopped renewing (TTL %s)", took.Round(100*time.Millisecond), s.TTL)

	dead("web2")
	sl, v, err := s.Acquire(ctx, "web", "web2", "v2", false)
	if err != nil || sl == nil {
		t.Fatalf("web2's next run did not take back the slot its dead run left: %+v %v", v, err)
	}
	if err := sl.Release(ctx, store.RolloutDone, ""); err != nil {
		t.Fatal(err)
	}
	sessions, _, err := a.Client.Session().List(nil)
	if err != nil {
		t.Fatal(err)
	}
	if len(sessions) != 0 {
		t.Fatalf("%d sessions left after every slot was given back", len(sessions))
	}
}

// Values written by hand into keys only the operator writes are refused
// by name, and a grant writes nothing then.
func TestRolloutRefusesHandWrittenValues(t *testing.T) {
	a := consultest.Start(t, consultest.Options{})
	s, _ := newSlots(t, a)
	ctx := context.Background()
	for _, kv := range []struct{ key, value string }{
		{"orchestrate/rollout/web/policy", `{"max_unavailable": -1}`},
		{"orchestrate/rollout/web/policy", `{"max_unavailable": "2"}`},
		{"orchestrate/rollout/web/state", `halted`},
		{"orchestrate/rollout/web/resume", `{"version": "v2", "forgiven": "web1"}`},
		{"orchestrate/rollout/web/resume", `{"version": "", "forgiven": []}`},
		{"orchestrate/rollout/web/nonsense", `x`},
		{"orchestrate/rollout/web/slot/a b", `x`},
		{"orchestrate/rollout/web/policy", `{"max_unavailable": 1, "after": "web"}`},
	} {
		t.Run(kv.key+"="+kv.value, func(t *testing.T) {
			if _, err := a.Client.KV().DeleteTree("orchestrate/", nil); err != nil {
				t.Fatal(err)
			}
			if _, err := a.Client.KV().Put(&api.KVPair{Key: kv.key, Value: []byte(kv.value)}, nil); err != nil {
				t.Fatal(err)
			}
			sl, _, err := s.Acquire(ctx, "web", "web2", "v2", false)
			if sl != nil || err == nil || !strings.Contains(err.Error(), kv.key) {
				t.Fatalf("Acquire = %v, %v; want an error naming %s", sl, err, kv.key)
			}
			keys, _, _ := a.Client.KV().Keys("orchestrate/", "", nil)
			if len(keys) != 1 {
				t.Fatalf("keys after a refused grant: %v", keys)
			}
		})
	}
}

// A host's own records hold what the host wrote, so nonsense in them must
// not stop its role's rollout: another host still decides, counting the
// nonsense the safe way (a claim as a slot in use, a progress record as a
// failure), and the rollout's readers name the keys.
func TestRolloutCountsUnreadableHostRecordsSafely(t *testing.T) {
	a := consultest.Start(t, consultest.Options{})
	s, st := newSlots(t, a)
	ctx := context.Background()
	setPolicy(t, st, func(p *store.RolloutPolicy) { p.MaxUnavailable = 1; p.MaxFailures = intp(1) })
	// web1's claim holds nonsense (a claim in another host's name), under
	// a session of its own: a slot in use.
	id, _, err := a.Client.Session().CreateNoChecks(&api.SessionEntry{TTL: "30s", Behavior: api.SessionBehaviorDelete}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if ok, _, err := a.Client.KV().Acquire(&api.KVPair{Key: "orchestrate/rollout/web/slot/web1", Value: []byte(`{"host":"web9","version":"v2","time":"2026-01-01T00:00:00Z"}`), Session: id}, nil); err != nil || !ok {
		t.Fatalf("acquire: %v %v", ok, err)
	}
	sl, v, err := s.Acquire(ctx, "web", "web2", "v2", false)
	if err != nil || sl != nil || !strings.Contains(v.Reason, "1 at a time") {
		t.Fatalf("web2 with web1's nonsense claim held: %v %+v %v; want waiting for the slot", sl, v, err)
	}
	if _, err := a.Client.Session().Destroy(id, nil); err != nil {
		t.Fatal(err)
	}
	// Two progress records of nonsense: two failures, over max_failures 1.
	for _, h := range []string{"web3", "web4"} {
		if _, err := a.Client.KV().Put(&api.KVPair{Key: "orchestrate/rollout/web/hosts/" + h, Value: []byte(`{"version":"v2","state":"exploded"}`)}, nil); err != nil {
			t.Fatal(err)
		}
	}
	sl, v, err = s.Acquire(ctx, "web", "web2", "v2", false)
	if err != nil || sl != nil || !v.Halted || !strings.Contains(v.Reason, "2 hosts failed v2 (web3, web4)") {
		t.Fatalf("web2 with two unreadable records: %v %+v %v; want halted on two failures", sl, v, err)
	}
	r, err := st.Rollout(ctx, "web")
	if err != nil || strings.Join(r.Unreadable, " ") != "orchestrate/rollout/web/hosts/web3 orchestrate/rollout/web/hosts/web4" {
		t.Fatalf("Unreadable = %v (%v)", r, err)
	}
	// A host's next outcome rewrites its own record.
	if err := s.Record(ctx, "web", "web3", "v2", store.RolloutDone, ""); err != nil {
		t.Fatal(err)
	}
	if sl, v, err = s.Acquire(ctx, "web", "web2", "v2", false); err != nil || sl == nil {
		t.Fatalf("web2 after web3 rewrote its record: %+v %v", v, err)
	}
	sl.Abandon()
}

// A restart of the node's agent in the middle of the step ends the
// holder's session (Consul ends the sessions of a node whose agent
// leaves); the holder takes its slot back under a new session, and its
// renewals go on: a host still in its step keeps counting.
func TestSlotSurvivesAnAgentRestart(t *testing.T) {
	server := consultest.Start(t, consultest.Options{})
	client := consultest.Start(t, consultest.Options{JoinLAN: server.SerfLANAddr()})
	s, st := newSlots(t, client)
	ctx := context.Background()
	sl, _, err := s.Acquire(ctx, "web", "web1", "v2", false)
	if err != nil || sl == nil {
		t.Fatalf("no slot: %v", err)
	}
	defer func() {
		if err := sl.Release(ctx, store.RolloutDone, ""); err != nil {
			t.Error(err)
		}
		if r, err := st.Rollout(ctx, "web"); err != nil || len(r.Slots) != 0 || r.Hosts["web1"].State != store.RolloutDone {
			t.Errorf("after the release: %+v %v", r, err)
		}
	}()
	if err := client.Restart(ctx, 3*time.Second); err != nil {
		t.Fatal(err)
	}
	held := func() bool {
		r, err := st.Rollout(ctx, "web")
		return err == nil && len(r.Slots) == 1
	}
	took := testutil.Eventually(t, 2*s.TTL, "the slot held again after the agent's restart", held)
	t.Logf("slot held %s after the restart returned", took.Round(100*time.Millisecond))
	claim := func() *api.KVPair {
		p, _, err := server.Client.KV().Get("orchestrate/rollout/web/slot/web1", nil)
		if err != nil || p == nil {
			t.Fatalf("web1's claim: %v %v", p, err)
		}
		return p
	}
	before := claim()
	time.Sleep(2*s.TTL + 2*time.Second) // an unrenewed session would have expired
	if !held() {
		t.Fatalf("the slot expired %s after the restart: its renewals did not resume", 2*s.TTL)
	}
	// Renewals never rewrite the claim: its place in line stays.
	if after := claim(); after.CreateIndex != before.CreateIndex || after.ModifyIndex != before.ModifyIndex || after.Session != before.Session {
		t.Fatalf("the held claim moved: %d/%d/%s, then %d/%d/%s", before.CreateIndex, before.ModifyIndex, before.Session, after.CreateIndex, after.ModifyIndex, after.Session)
	}
}

// An eventual step that runs alone again with the same outcome writes
// nothing: the role's rollout does not change, so its waiting hosts are
// not woken on every data change of a pending host.
func TestRecordSameOutcomeWritesNothing(t *testing.T) {
	a := consultest.Start(t, consultest.Options{})
	s, _ := newSlots(t, a)
	ctx := context.Background()
	index := func() uint64 {
		_, meta, err := a.Client.KV().List("orchestrate/rollout/web/", nil)
		if err != nil {
			t.Fatal(err)
		}
		return meta.LastIndex
	}
	if err := s.Record(ctx, "web", "web1", "v2", store.RolloutPending, "waiting on db; log 1"); err != nil {
		t.Fatal(err)
	}
	before := index()
	if err := s.Record(ctx, "web", "web1", "v2", store.RolloutPending, "waiting on db; log 2"); err != nil {
		t.Fatal(err)
	}
	if after := index(); after != before {
		t.Fatalf("the same outcome moved the rollout's index %d -> %d", before, after)
	}
	if err := s.Record(ctx, "web", "web1", "v2", store.RolloutDone, ""); err != nil {
		t.Fatal(err)
	}
	if after := index(); after == before {
		t.Fatal("a new outcome was not written")
	}
}

// olderSlot holds a slot of the older layout (slot/<session>, as
// orchestrate before node restriction took them) for host, and returns
// its session.
func olderSlot(t *testing.T, a *consultest.Agent, host string) string {
	t.Helper()
	id, _, err := a.Client.Session().CreateNoChecks(&api.SessionEntry{TTL: "60s", Behavior: api.SessionBehaviorDelete}, nil)
	if err != nil {
		t.Fatal(err)
	}
	val := `{"host":"` + host + `","version":"v2","time":"2026-11-20T10:00:00Z"}`
	if ok, _, err := a.Client.KV().Acquire(&api.KVPair{Key: "orchestrate/rollout/web/slot/" + id, Value: []byte(val), Session: id}, nil); err != nil || !ok {
		t.Fatalf("acquire an older slot: %v %v", ok, err)
	}
	return id
}

// An upgrade in the middle of a rollout. Slots held in the older layout
// block every grant, fresh hosts' too, saying what to do, until they are
// given back; a host's own older slot (its converge died before the
// upgrade) is given back by its next run.
func TestSlotsWaitForOlderLayoutSlots(t *testing.T) {
	a := consultest.Start(t, consultest.Options{})
	s, st := newSlots(t, a)
	ctx := context.Background()
	setPolicy(t, st, func(p *store.RolloutPolicy) { p.MaxUnavailable = 3 })
	id1 := olderSlot(t, a, "web1")
	for _, fresh := range []bool{false, true} {
		sl, v, err := s.Acquire(ctx, "web", "web2", "v2", fresh)
		if err != nil || sl != nil || !strings.Contains(v.Reason, "started by an older orchestrate is in progress") ||
			!strings.Contains(v.Reason, "web1 (session "+id1+")") || !strings.Contains(v.Reason, "consul session destroy") {
			t.Fatalf("fresh %v: Acquire = %v %+v %v; want waiting on the older slot", fresh, sl, v, err)
		}
	}
	r, err := st.Rollout(ctx, "web")
	if err != nil || len(r.Slots) != 0 || strings.Join(r.Holders(), ",") != "web1" {
		t.Fatalf("after the refusals: %+v %v; want no claim, web1 holding", r, err)
	}
	// web2's own older slot goes with its next run; web1's still blocks.
	olderSlot(t, a, "web2")
	if sl, v, err := s.Acquire(ctx, "web", "web2", "v2", false); err != nil || sl != nil || !strings.Contains(v.Reason, "web1 (session") || strings.Contains(v.Reason, "web2 (session") {
		t.Fatalf("Acquire with web2's own older slot = %v %+v %v", sl, v, err)
	}
	if _, err := a.Client.Session().Destroy(id1, nil); err != nil {
		t.Fatal(err)
	}
	sl, v, err := s.Acquire(ctx, "web", "web2", "v2", false)
	if err != nil || sl == nil {
		t.Fatalf("no slot once the older ones were given back: %+v %v", v, err)
	}
	sl.Abandon()
}

// An older orchestrate's state keeps holding after the upgrade: its halt
// until `rollout resume`, which deletes it (the resume forgives every
// failure so far), its resume's forgiveness until the host fails again.
func TestOlderRolloutStateHolds(t *testing.T) {
	a := consultest.Start(t, consultest.Options{})
	s, st := newSlots(t, a)
	ctx := context.Background()
	put := func(key, val string) {
		t.Helper()
		if _, err := a.Client.KV().Put(&api.KVPair{Key: "orchestrate/rollout/web/" + key, Value: []byte(val)}, nil); err != nil {
			t.Fatal(err)
		}
	}
	failedRec := `{"version":"v2","state":"failed","time":"2026-11-20T10:00:00Z"}`
	put("policy", `{"max_unavailable":1,"max_failures":1,"time":"2026-11-20T09:00:00Z"}`)
	put("hosts/web1", failedRec)
	put("hosts/web3", failedRec)
	put("state", `{"seq":12,"halted":{"version":"v2","reason":"2 hosts failed v2 (web1, web3), more than max_failures 1","time":"2026-11-20T10:00:00Z"}}`)
	// The operator raised max_failures since: the older halt still holds.
	setPolicy(t, st, func(p *store.RolloutPolicy) { p.MaxFailures = intp(5) })
	sl, v, err := s.Acquire(ctx, "web", "web4", "v2", false)
	if err != nil || sl != nil || !v.Halted || !strings.Contains(v.Reason, "(halted by an older orchestrate)") {
		t.Fatalf("Acquire under an older halt = %v %+v %v", sl, v, err)
	}
	if sl, _, err := s.Acquire(ctx, "web", "web4", "v3", false); err != nil || sl == nil {
		t.Fatalf("the older halt of v2 held v3: %v", err)
	} else {
		sl.Abandon()
	}
	halted, forgiven, err := Resume(ctx, st, "web", "v2")
	if err != nil || !halted || strings.Join(forgiven, ",") != "web1,web3" {
		t.Fatalf("Resume = %v %v %v; want halted, web1 and web3 forgiven", halted, forgiven, err)
	}
	if p, _, _ := a.Client.KV().Get("orchestrate/rollout/web/state", nil); p != nil {
		t.Fatal("the older state is still there after the resume")
	}
	if sl, v, err = s.Acquire(ctx, "web", "web4", "v2", false); err != nil || sl == nil {
		t.Fatalf("no slot after the resume: %+v %v", v, err)
	}
	sl.Abandon()

	// An older resume forgave web1; with max_failures 0, web1's failure
	// does not count until web1 fails again.
	if _, err := a.Client.KV().DeleteTree("orchestrate/", nil); err != nil {
		t.Fatal(err)
	}
	put("policy", `{"max_unavailable":1,"max_failures":0,"time":"2026-11-20T09:00:00Z"}`)
	put("hosts/web1", failedRec)
	put("state", `{"seq":14,"resumed":{"version":"v2","forgiven":["web1"],"time":"2026-11-20T11:00:00Z"}}`)
	if sl, v, err = s.Acquire(ctx, "web", "web2", "v2", false); err != nil || sl == nil {
		t.Fatalf("web1's forgiven failure halted the rollout: %+v %v", v, err)
	}
	if err := sl.Release(ctx, store.RolloutDone, ""); err != nil {
		t.Fatal(err)
	}
	if err := s.Record(ctx, "web", "web1", "v2", store.RolloutFailed, "again"); err != nil {
		t.Fatal(err)
	}
	if sl, v, err = s.Acquire(ctx, "web", "web2", "v2", false); err != nil || sl != nil || !strings.Contains(v.Reason, "1 hosts failed v2 (web1)") {
		t.Fatalf("web1 failing again after the older resume: %v %+v %v; want halted", sl, v, err)
	}
}
