package orchestrate

import (
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/consul/api"

	"github.com/jiocloud/orchestrate/internal/consultest"
	"github.com/jiocloud/orchestrate/internal/store/schema"
)

// putHookRequest writes the reaper's request for host's hook of entry in
// role web, as the reaper writes it.
func putHookRequest(t *testing.T, a *consultest.Agent, host, hook, entry string) {
	t.Helper()
	now := time.Now().UTC()
	v := fmt.Sprintf(`{"role":"web","host":%q,"hook":%q,"entry":%q,"reason":"replace web2 (unhealthy)","requested":%q,"deadline":%q,"default":"abandon"}`,
		host, hook, entry, now.Format(time.RFC3339), now.Add(10*time.Minute).Format(time.RFC3339))
	if _, err := a.Client.KV().Put(&api.KVPair{Key: "orchestrate/hook/web/" + host, Value: []byte(v)}, nil); err != nil {
		t.Fatal(err)
	}
}

// hookAnswerOf reads host's answer record, "" when none.
func hookAnswerOf(t *testing.T, a *consultest.Agent, host string) string {
	t.Helper()
	p, _, err := a.Client.KV().Get("orchestrate/hook-answer/web/"+host, nil)
	if err != nil {
		t.Fatal(err)
	}
	if p == nil {
		return ""
	}
	return string(p.Value)
}

// `orchestrate hook` on a real agent: bad input (a word other than
// continue or abandon, no hook waiting for the host, bad names, missing
// arguments) is exit 2 and writes nothing; Consul unreachable is exit 3.
func TestHookCommandsRefuseBadInput(t *testing.T) {
	a := consultest.Start(t, consultest.Options{})
	r := cli(t, a, "", "hook", "list", "--json")
	mustCode(t, r, 0, "hook list --json of none")
	if strings.TrimSpace(r.stdout) != "[]" {
		t.Fatalf("hook list --json of none = %q, want []", r.stdout)
	}
	putHookRequest(t, a, "web4", "launch", "web.e1")
	before := allKeys(t, a.Client)
	for _, tc := range []struct {
		name string
		args []string
		want string
	}{
		{"a word other than continue or abandon", []string{"complete", "web", "web4", "yes"}, `hook result "yes": want continue or abandon`},
		{"CONTINUE", []string{"complete", "web", "web4", "CONTINUE"}, `hook result "CONTINUE"`},
		{"no hook waits for the host", []string{"complete", "web", "web9", "continue"}, "no lifecycle hook of role web waits for web9, nothing written"},
		{"no hook of the role", []string{"complete", "db", "web4", "continue"}, "no lifecycle hook of role db waits for web4"},
		{"a host with a slash", []string{"complete", "web", "web/4", "continue"}, "contains a slash"},
		{"missing the result", []string{"complete", "web", "web4"}, "usage: orchestrate hook complete ROLE HOST continue|abandon"},
		{"an unknown action", []string{"answer", "web", "web4", "continue"}, `unknown action "answer"`},
		{"list with arguments", []string{"list", "web"}, "hook list: no arguments"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := cli(t, a, "", append([]string{"hook"}, tc.args...)...)
			mustCode(t, r, 2, tc.name)
			if !strings.Contains(r.stderr, tc.want) {
				t.Fatalf("stderr %q, want %q in it", r.stderr, tc.want)
			}
			if after := allKeys(t, a.Client); !slices.Equal(after, before) {
				t.Fatalf("wrote something: %v", after)
			}
		})
	}
	r = cli(t, a, "", "hook", "complete", "web", "web4", "continue", "--consul-addr", "127.0.0.1:1")
	mustCode(t, r, 3, "Consul unreachable")
	mustCode(t, cli(t, a, "", "hook", "list", "--consul-addr", "127.0.0.1:1"), 3, "list, Consul unreachable")
}

// An answer names the request's entry and hook; a second answer is exit 2
// and the first stands; the list shows each waiting hook with its answer;
// a word written by hand is no answer, named (exit 2), and replaced by a
// real one.
func TestHookComplete(t *testing.T) {
	a := consultest.Start(t, consultest.Options{})
	putHookRequest(t, a, "web4", "launch", "web.e1")
	putHookRequest(t, a, "web2", "terminate", "web.e1")
	r := cli(t, a, "", "hook", "complete", "web", "web4", "continue", "--by", "inventory", "--detail", "registered in the CMDB")
	mustCode(t, r, 0, "hook complete")
	var ans schema.HookAnswer
	if err := json.Unmarshal([]byte(hookAnswerOf(t, a, "web4")), &ans); err != nil || ans.Entry != "web.e1" || ans.Hook != "launch" || ans.Result != "continue" ||
		ans.By != "inventory" || ans.Detail != "registered in the CMDB" {
		t.Fatalf("answer %+v %v", ans, err)
	}
	first := hookAnswerOf(t, a, "web4")
	r = cli(t, a, "", "hook", "complete", "web", "web4", "abandon")
	mustCode(t, r, 2, "a second answer")
	if !strings.Contains(r.stderr, "was answered already, nothing written: continue by inventory") || hookAnswerOf(t, a, "web4") != first {
		t.Fatalf("second answer: %q; record %s", r.stderr, hookAnswerOf(t, a, "web4"))
	}
	r = cli(t, a, "", "hook", "list")
	mustCode(t, r, 0, "hook list")
	if lines := strings.Split(strings.TrimSpace(r.stdout), "\n"); len(lines) != 3 || !strings.Contains(lines[1], "web2") || !strings.Contains(lines[1], "on_terminate") ||
		!strings.Contains(lines[2], "continue (inventory") {
		t.Fatalf("hook list:\n%s", r.stdout)
	}
	r = cli(t, a, "", "hook", "list", "--json", "--role", "web")
	var list []hookView
	if err := json.Unmarshal([]byte(r.stdout), &list); err != nil || len(list) != 2 || list[1].Answer == nil || list[1].Answer.Result != "continue" || list[0].Answer != nil {
		t.Fatalf("hook list --json: %v %s", err, r.stdout)
	}
	// A word written by hand is no answer: named, exit 2, and replaced
	// by a real one.
	if _, err := a.Client.KV().Put(&api.KVPair{Key: "orchestrate/hook-answer/web/web2", Value: []byte("continue")}, nil); err != nil {
		t.Fatal(err)
	}
	r = cli(t, a, "", "hook", "list")
	mustCode(t, r, 2, "hook list with a word written by hand")
	if !strings.Contains(r.stderr, "orchestrate/hook-answer/web/web2: not a hook answer") || !strings.Contains(r.stdout, "web2") {
		t.Fatalf("hook list: %s\n%s", r.stderr, r.stdout)
	}
	mustCode(t, cli(t, a, "", "hook", "complete", "web", "web2", "abandon"), 0, "an answer over a word")
}
