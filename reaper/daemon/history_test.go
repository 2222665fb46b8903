package daemon_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/consul/api"

	"github.com/jiocloud/orchestrate/internal/store"
	"github.com/jiocloud/orchestrate/internal/store/reaperkv"
	"github.com/jiocloud/orchestrate/internal/testutil"
)

// readHistory reads the reaper's activity history under prefix.
func readHistory(t *testing.T, c *api.Client) []reaperkv.Activity {
	t.Helper()
	s, err := store.New(c, prefix)
	if err != nil {
		t.Fatal(err)
	}
	h, err := s.ReaperHistory(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	return h
}

// kinds lists the history's kinds of role web, in order, each once.
func kinds(h []reaperkv.Activity) string {
	var out []string
	for _, a := range h {
		if a.Role == "web" && a.Result == "done" && (len(out) == 0 || out[len(out)-1] != a.Kind) {
			out = append(out, a.Kind)
		}
	}
	return strings.Join(out, ",")
}

// A replacement leaves its steps in the history, oldest first, each fired
// as a Consul event, after its journal entry is gone; the metrics count
// them.
func TestHistoryKeepsWhatTheReaperDid(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	f.seed(3)
	f.arm()
	r := f.start(nil)
	testutil.Eventually(t, 5*time.Second, "reaper to lead", r.Leading)
	setCritical(t, f.c, "web2")
	testutil.Eventually(t, 15*time.Second, "web2 replaced and its entry gone", func() bool {
		return !catalogHas(t, f.c, "web2") && len(f.sim.Servers()) == 3 && len(journalKeys(t, f.c)) == 0
	})
	var h []reaperkv.Activity
	testutil.Eventually(t, 5*time.Second, "the delete in the history", func() bool {
		h = readHistory(t, f.c)
		return strings.Contains(kinds(h), "delete")
	})
	got := kinds(h)
	for _, want := range []string{"create", "drain", "delete"} {
		if !strings.Contains(got, want) {
			t.Fatalf("history kinds %s lack %s: %+v", got, want, h)
		}
	}
	if strings.Index(got, "create") > strings.Index(got, "delete") {
		t.Fatalf("history %s is not oldest first", got)
	}
	for _, a := range h {
		if a.Leader != r.ID() || a.Time.IsZero() || a.Action == "" {
			t.Fatalf("activity without leader, time or action: %+v", a)
		}
	}
	evs, _, err := f.c.Event().List(reaperkv.HistoryEvent, nil)
	if err != nil || len(evs) < 3 {
		t.Fatalf("%d %s events, want one per activity: %v", len(evs), reaperkv.HistoryEvent, err)
	}
	if m := scrape(t, r); !strings.Contains(m, `reaper_history_activities_total{kind="delete"} `) || !strings.Contains(m, `reaper_history_errors_total{what="write"} 0`) || !strings.Contains(m, `reaper_history_errors_total{what="event"} 0`) {
		t.Fatalf("history metrics:\n%s", m)
	}
}

// A history value someone wrote by hand is neither overwritten nor in the
// way: the reaper goes on replacing, counts the failed writes, and keeps
// its activities for when the key is cleared.
func TestHistoryWrittenByHandIsLeftAlone(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	f.seed(3)
	f.arm()
	key := reaperkv.HistoryKeyOf(prefix)
	if _, err := f.c.KV().Put(&api.KVPair{Key: key, Value: []byte("not a history")}, nil); err != nil {
		t.Fatal(err)
	}
	r := f.start(nil)
	testutil.Eventually(t, 5*time.Second, "reaper to lead", r.Leading)
	setCritical(t, f.c, "web2")
	testutil.Eventually(t, 15*time.Second, "web2 replaced all the same", func() bool {
		return !catalogHas(t, f.c, "web2") && len(f.sim.Servers()) == 3 && len(journalKeys(t, f.c)) == 0
	})
	if p, _, err := f.c.KV().Get(key, nil); err != nil || p == nil || string(p.Value) != "not a history" {
		t.Fatalf("the hand-written value was changed: %v %v", p, err)
	}
	if m := scrape(t, r); strings.Contains(m, `reaper_history_errors_total{what="write"} 0`) {
		t.Fatalf("no failed history write counted:\n%s", m)
	}
	if _, err := f.c.KV().Delete(key, nil); err != nil {
		t.Fatal(err)
	}
	testutil.Eventually(t, 10*time.Second, "the kept activities written once the key is cleared", func() bool {
		return strings.Contains(kinds(readHistory(t, f.c)), "delete")
	})
}

// A hold is in the history once, when it begins: a replacement the start
// gate holds (the reaper never armed, a node critical past its grace) is
// recorded once however many cycles it waits, its role named.
func TestHistoryRecordsAHoldOnce(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	r := f.start(nil)
	testutil.Eventually(t, 10*time.Second, "the role of 3 built", func() bool {
		return len(f.sim.Servers()) == 3 && catalogHas(t, f.c, "web3") && len(journalKeys(t, f.c)) == 0
	})
	setCritical(t, f.c, "web2")
	testutil.Eventually(t, 10*time.Second, "the replacement of web2 held by the start gate", func() bool {
		return strings.Contains(blocked(f.c), "replacement of web2 (unhealthy) waits: not armed")
	})
	waitCycles(t, 10, r)
	var holds []reaperkv.Activity
	testutil.Eventually(t, 5*time.Second, "the hold in the history", func() bool {
		holds = nil
		for _, a := range readHistory(t, f.c) {
			if a.Kind == reaperkv.ActivityHold && strings.Contains(a.Action, "replacement of web2") {
				holds = append(holds, a)
			}
		}
		return len(holds) > 0
	})
	if len(holds) != 1 || holds[0].Role != "web" || holds[0].Result != "held" || !strings.Contains(holds[0].Action, "not armed") {
		t.Fatalf("holds of web2's replacement in the history: %+v, want one, role web, not armed", holds)
	}
}
