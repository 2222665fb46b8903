package store_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jiocloud/orchestrate/internal/store"
	"github.com/jiocloud/orchestrate/internal/store/schema"
)

// An upgraded cloud reads its history: with only the older layout every
// reader sees what it saw before (versions, states, the suspect failure,
// loads, the drain answer); a host's own record of a kind then stands over
// its older one of that kind alone.
func TestNodeRestrictionReadsTheOlderLayout(t *testing.T) {
	ctx := context.Background()
	s, c := newStore(t)
	seed(t, c, "test/orchestrate", oldLayout)
	snap, err := s.Snapshot(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(snap.Problems) != 0 || len(snap.OldLayout) != len(oldLayout) {
		t.Fatalf("problems %v, older keys %v", snap.Problems, snap.OldLayout)
	}
	w1, w2 := snap.Hosts["web1"], snap.Hosts["web2"]
	if w1 == nil || w2 == nil || w1.Version != "v1" || w2.Version != "v1" || w1.Status["puppet"].LogURL != "http://logs/web1" ||
		w2.Status["validation"].State != store.StatePending || !w2.Status["validation"].Waiting {
		t.Fatalf("hosts %+v %+v", w1, w2)
	}
	if got := snap.Suspects(); len(got) != 1 || got["web2"] != "Exec[x] returned 1" {
		t.Fatalf("suspects %v", got)
	}
	if got := snap.Validated(); len(got) != 1 || !got["web1"] {
		t.Fatalf("validated %v", got)
	}
	if m := snap.Scaling.Metrics; m["web1"]["load"].Value != 0.73 || m["web1"]["load"].Role != "web" || m["web2"]["load"].Value != 0.2 {
		t.Fatalf("metrics %+v", m)
	}
	if d := snap.Scaling.Drains["web2"]; d.Answer == nil || !d.Answer.Drained || d.Entry != "web.187a.1" {
		t.Fatalf("drain %+v", d)
	}
	if d, _, err := s.Drain(ctx, "web2"); err != nil || d.Answer == nil || !d.Answer.Drained {
		t.Fatalf("Drain(web2) = %+v %v", d, err)
	}
	if v, err := s.HostVersions(ctx, "web1"); err != nil || len(v) != 1 || v[0] != "v1" {
		t.Fatalf("HostVersions(web1) = %v %v", v, err)
	}
	if st, err := s.HostStatus(ctx, "web2"); err != nil || st["puppet"].State != store.StateFailed || !st["puppet"].Suspect || len(st) != 2 {
		t.Fatalf("HostStatus(web2) = %+v %v", st, err)
	}

	// web1 writes its own puppet state and version, web2 its own load:
	// each stands over the older record of its kind; the others still
	// read from the older layout.
	if err := s.UpdateStatus(ctx, "web1", "puppet", store.StateRunning, store.StatusValue{Version: "v2"}); err != nil {
		t.Fatal(err)
	}
	if err := s.ReportVersion(ctx, "web1", "v2"); err != nil {
		t.Fatal(err)
	}
	if err := s.ReportMetric(ctx, "web", "web2", "load", 0.9); err != nil {
		t.Fatal(err)
	}
	snap, err = s.Snapshot(ctx)
	if err != nil {
		t.Fatal(err)
	}
	w1 = snap.Hosts["web1"]
	if w1.Version != "v2" || w1.Status["puppet"].State != store.StateRunning || w1.Status["validation"].State != store.StateSuccess {
		t.Fatalf("web1 %+v", w1)
	}
	if m := snap.Scaling.Metrics; m["web2"]["load"].Value != 0.9 || m["web1"]["load"].Value != 0.73 {
		t.Fatalf("metrics %+v", m)
	}
	if st, err := s.HostStatus(ctx, "web1"); err != nil || st["puppet"].State != store.StateRunning || st["validation"].State != store.StateSuccess {
		t.Fatalf("HostStatus(web1) = %+v %v", st, err)
	}
	if v, err := s.HostVersions(ctx, "web1"); err != nil || len(v) != 1 || v[0] != "v2" {
		t.Fatalf("HostVersions(web1) = %v %v", v, err)
	}
}

// A drain answer is the host's own record naming the request's entry: the
// first answer counts; an answer to an earlier request is none; a new
// request is answered over it; with no request there is nothing to answer.
func TestDrainAnswerNamesItsRequest(t *testing.T) {
	ctx := context.Background()
	s, c := newStore(t)
	request := func(entry string) {
		t.Helper()
		seed(t, c, "test/orchestrate", map[string]string{"drain/web3": fmt.Sprintf(
			`{"requested":"2026-11-20T10:05:00Z","role":"web","entry":%q,"reason":"surplus","deadline":"2099-01-01T00:00:00Z"}`, entry)})
	}
	if _, err := s.AnswerDrain(ctx, "web3", schema.DrainAnswer{Time: time.Now(), By: "t", Drained: true}); !errors.Is(err, store.ErrNoDrain) {
		t.Fatalf("answering no request: %v, want ErrNoDrain", err)
	}
	if got := keys(t, c, "test/"); len(got) != 0 {
		t.Fatalf("answering no request wrote %v", got)
	}
	request("web.1")
	d, err := s.AnswerDrain(ctx, "web3", schema.DrainAnswer{Time: time.Now(), By: "handler", Drained: false, Detail: "no room"})
	if err != nil || d.Answer == nil || d.Answer.Drained || d.Answer.Entry != "web.1" {
		t.Fatalf("first answer: %+v %v", d, err)
	}
	d, err = s.AnswerDrain(ctx, "web3", schema.DrainAnswer{Time: time.Now(), By: "platform", Drained: true})
	if err != nil || d.Answer.Drained || d.Answer.By != "handler" {
		t.Fatalf("second answer: %+v %v, want the first one standing", d.Answer, err)
	}
	p, _, err := c.KV().Get("test/orchestrate/hosts/web3/drain", nil)
	if err != nil || p == nil || !strings.Contains(string(p.Value), `"entry":"web.1"`) {
		t.Fatalf("the answer record: %v %v", p, err)
	}
	if p, _, _ := c.KV().Get("test/orchestrate/drain/web3", nil); strings.Contains(string(p.Value), "answer") {
		t.Fatalf("the answer went into the reaper's request: %s", p.Value)
	}
	// A new request (a new journal entry): the earlier answer is none.
	request("web.2")
	snap, err := s.Snapshot(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if a := snap.Scaling.Drains["web3"].Answer; a != nil {
		t.Fatalf("an answer to web.1 taken for web.2: %+v", a)
	}
	if d, _, err := s.Drain(ctx, "web3"); err != nil || d.Answer != nil {
		t.Fatalf("Drain: %+v %v", d, err)
	}
	d, err = s.AnswerDrain(ctx, "web3", schema.DrainAnswer{Time: time.Now(), By: "platform", Drained: true})
	if err != nil || !d.Answer.Drained || d.Answer.Entry != "web.2" {
		t.Fatalf("answer to web.2: %+v %v", d, err)
	}
	snap, _ = s.Snapshot(ctx)
	if a := snap.Scaling.Drains["web3"].Answer; a == nil || !a.Drained || a.By != "platform" {
		t.Fatalf("snapshot answer %+v", a)
	}
	// Racing answers: one stands, every caller gets that one.
	request("web.3")
	var wg sync.WaitGroup
	got := make([]string, 8)
	for i := range got {
		wg.Add(1)
		go func() {
			defer wg.Done()
			d, err := s.AnswerDrain(ctx, "web3", schema.DrainAnswer{Time: time.Now(), By: fmt.Sprint(i), Drained: true})
			if err != nil {
				t.Error(err)
				return
			}
			got[i] = d.Answer.By
		}()
	}
	wg.Wait()
	for _, by := range got {
		if by != got[0] {
			t.Fatalf("racing answers saw different winners: %v", got)
		}
	}
}
