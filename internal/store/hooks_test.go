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

// hookRequest is the reaper's request for web4's launch hook of entry.
func hookRequest(entry string) map[string]string {
	return map[string]string{"hook/web/web4": fmt.Sprintf(`{"role":"web","host":"web4","hook":"launch","entry":%q,"reason":"2 of desired 3",`+
		`"requested":"2026-11-25T12:00:00Z","deadline":"2099-01-01T00:00:00Z","default":"abandon"}`, entry)}
}

// An answer lands only on a waiting hook, names its entry and hook, and
// the first stands: no request, a bad result, a second answer write
// nothing; an answer to an earlier entry, or a record that is no answer,
// is none, and a new answer replaces it.
func TestHookAnswerNamesItsRequest(t *testing.T) {
	ctx := context.Background()
	s, c := newStore(t)
	ans := func(result, by string) schema.HookAnswer {
		return schema.HookAnswer{Result: result, Time: time.Now().UTC(), By: by}
	}
	if _, err := s.AnswerHook(ctx, "web", "web4", ans("continue", "t")); !errors.Is(err, store.ErrNoHook) {
		t.Fatalf("answering no hook: %v, want ErrNoHook", err)
	}
	seed(t, c, "test/orchestrate", hookRequest("web.1"))
	if _, err := s.AnswerHook(ctx, "web", "web4", ans("yes", "t")); !errors.As(err, new(*store.InputError)) {
		t.Fatalf("answering yes: %v, want an input error", err)
	}
	if _, err := s.AnswerHook(ctx, "db", "web4", ans("continue", "t")); !errors.Is(err, store.ErrNoHook) {
		t.Fatalf("answering under another role: %v, want ErrNoHook", err)
	}
	if got := keys(t, c, "test/orchestrate/hook-answer/"); len(got) != 0 {
		t.Fatalf("refused answers wrote %v", got)
	}
	r, err := s.AnswerHook(ctx, "web", "web4", ans("abandon", "inventory"))
	if err != nil || r.Answer == nil || r.Answer.Entry != "web.1" || r.Answer.Hook != schema.HookLaunch || r.Answer.Result != schema.HookAbandon {
		t.Fatalf("first answer: %+v %v", r, err)
	}
	r, err = s.AnswerHook(ctx, "web", "web4", ans("continue", "operator"))
	if !errors.Is(err, store.ErrHookAnswered) || r.Answer.By != "inventory" {
		t.Fatalf("second answer: %+v %v, want ErrHookAnswered with the first", r, err)
	}
	snap, err := s.Snapshot(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if req, ok := snap.Hooks.Request("web", "web4"); !ok || req.Answer == nil || req.Answer.Result != schema.HookAbandon {
		t.Fatalf("snapshot: %+v", snap.Hooks)
	}
	// A new entry's hook: the earlier answer is none; a record that is no
	// answer is named, never taken for one, and replaced by an answer.
	seed(t, c, "test/orchestrate", hookRequest("web.2"))
	seed(t, c, "test/orchestrate", map[string]string{"hook-answer/web/web4": "continue"})
	snap, _ = s.Snapshot(ctx)
	req, _ := snap.Hooks.Request("web", "web4")
	if req.Answer != nil || !strings.Contains(snap.Hooks.Problem("web", "web4"), "not a hook answer") || len(snap.Problems) != 1 {
		t.Fatalf("a word taken for an answer: %+v, problems %v", req.Answer, snap.Problems)
	}
	if r, err = s.AnswerHook(ctx, "web", "web4", ans("continue", "operator")); err != nil || r.Answer.Entry != "web.2" {
		t.Fatalf("answer over a word: %+v %v", r, err)
	}
	hooks, err := s.Hooks(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if req, _ := hooks.Request("web", "web4"); req.Answer == nil || req.Answer.Entry != "web.2" {
		t.Fatalf("Hooks: %+v", hooks)
	}
	// Forgetting web4 removes its hook's request and answer.
	if err := s.ForgetHost(ctx, "web4"); err != nil {
		t.Fatal(err)
	}
	if got := append(keys(t, c, "test/orchestrate/hook/"), keys(t, c, "test/orchestrate/hook-answer/")...); len(got) != 0 {
		t.Fatalf("after ForgetHost: %v", got)
	}
}

// Racing answers to one hook: one stands, every other caller is told the
// hook was answered.
func TestRacingHookAnswers(t *testing.T) {
	ctx := context.Background()
	s, c := newStore(t)
	ans := func(result, by string) schema.HookAnswer {
		return schema.HookAnswer{Result: result, Time: time.Now().UTC(), By: by}
	}
	seed(t, c, "test/orchestrate", hookRequest("web.3"))
	var wg sync.WaitGroup
	var mu sync.Mutex
	won, lost := 0, 0
	for i := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			_, err := s.AnswerHook(ctx, "web", "web4", ans("continue", fmt.Sprint(i)))
			mu.Lock()
			defer mu.Unlock()
			switch {
			case err == nil:
				won++
			case errors.Is(err, store.ErrHookAnswered):
				lost++
			default:
				t.Error(err)
			}
		}()
	}
	wg.Wait()
	if won != 1 || lost != 7 {
		t.Fatalf("racing answers: %d recorded, %d told it was answered; want 1 and 7", won, lost)
	}
}
