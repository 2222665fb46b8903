package store_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/consul/api"

	"github.com/jiocloud/orchestrate/internal/store"
)

// A host's heartbeat is one of its own records: the snapshot sees its
// movement (Consul's index, whatever time the record says) and a value
// that is no heartbeat is named as a problem, its index counted all the
// same (a write is a write).
func TestHeartbeatRecords(t *testing.T) {
	s, c := newStore(t)
	ctx := context.Background()
	if err := s.Heartbeat(ctx, "web1"); err != nil {
		t.Fatal(err)
	}
	snap, err := s.Snapshot(ctx)
	if err != nil {
		t.Fatal(err)
	}
	r := snap.Records["web1"]
	if r.Index == 0 || r.Keys != 1 || time.Since(r.Heartbeat) > time.Minute {
		t.Fatalf("web1's records = %+v, want its heartbeat", r)
	}
	if _, listed := snap.Hosts["web1"]; listed {
		t.Fatal("a heartbeat alone makes web1 a host with a version or status")
	}
	// By hand: a time far in the future, then garbage.
	for _, v := range []string{`{"time":"2999-01-01T00:00:00Z"}`, `not json`} {
		if _, err := c.KV().Put(&api.KVPair{Key: store.HeartbeatKey("test/orchestrate", "web1"), Value: []byte(v)}, nil); err != nil {
			t.Fatal(err)
		}
		next, err := s.Snapshot(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if got := next.Records["web1"]; got.Index <= r.Index {
			t.Fatalf("%s: index %d, want it moved past %d", v, got.Index, r.Index)
		}
		r = next.Records["web1"]
		if v == "not json" && (len(next.Problems) != 1 || !strings.Contains(next.Problems[0].Problem, "not a heartbeat")) {
			t.Fatalf("problems %v, want the garbage named", next.Problems)
		}
	}
}

// The removal of an orphan's records: every key under hosts/<host>/ and
// nothing else, in one transaction of deletes checked against the index
// read; a record written since the caller's read, or between the read and
// the transaction, keeps them all.
func TestForgetRecordsOps(t *testing.T) {
	s, c := newStore(t)
	ctx := context.Background()
	for _, w := range []func() error{
		func() error { return s.Heartbeat(ctx, "web7") },
		func() error { return s.UpdateStatus(ctx, "web7", "puppet", "success", store.StatusValue{}) },
		func() error { return s.ReportVersion(ctx, "web7", "v1") },
		func() error { return s.Heartbeat(ctx, "web70") }, // shares web7's prefix
	} {
		if err := w(); err != nil {
			t.Fatal(err)
		}
	}
	seed(t, c, "test/orchestrate", map[string]string{"status/puppet/success/web7": `{"time":"2026-11-20T10:00:00Z"}`, "drain/web7": `{}`})
	snap, err := s.Snapshot(ctx)
	if err != nil {
		t.Fatal(err)
	}
	idx := snap.Records["web7"].Index
	if _, err := s.ForgetRecordsOps(ctx, "web7", idx-1); !errors.Is(err, store.ErrRecordsMoved) {
		t.Fatalf("a record newer than the index read: %v, want ErrRecordsMoved", err)
	}
	ops, err := s.ForgetRecordsOps(ctx, "web7", idx)
	if err != nil || len(ops) != 3 {
		t.Fatalf("ops %v, %v: want 3 checked deletes", ops, err)
	}
	// The host writes between the read and the transaction.
	if err := s.Heartbeat(ctx, "web7"); err != nil {
		t.Fatal(err)
	}
	if ok, _, _, err := c.KV().Txn(ops, nil); ok || err != nil {
		t.Fatalf("transaction over a moved record: ok %v, %v; want it rolled back", ok, err)
	}
	if got := keys(t, c, "test/orchestrate/hosts/web7/"); len(got) != 3 {
		t.Fatalf("web7's records after the rolled back removal: %v", got)
	}
	snap, _ = s.Snapshot(ctx)
	ops, err = s.ForgetRecordsOps(ctx, "web7", snap.Records["web7"].Index)
	if err != nil {
		t.Fatal(err)
	}
	if ok, resp, _, err := c.KV().Txn(ops, nil); !ok || err != nil {
		t.Fatalf("removal: ok %v, %v, %v", ok, err, resp)
	}
	if got := keys(t, c, "test/orchestrate/hosts/web7/"); len(got) != 0 {
		t.Fatalf("web7's records left: %v", got)
	}
	for _, k := range []string{"test/orchestrate/hosts/web70/heartbeat", "test/orchestrate/status/puppet/success/web7", "test/orchestrate/drain/web7"} {
		if p, _, _ := c.KV().Get(k, nil); p == nil {
			t.Fatalf("%s removed with web7's own records", k)
		}
	}
	if _, err := s.ForgetRecordsOps(ctx, "../web7", 1); err == nil {
		t.Fatal("a host name that is no name accepted")
	}
	// More keys than one transaction takes (written by hand): refused.
	many := map[string]string{}
	for i := 0; i < 130; i++ {
		many[fmt.Sprintf("hosts/web8/junk%d", i)] = "x"
	}
	seed(t, c, "test/orchestrate", many)
	if _, err := s.ForgetRecordsOps(ctx, "web8", 1<<62); err == nil || !strings.Contains(err.Error(), "holds 130 keys, more than one transaction removes (126)") {
		t.Fatalf("130 keys: %v", err)
	}
}

// What the heartbeat costs a fleet, measured on a real (dev) agent: one
// ring of 1,000 hosts is 1,000 writes of one small key each, and adds
// that many keys to the reaper's one listing of the prefix per cycle.
// The figures are in docs/orchestrate.md ("Silent hosts").
func TestHeartbeatCostForAFleet(t *testing.T) {
	s, c := newStore(t)
	ctx := context.Background()
	const hosts, workers = 1000, 8
	start := time.Now()
	errs := make(chan error, workers)
	for w := 0; w < workers; w++ {
		go func(w int) {
			var err error
			for i := w; i < hosts && err == nil; i += workers {
				err = s.Heartbeat(ctx, fmt.Sprintf("web%d", i))
			}
			errs <- err
		}(w)
	}
	for w := 0; w < workers; w++ {
		if err := <-errs; err != nil {
			t.Fatal(err)
		}
	}
	ring := time.Since(start)
	pairs, _, err := c.KV().List("test/orchestrate/hosts/", nil)
	if err != nil {
		t.Fatal(err)
	}
	var bytes int
	for _, p := range pairs {
		bytes += len(p.Key) + len(p.Value)
	}
	start = time.Now()
	snap, err := s.Snapshot(ctx)
	if err != nil {
		t.Fatal(err)
	}
	read := time.Since(start)
	if len(pairs) != hosts || len(snap.Records) != hosts {
		t.Fatalf("%d keys, %d hosts in the snapshot, want %d", len(pairs), len(snap.Records), hosts)
	}
	t.Logf("%d heartbeats (%d writers): %s, %.0f writes/s; %d bytes of keys and values (%d a host); a snapshot of them: %s",
		hosts, workers, ring.Round(time.Millisecond), float64(hosts)/ring.Seconds(), bytes, bytes/hosts, read.Round(time.Millisecond))
}

// Only a host's own failed provisioned record counts for the reaper: one
// in the older layout (any node could write it before node restriction)
// does not, nor one that cannot be read.
func TestProvisionFailuresOwnRecordsOnly(t *testing.T) {
	s, c := newStore(t)
	ctx := context.Background()
	if err := s.UpdateStatus(ctx, "web1", store.CategoryProvisioned, store.StateFailed, store.StatusValue{Detail: "step puppet failed (exit 1)"}); err != nil {
		t.Fatal(err)
	}
	if err := s.UpdateStatus(ctx, "web4", store.CategoryProvisioned, store.StateSuccess, store.StatusValue{}); err != nil {
		t.Fatal(err)
	}
	seed(t, c, "test/orchestrate", map[string]string{
		"status/provisioned/failed/web2": `{"time":"2026-11-20T10:00:00Z","detail":"forged"}`,
		"hosts/web3/status/provisioned":  `{"state":"failed",`,
	})
	snap, err := s.Snapshot(ctx)
	if err != nil {
		t.Fatal(err)
	}
	got := snap.ProvisionFailures()
	if len(got) != 1 || got["web1"].Detail != "step puppet failed (exit 1)" {
		t.Fatalf("provision failures %+v, want web1's only", got)
	}
	if snap.Hosts["web2"].Status[store.CategoryProvisioned].State != store.StateFailed {
		t.Fatal("the older record is not shown to readers any more")
	}
}
