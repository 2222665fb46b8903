package store_test

import (
	"context"
	"errors"
	"fmt"
	"reflect"
	"strings"
	"sync"
	"testing"

	"github.com/hashicorp/consul/api"
	"github.com/jiocloud/orchestrate/internal/store"
	"github.com/jiocloud/orchestrate/internal/store/schema"
)

// dump is every key under p with its value.
func dump(t *testing.T, c *api.Client, p string) map[string]string {
	t.Helper()
	pairs, _, err := c.KV().List(p, nil)
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]string{}
	for _, kv := range pairs {
		out[kv.Key] = string(kv.Value)
	}
	return out
}

// view is what readers make of the records, to compare before and after a
// migration.
type view struct {
	Problems int
	Versions map[string]string
	Status   map[string]store.Status
	Metrics  map[string]schema.MetricReport
	Answers  map[string]schema.DrainAnswer
}

func readView(t *testing.T, s *store.Store) view {
	t.Helper()
	snap, err := s.Snapshot(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	v := view{Problems: len(snap.Problems), Versions: map[string]string{}, Status: map[string]store.Status{}, Metrics: map[string]schema.MetricReport{}, Answers: map[string]schema.DrainAnswer{}}
	for name, h := range snap.Hosts {
		v.Versions[name] = h.Version + " " + h.VersionTime.String()
		for c, st := range h.Status {
			v.Status[name+" "+c] = st
		}
	}
	for h, ms := range snap.Scaling.Metrics {
		for n, m := range ms {
			v.Metrics[h+" "+n] = m
		}
	}
	for h, d := range snap.Scaling.Drains {
		if d.Answer != nil {
			a := *d.Answer
			a.Entry = "" // inside the request it had none
			v.Answers[h] = a
		}
	}
	return v
}

// The migration of the older layout, on a real agent: 40 hosts as the
// older orchestrate left them, one host under two versions, one that
// already wrote its own records since the upgrade, and web1 writing its own
// status all through the migration. Every older key goes, readers see the
// same records as before, web1's own writes all stand, and the check finds
// nothing left.
func TestNodeRestrictionMigrate(t *testing.T) {
	ctx := context.Background()
	s, c := newStore(t)
	const prefix = "test/orchestrate"
	seed(t, c, prefix, oldLayout)
	more := map[string]string{}
	for i := range 40 {
		h := fmt.Sprintf("app%02d", i)
		more["running_version/v1/"+h] = `{"time":"2026-11-20T10:00:00Z"}`
		more["status/puppet/success/"+h] = `{"time":"2026-11-20T10:00:00Z","version":"v1","detail":"","log_url":""}`
		more["metrics/app/"+h+"/load"] = fmt.Sprintf(`{"value":%d,"time":"2026-11-20T10:00:00Z"}`, i)
	}
	// Under two versions: the newer report is the one that moves.
	more["running_version/v0/app07"] = `{"time":"2026-11-19T10:00:00Z"}`
	seed(t, c, prefix, more)
	// app03 reported v2 itself since the upgrade: its record stands.
	if err := s.ReportVersion(ctx, "app03", "v2"); err != nil {
		t.Fatal(err)
	}
	before := readView(t, s)
	if before.Problems != 1 {
		t.Fatalf("before: %d problems, want app07 under two versions", before.Problems)
	}
	before.Problems = 0 // the migration heals it
	if before.Versions["app07"][:3] != "v1 " || before.Versions["app03"][:3] != "v2 " {
		t.Fatalf("before: app07 %s, app03 %s", before.Versions["app07"], before.Versions["app03"])
	}
	m, err := s.PlanMigration(ctx)
	if err != nil || len(m.Moves) != 4+5+40*3 || len(m.HeldSlots) != 0 || len(m.Unreadable) != 0 {
		t.Fatalf("plan: %d moves, %v %v %v", len(m.Moves), m.HeldSlots, m.Unreadable, err)
	}

	// web1's own status, written all through the migration.
	stop := make(chan struct{})
	var wg sync.WaitGroup
	var last string
	wg.Add(1)
	go func() {
		defer wg.Done()
		for i := 0; ; i++ {
			select {
			case <-stop:
				return
			default:
			}
			last = fmt.Sprintf("own write %d", i)
			if err := s.UpdateStatus(ctx, "web1", "puppet", store.StateRunning, store.StatusValue{Version: "v2", Detail: last}); err != nil {
				t.Error(err)
				return
			}
		}
	}()
	moved, err := s.Migrate(ctx)
	close(stop)
	wg.Wait()
	if err != nil {
		t.Fatal(err)
	}
	if len(moved) != len(m.Moves) {
		t.Errorf("moved %d, planned %d", len(moved), len(m.Moves))
	}
	for _, dir := range []string{"running_version/", "status/", "metrics/"} {
		if got := keys(t, c, prefix+"/"+dir); len(got) != 0 {
			t.Errorf("older keys left under %s: %v", dir, got)
		}
	}
	if d := dump(t, c, prefix+"/drain/"); strings.Contains(d[prefix+"/drain/web2"], "answer") {
		t.Errorf("the answer is still inside the request: %v", d)
	}
	after := readView(t, s)
	if st := after.Status["web1 puppet"]; st.State != store.StateRunning || st.Detail != last {
		t.Errorf("web1's own status %+v, want its last write %q", st, last)
	}
	delete(before.Status, "web1 puppet")
	delete(after.Status, "web1 puppet")
	if !reflect.DeepEqual(before, after) {
		t.Errorf("readers see other records after the migration:\nbefore %+v\nafter  %+v", before, after)
	}
	if d := dump(t, c, prefix+"/hosts/web2/"); !strings.Contains(d[prefix+"/hosts/web2/drain"], `"entry":"web.187a.1"`) {
		t.Errorf("web2's answer record: %v", d)
	}
	if m, err := s.PlanMigration(ctx); err != nil || m.Left() {
		t.Errorf("left after the migration: %+v %v", m, err)
	}
	// Again: nothing to do, nothing written.
	was := dump(t, c, prefix+"/")
	if moved, err := s.Migrate(ctx); err != nil || len(moved) != 0 {
		t.Errorf("second migration: %v %v", moved, err)
	}
	if !reflect.DeepEqual(was, dump(t, c, prefix+"/")) {
		t.Error("a second migration wrote")
	}
}

// Nothing moves while a rollout slot of the older layout is held (its key
// named after the holder's session), nor while an older key holds a value
// orchestrate did not write; each is named.
func TestNodeRestrictionMigrateRefuses(t *testing.T) {
	ctx := context.Background()
	s, c := newStore(t)
	const prefix = "test/orchestrate"
	seed(t, c, prefix, oldLayout)
	sess, _, err := c.Session().Create(&api.SessionEntry{Behavior: api.SessionBehaviorDelete, TTL: "60s"}, nil)
	if err != nil {
		t.Fatal(err)
	}
	slot := prefix + "/rollout/web/slot/" + sess
	if ok, _, err := c.KV().Acquire(&api.KVPair{Key: slot, Value: []byte(`{"host":"web1","version":"v2"}`), Session: sess}, nil); err != nil || !ok {
		t.Fatalf("acquire %v %v", ok, err)
	}
	was := dump(t, c, prefix+"/")
	_, err = s.Migrate(ctx)
	if !errors.Is(err, store.ErrSlotsHeld) || !strings.Contains(err.Error(), slot) {
		t.Fatalf("with a slot held: %v, want ErrSlotsHeld naming %s", err, slot)
	}
	if m, _ := s.PlanMigration(ctx); len(m.HeldSlots) != 1 || m.HeldSlots[0] != slot {
		t.Fatalf("plan: held slots %v", m.HeldSlots)
	}
	if !reflect.DeepEqual(was, dump(t, c, prefix+"/")) {
		t.Fatal("a refused migration wrote")
	}
	if _, err := c.Session().Destroy(sess, nil); err != nil {
		t.Fatal(err)
	}

	seed(t, c, prefix, map[string]string{"status/puppet/bogus/web3": `{}`, "metrics/web/web3/load": `{"value":"high"}`, "running_version/v1/web4": "garbage"})
	was = dump(t, c, prefix+"/")
	_, err = s.Migrate(ctx)
	var ie *store.InputError
	if !errors.As(err, &ie) {
		t.Fatalf("with unreadable older keys: %v, want an input error", err)
	}
	for _, k := range []string{"status/puppet/bogus/web3", "metrics/web/web3/load", "running_version/v1/web4"} {
		if !strings.Contains(err.Error(), prefix+"/"+k) {
			t.Errorf("the refusal does not name %s: %v", k, err)
		}
	}
	if !reflect.DeepEqual(was, dump(t, c, prefix+"/")) {
		t.Fatal("a refused migration wrote")
	}
}
