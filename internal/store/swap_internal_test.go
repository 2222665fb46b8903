package store

import (
	"context"
	"testing"

	"github.com/hashicorp/consul/api"

	"github.com/jiocloud/orchestrate/internal/consultest"
	"github.com/jiocloud/orchestrate/internal/store/schema"
)

// The old value a write reports is the one it replaced: a version another
// writer sets between the swap's read and its transaction rolls the
// check-and-set back; the swap reads again and reports the other
// writer's version, not the one it first read.
func TestSwapReportsTheValueItReplaced(t *testing.T) {
	a := consultest.Start(t, consultest.Options{})
	s, err := New(a.Client, schema.DefaultPrefix)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	if err := s.SetCurrentVersion(ctx, "41"); err != nil {
		t.Fatal(err)
	}
	reads := 0
	s.swapRead = func() {
		reads++
		if reads == 1 {
			other, _ := New(a.Client, schema.DefaultPrefix)
			if err := other.SetCurrentVersion(ctx, "41.1"); err != nil {
				t.Error(err)
			}
		}
	}
	old, had, err := s.SwapCurrentVersion(ctx, "42")
	if err != nil || !had || old != "41.1" || reads != 2 {
		t.Fatalf("swap: old %q (had %t), %v after %d reads; want the other writer's 41.1, replaced on the second", old, had, err, reads)
	}
	if v, _ := s.CurrentVersion(ctx); v != "42" {
		t.Fatalf("current version %q, want 42", v)
	}

	// Scale: the count and the override move together; a guard that
	// refuses the count it sees writes nothing.
	s.swapRead = nil
	if err := s.Scale(ctx, "web", 4, schema.Override{By: "ops"}); err != nil {
		t.Fatal(err)
	}
	reads = 0
	s.swapRead = func() {
		reads++
		if reads == 1 {
			if _, err := a.Client.KV().Put(&api.KVPair{Key: DesiredKey(s.prefix, "web"), Value: []byte("9")}, nil); err != nil {
				t.Error(err)
			}
		}
	}
	b, err := s.SwapScale(ctx, "web", 6, schema.Override{By: "ops"}, nil)
	if err != nil || b.Desired != 9 || b.Override == nil || b.Override.Count != 4 {
		t.Fatalf("scale: before %+v, %v; want 9 (the other writer's) with the override of 4", b, err)
	}
	if n, _, _ := s.Desired(ctx, "web"); n != 6 {
		t.Fatalf("desired %d, want 6", n)
	}
}
