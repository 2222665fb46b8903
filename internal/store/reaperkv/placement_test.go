package reaperkv

import (
	"strings"
	"testing"
	"time"
)

// TestParseServerGroup: a record the reaper wrote reads back; anything
// else is refused with the key named, and the role still returned so its
// creates wait for the record to be looked at.
func TestParseServerGroup(t *testing.T) {
	good := ServerGroupRecord{Role: "db", ID: "0b5c", Name: "reaper-db", Policy: "anti-affinity", Time: time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)}
	got, err := ParseServerGroup(ReaperServerGroupDir+"db", MarshalServerGroup(good))
	if err != nil || got != good {
		t.Fatalf("round trip: %+v, %v", got, err)
	}
	pending := good
	pending.ID = ""
	if _, err := ParseServerGroup(ReaperServerGroupDir+"db", MarshalServerGroup(pending)); err != nil {
		t.Fatalf("a record without an ID (create in flight): %v", err)
	}
	cases := []struct{ name, rel, value, want, role string }{
		{"a word written by hand", ReaperServerGroupDir + "db", "0b5c", "reaper/servergroup/db: not a server group record the reaper wrote", "db"},
		{"another role's record", ReaperServerGroupDir + "db", `{"role":"web","id":"1","name":"reaper-web","policy":"anti-affinity","time":"2026-01-02T03:04:05Z"}`, "not a server group record", "db"},
		{"no policy", ReaperServerGroupDir + "db", `{"role":"db","id":"1","name":"reaper-db","time":"2026-01-02T03:04:05Z"}`, "not a server group record", "db"},
		{"an unknown field", ReaperServerGroupDir + "db", `{"role":"db","id":"1","name":"reaper-db","policy":"anti-affinity","owner":"me"}`, "not a server group record", "db"},
		{"a key that names no role", ReaperServerGroupDir + "a/b", `{}`, "not of the form reaper/servergroup/<role>", ""},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			got, err := ParseServerGroup(tc.rel, []byte(tc.value))
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("error %v, want %q", err, tc.want)
			}
			if got.Role != tc.role {
				t.Fatalf("role %q, want %q", got.Role, tc.role)
			}
		})
	}
}
