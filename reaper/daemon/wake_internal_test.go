package daemon

import (
	"context"
	"io"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hashicorp/consul/api"
	"github.com/jiocloud/orchestrate/internal/consultest"
	"github.com/jiocloud/orchestrate/internal/store"
	"github.com/jiocloud/orchestrate/internal/store/reaperkv"
	"github.com/jiocloud/orchestrate/reaper"
	"github.com/jiocloud/orchestrate/reaper/reapertest"
)

// TestNextWake: the next cycle is the earliest of the interval's end, the
// plan's deadline and a change, never sooner than the gap after the last
// cycle began.
func TestNextWake(t *testing.T) {
	t0 := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	const interval, gap = 30 * time.Second, 5 * time.Second
	at := func(d time.Duration) time.Time { return t0.Add(d) }
	cases := []struct {
		name      string
		deadline  time.Time
		changed   time.Time
		want      time.Time
		wantCause string
	}{
		{name: "nothing: the interval", want: at(interval), wantCause: wakeInterval},
		{name: "a deadline before the interval", deadline: at(12 * time.Second), want: at(12 * time.Second), wantCause: wakeTimer},
		{name: "a deadline after the interval", deadline: at(time.Minute), want: at(interval), wantCause: wakeInterval},
		{name: "a deadline within the gap waits for the gap", deadline: at(time.Second), want: at(gap), wantCause: wakeTimer},
		{name: "a deadline already past waits for the gap", deadline: at(-time.Minute), want: at(gap), wantCause: wakeTimer},
		{name: "a change after the gap: at once", changed: at(8 * time.Second), want: at(8 * time.Second), wantCause: wakeChange},
		{name: "a change within the gap: at the gap", changed: at(2 * time.Second), want: at(gap), wantCause: wakeChange},
		{name: "a change before a deadline", deadline: at(20 * time.Second), changed: at(9 * time.Second), want: at(9 * time.Second), wantCause: wakeChange},
		{name: "a deadline before a change", deadline: at(7 * time.Second), changed: at(9 * time.Second), want: at(7 * time.Second), wantCause: wakeTimer},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			got, cause := nextWake(t0, interval, gap, tc.deadline, tc.changed)
			if !got.Equal(tc.want) || cause != tc.wantCause {
				t.Fatalf("nextWake = %s (%s), want %s (%s)", got.Sub(t0), cause, tc.want.Sub(t0), tc.wantCause)
			}
		})
	}
}

// TestWatchSurvivesAgentRestart runs the KV watch against a real agent: a
// desired count written wakes it, the reaper's own state write does not;
// the agent restarted with its state lost (a dev agent: the index goes
// backwards) fails the watch for a while, which backs off, and once the
// agent is back a write wakes it again.
func TestWatchSurvivesAgentRestart(t *testing.T) {
	agent := consultest.Start(t, consultest.Options{})
	cfg := reapertest.Config(t, func(c *reaper.Config) { c.MinCycleGap = reaper.Duration(50 * time.Millisecond) })
	r, err := New(cfg, agent.Client, &reapertest.Cloud{}, slog.New(slog.NewTextHandler(io.Discard, nil)))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	changeCh := make(chan struct{}, 1)
	wg.Go(func() { r.runWatch(ctx, "kv", r.askKV(), changeCh) })
	defer func() {
		cancel()
		wg.Wait()
	}()
	put := func(key, value string) {
		t.Helper()
		if _, err := agent.Client.KV().Put(&api.KVPair{Key: key, Value: []byte(value)}, nil); err != nil {
			t.Fatal(err)
		}
	}
	woken := func(within time.Duration) bool {
		select {
		case <-changeCh:
			return true
		case <-time.After(within):
			return false
		}
	}
	put(reaperkv.ReaperKey(cfg.Prefix, reaperkv.ReaperStateKey), "{}")
	time.Sleep(200 * time.Millisecond) // the watch's first answer holds it
	woken(0)
	put(reaperkv.ReaperKey(cfg.Prefix, reaperkv.ReaperStateKey), `{"leader":"x"}`)
	if woken(500 * time.Millisecond) {
		t.Fatal("the reaper's own state write woke the cycle")
	}
	put(store.DesiredKey(cfg.Prefix, "web"), "4")
	if !woken(3 * time.Second) {
		t.Fatal("a desired count written did not wake the cycle")
	}
	if err := agent.Restart(context.Background(), time.Second); err != nil {
		t.Fatal(err)
	}
	woken(0) // the keys the restart lost may have woken it
	put(store.DesiredKey(cfg.Prefix, "web"), "5")
	if !woken(10 * time.Second) {
		t.Fatal("after the agent's restart, a desired count written did not wake the cycle")
	}
	var sb strings.Builder
	r.metrics.WriteTo(&sb)
	r.metrics.mu.Lock()
	failed := r.metrics.watchErrors["kv"]
	r.metrics.mu.Unlock()
	if !strings.Contains(sb.String(), `reaper_watch_errors_total{watch="kv"}`) || failed == 0 {
		t.Fatalf("the agent's restart counted no watch error:\n%s", sb.String())
	}
}
