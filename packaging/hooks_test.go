package packaging_test

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/consul/api"

	"github.com/jiocloud/orchestrate/internal/store/reaperkv"
)

// hookWorld is restrictedWorld with the reaper's launch hook requests for
// web1 and web2 (role web), written with the management token as the
// reaper's would be.
func hookWorld(t *testing.T) (w *aclWorld, web1 string) {
	t.Helper()
	w, web1, _ = restrictedWorld(t)
	now := time.Now().UTC()
	for _, h := range []string{"web1", "web2"} {
		req := fmt.Sprintf(`{"role":"web","host":%q,"hook":"launch","entry":"web.%s.9","reason":"3 of desired 4","requested":%q,"deadline":%q,"default":"abandon"}`,
			h, h, now.Format(time.RFC3339), now.Add(time.Hour).Format(time.RFC3339))
		if _, err := w.admin.KV().Put(&api.KVPair{Key: "orchestrate/hook/web/" + h, Value: []byte(req)}, nil); err != nil {
			t.Fatal(err)
		}
	}
	return w, web1
}

// No node's token answers a lifecycle hook, its own or another's: the
// hook is another system's gate on the node (an inventory, a cache), which
// the node must not pass by itself, and the reaper acts on nothing a node
// could write about another. web1's token, through orchestrate and raw,
// the read-only operator's, and a handler's without its answer rule are
// refused (exit 3 naming key:write, 403) and write nothing.
func TestNodeRestrictionHookAnswers(t *testing.T) {
	t.Parallel()
	w, web1 := hookWorld(t)
	before := w.kvDump(t)
	must(t, "web1 answering its own launch hook", w.run(t, web1, "orchestrate", "hook", "complete", "web", "web1", "continue"), 3, "the token needs key:write")
	must(t, "web1 answering web2's launch hook", w.run(t, web1, "orchestrate", "hook", "complete", "web", "web2", "abandon"), 3, "the token needs key:write")
	kv := w.clientOf(t, web1).KV()
	for _, k := range []string{"orchestrate/hook-answer/web/web1", "orchestrate/hook-answer/web/web2", "orchestrate/hook/web/web2"} {
		_, err := kv.Put(&api.KVPair{Key: k, Value: []byte(`{"entry":"web.web2.9","hook":"launch","result":"continue","time":"2026-11-25T12:00:00Z","by":"web1"}`)}, nil)
		if err == nil || !strings.Contains(err.Error(), "Permission denied") {
			t.Errorf("web1's token writing %s: %v, want Permission denied", k, err)
		}
	}
	reader := w.token(t, policyText(t, "operator.hcl", ""))
	must(t, "the read-only operator answering", w.run(t, reader, "orchestrate", "hook", "complete", "web", "web2", "continue"), 3, "the token needs key:write")
	noRule := w.token(t, policyText(t, "hook-handler.hcl", `key_prefix "orchestrate/hook-answer/"`))
	must(t, "a handler without its answer rule", w.run(t, noRule, "orchestrate", "hook", "complete", "web", "web2", "continue"), 3, "the token needs key:write")
	dbOnly := w.token(t, strings.Replace(policyText(t, "hook-handler.hcl", ""), `"orchestrate/hook-answer/"`, `"orchestrate/hook-answer/db/"`, 1))
	must(t, "a handler confined to role db answering web's", w.run(t, dbOnly, "orchestrate", "hook", "complete", "web", "web2", "continue"), 3, "the token needs key:write")
	w.sameKV(t, "the refused answers", before)
}

// The shipped hook-handler.hcl lists the waiting hooks, reads the
// reaper's hook events and answers any role's hooks; the shipped
// reaper.hcl fires the event (without its rule: refused).
func TestACLHookHandlerPolicy(t *testing.T) {
	t.Parallel()
	w, _ := hookWorld(t)
	reaperTok := w.token(t, policyText(t, "reaper.hcl", ""))
	ev := &api.UserEvent{Name: reaperkv.HookEvent, Payload: []byte(`{"role":"web","host":"web2","hook":"launch","entry":"web.web2.9"}`)}
	if _, _, err := w.clientOf(t, reaperTok).Event().Fire(ev, nil); err != nil {
		t.Fatalf("the reaper's token firing %s: %v", reaperkv.HookEvent, err)
	}
	noEvent := w.token(t, policyText(t, "reaper.hcl", `event "reaper-hook"`))
	if _, _, err := w.clientOf(t, noEvent).Event().Fire(ev, nil); err == nil || !strings.Contains(err.Error(), "Permission denied") {
		t.Errorf("the reaper without its event rule firing %s: %v, want Permission denied", reaperkv.HookEvent, err)
	}
	handler := w.token(t, policyText(t, "hook-handler.hcl", ""))
	if evs, _, err := w.clientOf(t, handler).Event().List(reaperkv.HookEvent, nil); err != nil || len(evs) != 1 {
		t.Errorf("the handler's events: %d, %v; want the reaper's one", len(evs), err)
	}
	r := w.run(t, handler, "orchestrate", "hook", "list", "--json")
	must(t, "hook list", r, 0, "")
	if !strings.Contains(r.stdout, `"host": "web1"`) || !strings.Contains(r.stdout, `"host": "web2"`) {
		t.Errorf("hook list:\n%s", r.stdout)
	}
	must(t, "the handler answering web2's hook", w.run(t, handler, "orchestrate", "hook", "complete", "web", "web2", "abandon", "--by", "inventory"), 0, "")
	if got := w.kvDump(t)["orchestrate/hook-answer/web/web2"]; !strings.Contains(got, `"entry":"web.web2.9"`) || !strings.Contains(got, `"result":"abandon"`) {
		t.Errorf("web2's answer record: %q", got)
	}
}
