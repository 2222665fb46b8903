package daemon_test

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/hashicorp/consul/api"

	"github.com/jiocloud/orchestrate/internal/consultest"
	"github.com/jiocloud/orchestrate/internal/store"
	"github.com/jiocloud/orchestrate/internal/store/reaperkv"
	"github.com/jiocloud/orchestrate/reaper"
	"github.com/jiocloud/orchestrate/reaper/daemon"
	"github.com/jiocloud/orchestrate/reaper/simcloud"
)

// A suspect server whose failed run linked its log is replaced; the
// reaper's forget of its records leaves its departed record, dated by
// the reaper's clock, which the reaper prunes once departed_retention has
// passed by that clock (not before); a departed record that cannot be
// read is removed too, and a record of a host forgotten within the
// retention stays.
func TestDepartedRecordKeptThenPruned(t *testing.T) {
	t.Parallel()
	agent := consultest.Start(t, consultest.Options{HCL: agentHCL})
	c := agent.Client
	cfg := fastConfig(t, "departed_retention: 2h\n")
	cfg.Roles[0].ReplaceSuspect = true
	var mu sync.Mutex
	now := time.Date(2026, 11, 27, 12, 0, 0, 0, time.UTC)
	clock := func() time.Time { mu.Lock(); defer mu.Unlock(); return now }
	advance := func(d time.Duration) { mu.Lock(); now = now.Add(d); mu.Unlock() }
	sim := simcloud.New()
	sim.Now = clock
	sim.BootDelay, sim.DeleteDelay = time.Second, time.Second
	sim.OnActive = func(s reaper.Server) {
		if err := simcloud.RegisterNode(context.Background(), c, s.Name, "web", api.HealthPassing); err != nil {
			t.Errorf("register node %s: %v", s.Name, err)
		}
	}
	for i := 1; i <= 3; i++ {
		name := fmt.Sprintf("web%d", i)
		sim.Add(reaper.Server{Name: name, Created: clock().Add(-24 * time.Hour), Metadata: map[string]string{reaper.MetaRole: "web"}})
		if err := simcloud.RegisterNode(context.Background(), c, name, "web", api.HealthPassing); err != nil {
			t.Fatal(err)
		}
	}
	ctx := context.Background()
	st, err := store.New(c, prefix)
	if err != nil {
		t.Fatal(err)
	}
	const url = "https://swift.example.net/v1/AUTH_ops/logs/web2/v2/puppet/20261127T115900.000Z.log"
	if err := st.SetCurrentVersion(ctx, "v2"); err != nil {
		t.Fatal(err)
	}
	if err := st.UpdateStatus(ctx, "web2", store.CategoryPuppet, store.StateFailed,
		store.StatusValue{Version: "v2", Detail: "suspect: the consistent step failed 3 time(s)", LogURL: url, Suspect: true}); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Catalog().Register(&api.CatalogRegistration{Node: "web2", Address: "127.0.0.1", Check: &api.AgentCheck{
		Node: "web2", CheckID: store.ConvergePuppetCheck, Name: store.ConvergePuppetCheck, Status: api.HealthWarning,
		Notes: "orchestrate converge, last puppet outcome: failed: suspect: the consistent step failed 3 time(s)"}}, nil); err != nil {
		t.Fatal(err)
	}
	// Hand-written garbage, and web9 forgotten an hour ago (within the
	// retention), as the store writes it.
	kv := c.KV()
	if _, err := kv.Put(&api.KVPair{Key: reaperkv.DepartedKey(prefix, "junk1"), Value: []byte("not a record")}, nil); err != nil {
		t.Fatal(err)
	}
	_, web9, _ := reaperkv.NewDeparted("web9", clock().Add(-time.Hour), map[string]reaperkv.DepartedLog{"puppet": {State: "failed", LogURL: url}})
	if _, err := kv.Put(&api.KVPair{Key: reaperkv.DepartedKey(prefix, "web9"), Value: web9}, nil); err != nil {
		t.Fatal(err)
	}
	r, err := daemon.New(cfg, c, sim, testLogger(t), daemon.WithClock(clock))
	if err != nil {
		t.Fatal(err)
	}
	sess := holdLock(t, c, cfg)
	arm(t, c)
	step := func() {
		advance(time.Second)
		if p := r.Cycle(ctx, sess); p == nil {
			t.Fatal("cycle skipped")
		}
	}
	departed := func(host string) (reaperkv.DepartedRecord, bool) {
		rec, found, err := st.Departed(ctx, host)
		if err != nil {
			t.Fatalf("departed record of %s: %v", host, err)
		}
		return rec, found
	}
	stepUntil(t, 200, "web2 replaced and its records forgotten", step, func() bool {
		_, found := departed("web2")
		return names(sim.Servers()) == "web1,web3,web4" && found && !catalogHas(t, c, "web2")
	}, func() string { return names(sim.Servers()) })
	rec, _ := departed("web2")
	if l := rec.Logs[store.CategoryPuppet]; l.LogURL != url || l.State != store.StateFailed || rec.Forgotten.Before(time.Date(2026, 11, 27, 12, 0, 0, 0, time.UTC)) || rec.Forgotten.After(clock()) {
		t.Fatalf("web2's departed record %+v, want its log and the reaper's clock (now %s)", rec, clock())
	}
	if ks := keysUnder(t, c, store.HostDir(prefix, "web2")); len(ks) != 0 {
		t.Fatalf("web2's records left: %v", ks)
	}
	if _, found, _ := st.Departed(ctx, "junk1"); found {
		t.Fatal("junk1's record read as a departed record")
	}
	if p, _, _ := kv.Get(reaperkv.DepartedKey(prefix, "junk1"), nil); p != nil {
		t.Fatal("the departed record that cannot be read is still there")
	}
	if _, found := departed("web9"); !found {
		t.Fatal("web9's record, forgotten within the retention, was pruned")
	}
	// By the reaper's clock: a second short of 2h after web2's forget,
	// web9's record (forgotten an hour before the test began) goes and
	// web2's stays; two seconds later web2's goes.
	advance(rec.Forgotten.Add(2*time.Hour - 2*time.Second).Sub(clock()))
	step()
	if _, found := departed("web9"); found {
		t.Fatal("web9's record outlived departed_retention")
	}
	if _, found := departed("web2"); !found {
		t.Fatal("web2's record pruned before departed_retention")
	}
	step()
	step()
	if _, found := departed("web2"); found {
		t.Fatal("web2's record outlived departed_retention")
	}
}
