package store

import (
	"context"
	"testing"

	"github.com/jiocloud/orchestrate/internal/consultest"
)

// A log link the host writes between ForgetHost's read of its records
// and the transaction that deletes them is not lost: the delete checked
// against the index read rolls the transaction back (no departed record,
// nothing deleted), the forget reads again, and the departed record holds
// the link.
func TestForgetHostReadsAgainWhenAStatusMoves(t *testing.T) {
	a := consultest.Start(t, consultest.Options{})
	s, err := New(a.Client, "test/orchestrate")
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	if err := s.UpdateStatus(ctx, "web1", "puppet", StateRunning, StatusValue{Version: "v2"}); err != nil {
		t.Fatal(err)
	}
	const url = "https://swift.example.net/v1/AUTH_ops/logs/web1/v2/puppet/20261127T150405.006Z.log"
	reads := 0
	s.forgetRead = func() {
		reads++
		if reads > 1 {
			return
		}
		// Written with another store: the host's own converge.
		other, _ := New(a.Client, "test/orchestrate")
		if err := other.UpdateStatus(ctx, "web1", "puppet", StateFailed, StatusValue{Version: "v2", LogURL: url}); err != nil {
			t.Error(err)
		}
	}
	if err := s.ForgetHost(ctx, "web1"); err != nil {
		t.Fatal(err)
	}
	rec, found, err := s.Departed(ctx, "web1")
	if reads != 2 || err != nil || !found || rec.Logs["puppet"].LogURL != url || rec.Logs["puppet"].State != StateFailed {
		t.Fatalf("%d reads; departed record %+v, found %v, %v: want the link written between the read and the delete", reads, rec, found, err)
	}
	if ks, _, _ := a.Client.KV().Keys(HostDir(s.prefix, "web1"), "", nil); len(ks) != 0 {
		t.Fatalf("web1's records left: %v", ks)
	}
}
