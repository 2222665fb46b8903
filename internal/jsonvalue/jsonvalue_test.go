package jsonvalue

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/jiocloud/orchestrate/internal/store/reaperkv"
)

// A value that does not decode is described in JSON's words, with its
// field's path: never a Go type name, never the value's text.
func TestProblem(t *testing.T) {
	for _, tc := range []struct{ value, want string }{
		{`{"roles": 3}`, "field roles: want a list, got a number"},
		{`{"roles": [{"name": "web", "states": []}]}`, "field roles.states: want an object, got a list"},
		{`{"roles": [{"desired": 3.5}]}`, "field roles.desired: want a whole number, got the number 3.5"},
		{`{"armed": "yes"}`, "field armed: want true or false, got a string"},
		{`{"actions": [{"held": 1}]}`, "field actions.held: want true or false, got a number"},
		{`[1, 2]`, "want an object, got a list"},
		{`{"roles": [`, "not JSON (it ends early)"},
		{`{"leader": "x` + "\x1b[2J" + `"}`, "not JSON (at byte"},
		{`{"time": "yesterday\u001b[2J"}`, "a time that is not RFC 3339"},
	} {
		var st reaperkv.ReaperReport
		err := json.Unmarshal([]byte(tc.value), &st)
		if err == nil {
			t.Fatalf("%s decoded", tc.value)
		}
		got := Problem(err)
		if !strings.HasPrefix(got, tc.want) || strings.Contains(got, "reaperkv") || strings.Contains(got, "[]") || strings.Contains(got, "\x1b") {
			t.Errorf("Problem(%s) = %q, want %q", tc.value, got, tc.want)
		}
	}
}

// A decoder that refuses unknown fields names the field, escaped, without
// json's prefix.
func TestProblemUnknownField(t *testing.T) {
	dec := json.NewDecoder(strings.NewReader(`{"leader": "a", "tok\u001ben": 1}`))
	dec.DisallowUnknownFields()
	var st reaperkv.ReaperReport
	err := dec.Decode(&st)
	if err == nil {
		t.Fatal("an unknown field decoded")
	}
	if got, want := Problem(err), `unknown field "tok\x1ben"`; got != want {
		t.Errorf("Problem = %q, want %q", got, want)
	}
}
