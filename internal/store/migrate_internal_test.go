package store

import (
	"context"
	"strings"
	"testing"

	"github.com/hashicorp/consul/api"
	"github.com/jiocloud/orchestrate/internal/consultest"
)

// The race a migration can lose, made to happen: the plan is read, then
// the host writes its own record of a kind being moved (and a node of the
// older version rewrites one of its older keys), then the planned
// transaction commits. It must roll back whole (nothing half moved, the
// host's record not overwritten), and the move planned again from a new
// read leaves the host's record standing and deletes the older keys.
func TestNodeRestrictionMigrateLosesTheRaceToTheHost(t *testing.T) {
	ctx := context.Background()
	a := consultest.Start(t, consultest.Options{})
	s, err := New(a.Client, "orchestrate")
	if err != nil {
		t.Fatal(err)
	}
	kv := a.Client.KV()
	for k, v := range map[string]string{
		"orchestrate/status/puppet/failed/web1": `{"time":"2026-11-20T10:00:00Z","version":"v1","detail":"old","log_url":""}`,
		"orchestrate/running_version/v1/web1":   `{"time":"2026-11-20T10:00:00Z"}`,
	} {
		if _, err := kv.Put(&api.KVPair{Key: k, Value: []byte(v)}, nil); err != nil {
			t.Fatal(err)
		}
	}
	p, err := s.planMigration(ctx)
	if err != nil || len(p.byHost["web1"]) != 2 {
		t.Fatalf("plan %+v %v", p, err)
	}
	if err := s.UpdateStatus(ctx, "web1", "puppet", StateSuccess, StatusValue{Version: "v2", Detail: "mine"}); err != nil {
		t.Fatal(err)
	}
	var done []OldRecords
	left, err := s.commitMoves(ctx, "web1", p.byHost["web1"], &done)
	if err != nil || len(left) != 2 || len(done) != 0 {
		t.Fatalf("commit after the host's write: left %d, done %v, %v; want the transaction rolled back", len(left), done, err)
	}
	if got, _, _ := kv.Keys("orchestrate/running_version/", "", nil); len(got) != 1 {
		t.Fatalf("half moved: the version's older key went with a rolled-back transaction: %v", got)
	}
	if got, _, _ := kv.Get("orchestrate/hosts/web1/version", nil); got != nil {
		t.Fatalf("half moved: the version record was written by a rolled-back transaction: %s", got.Value)
	}
	// A node of the older version rewrites an older key: planned
	// deletes check its index too.
	if _, err := kv.Put(&api.KVPair{Key: "orchestrate/running_version/v1/web1", Value: []byte(`{"time":"2026-11-20T11:00:00Z"}`)}, nil); err != nil {
		t.Fatal(err)
	}
	p2, err := s.planMigration(ctx)
	if err != nil {
		t.Fatal(err)
	}
	moves := p2.byHost["web1"]
	if _, err := kv.Put(&api.KVPair{Key: "orchestrate/running_version/v1/web1", Value: []byte(`{"time":"2026-11-20T12:00:00Z"}`)}, nil); err != nil {
		t.Fatal(err)
	}
	if left, err := s.commitMoves(ctx, "web1", moves, &done); err != nil || len(left) != 2 {
		t.Fatalf("commit after an older key moved: left %d, %v; want rolled back", len(left), err)
	}
	moved, err := s.migrateHost(ctx, "web1", moves)
	if err != nil || len(moved) != 2 {
		t.Fatalf("migrate web1: %v %v", moved, err)
	}
	for _, m := range moved {
		if m.Kind == "status/puppet" && !m.Stands {
			t.Errorf("the host's own status did not stand: %+v", m)
		}
	}
	st, _, err := kv.Get("orchestrate/hosts/web1/status/puppet", nil)
	if err != nil || !strings.Contains(string(st.Value), `"detail":"mine"`) {
		t.Fatalf("the host's own status: %s %v", st.Value, err)
	}
	v, _, err := kv.Get("orchestrate/hosts/web1/version", nil)
	if err != nil || v == nil || !strings.Contains(string(v.Value), `"time":"2026-11-20T12:00:00Z"`) {
		t.Fatalf("the version moved is not the latest older one: %v %v", v, err)
	}
	if got, _, _ := kv.Keys("orchestrate/", "", nil); strings.Join(got, " ") != "orchestrate/hosts/web1/status/puppet orchestrate/hosts/web1/version" {
		t.Fatalf("keys %v", got)
	}
}
