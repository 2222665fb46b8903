package schema

import (
	"strings"
	"testing"
)

// Only a complete answer naming an entry, a hook and continue or abandon
// is an answer: a word, a JSON written by hand, another result, a missing
// field are errors naming what is wrong, never a continue.
func TestParseHookAnswer(t *testing.T) {
	good := `{"entry":"web.1","hook":"launch","result":"continue","time":"2026-11-25T12:00:00Z","by":"inventory"}`
	if a, err := ParseHookAnswer([]byte(good)); err != nil || a.Result != HookContinue || a.Entry != "web.1" {
		t.Fatalf("a good answer: %+v %v", a, err)
	}
	for _, tc := range []struct{ name, value, want string }{
		{"a word", "continue", "not a hook answer"},
		{"empty", "", "not a hook answer"},
		{"unknown field", strings.Replace(good, `"by"`, `"who"`, 1), "not a hook answer"},
		{"trailing data", good + " {}", "not a hook answer"},
		{"yes", strings.Replace(good, `"continue"`, `"yes"`, 1), `hook result "yes"`},
		{"CONTINUE", strings.Replace(good, `"continue"`, `"CONTINUE"`, 1), `hook result "CONTINUE"`},
		{"no result", strings.Replace(good, `"result":"continue",`, "", 1), `hook result ""`},
		{"no entry", strings.Replace(good, `"entry":"web.1",`, "", 1), "without its entry"},
		{"no author", strings.Replace(good, `"by":"inventory"`, `"by":" "`, 1), "without its entry, time or author"},
		{"no time", strings.Replace(good, `"time":"2026-11-25T12:00:00Z",`, "", 1), "without its entry, time or author"},
		{"another hook", strings.Replace(good, `"launch"`, `"boot"`, 1), `hook "boot"`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			a, err := ParseHookAnswer([]byte(tc.value))
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("%q: %+v, %v; want an error with %q", tc.value, a, err, tc.want)
			}
		})
	}
}

// A request counts only under its own role's and host's key, complete.
func TestParseHookRequest(t *testing.T) {
	good := `{"role":"web","host":"web4","hook":"launch","entry":"web.1","reason":"2 of desired 3","requested":"2026-11-25T12:00:00Z","deadline":"2026-11-25T12:10:00Z","default":"abandon"}`
	if r, err := ParseHookRequest("web", "web4", []byte(good)); err != nil || r.Default != HookAbandon {
		t.Fatalf("a good request: %+v %v", r, err)
	}
	for _, tc := range []struct{ name, role, host, value string }{
		{"another host's", "web", "web5", good},
		{"another role's", "db", "web4", good},
		{"no default", "web", "web4", strings.Replace(good, `"abandon"`, `""`, 1)},
		{"no deadline", "web", "web4", strings.Replace(good, `"deadline":"2026-11-25T12:10:00Z",`, "", 1)},
		{"a word", "web", "web4", "launch"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if r, err := ParseHookRequest(tc.role, tc.host, []byte(tc.value)); err == nil {
				t.Fatalf("parsed as %+v", r)
			}
		})
	}
}
