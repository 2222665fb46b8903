package orchestrate

import (
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/consul/api"

	"github.com/jiocloud/orchestrate/internal/consultest"
	"github.com/jiocloud/orchestrate/internal/store/reaperkv"
)

// `orchestrate hold` against a real agent: bad input (no reason, a bad
// or absurd --for, an unknown host, no reaper report) is exit 2 and
// writes nothing; a hold beyond the role's max_held, or of the role's
// last serving server, is refused (exit 2, naming why); a hold writes
// its record; list prints it (JSON, [] when none); release marks it
// released (the record stays), and a release of a host not held is exit 2;
// a record written by hand is reported by list and names what is wrong.
func TestHoldCommand(t *testing.T) {
	a := consultest.Start(t, consultest.Options{})
	kv := a.Client.KV()
	put := func(key string, v any) {
		t.Helper()
		data, _ := json.Marshal(v)
		if _, err := kv.Put(&api.KVPair{Key: key, Value: data}, nil); err != nil {
			t.Fatal(err)
		}
	}
	get := func(host string) (reaperkv.HoldRecord, bool) {
		t.Helper()
		return kvJSON[reaperkv.HoldRecord](t, a.Client, "orchestrate/reaper/hold/"+host)
	}
	list := func() []holdLine {
		t.Helper()
		r := cli(t, a, "", "hold", "list", "--json")
		mustCode(t, r, 0, "hold list --json")
		var out []holdLine
		if err := json.Unmarshal([]byte(r.stdout), &out); err != nil {
			t.Fatalf("hold list --json: %v in %q", err, r.stdout)
		}
		return out
	}
	r := cli(t, a, "", "hold", "list", "--json")
	mustCode(t, r, 0, "list, nothing")
	if strings.TrimSpace(r.stdout) != "[]" {
		t.Fatalf("hold list --json with nothing: %q, want []", r.stdout)
	}
	mustCode(t, cli(t, a, "", "hold", "web3", "--reason", "oops"), 2, "no reaper report")

	// web: web1, web2 serve, web3 unhealthy; db: db1 its only serving server.
	put("orchestrate/reaper/state", reaperkv.ReaperReport{Time: time.Now(), Leader: "boot1", Armed: true, Interval: 30 * time.Second,
		Roles: []reaperkv.RoleReport{
			{Name: "web", Desired: 3, Count: 3, Healthy: 2, MaxHeld: 1, Members: []string{"web1", "web2", "web3", "web4"},
				Attention: []reaperkv.ServerReport{{Name: "web3", State: reaperkv.ServerUnhealthy}, {Name: "web4", State: reaperkv.ServerUnhealthy}}},
			{Name: "db", Desired: 1, Count: 1, Healthy: 1, MaxHeld: 1, Members: []string{"db1"}},
			{Name: "lb", Desired: 2, Count: 2, Healthy: 2, MaxHeld: 0, Members: []string{"lb1", "lb2"}},
		}})
	for _, bad := range []struct {
		args []string
		want string
	}{
		{[]string{"hold", "web3"}, "--reason is required"},
		{[]string{"hold", "web3", "--reason", " "}, "--reason is required"},
		{[]string{"hold", "web3", "--reason", "oops", "--for", "soon"}, "not a duration"},
		{[]string{"hold", "web3", "--reason", "oops", "--for", "-1h"}, "positive"},
		{[]string{"hold", "web3", "--reason", "oops", "--for", "0s"}, "positive"},
		{[]string{"hold", "web3", "--reason", "oops", "--for", "8d"}, "longer than a hold may last"},
		{[]string{"hold", "web3", "--reason", "oops", "--for", "100000h"}, "longer than a hold may last"},
		{[]string{"hold", "web9", "--reason", "oops"}, "web9 is no server of any role"},
		{[]string{"hold", "../web3", "--reason", "oops"}, "host"},
		{[]string{"hold", "db1", "--reason", "oops"}, "last serving server of role db"},
		{[]string{"hold", "lb1", "--reason", "oops"}, "max_held is 0"},
		{[]string{"hold", "release", "web3"}, "web3 is not held"},
		{[]string{"hold", "release"}, "usage"},
		{[]string{"hold", "web3", "--reason", strings.Repeat("y", 501)}, "name a ticket instead"},
		{[]string{"hold", "web3", "web4"}, "unknown action"},
	} {
		r := cli(t, a, "", bad.args...)
		mustCode(t, r, 2, strings.Join(bad.args, " "))
		if !strings.Contains(r.stderr, bad.want) {
			t.Fatalf("%s: stderr %q, want %q in it", strings.Join(bad.args, " "), r.stderr, bad.want)
		}
		if keys, _, _ := kv.Keys("orchestrate/reaper/hold/", "", nil); len(keys) != 0 {
			t.Fatalf("%s wrote %v", strings.Join(bad.args, " "), keys)
		}
	}

	mustCode(t, cli(t, a, "", "hold", "web3", "--reason", "kernel oops in dmesg", "--for", "2d"), 0, "hold web3")
	rec, ok := get("web3")
	if !ok || rec.Role != "web" || rec.Reason != "kernel oops in dmesg" || rec.Until.Sub(rec.Time) != 48*time.Hour || rec.By == "" || rec.Auto || rec.Check() != nil {
		t.Fatalf("record %+v", rec)
	}
	// The role's max_held (1) is reached: web4 is refused; web3 again
	// (a longer hold, a new reason) is not another hold.
	r = cli(t, a, "", "hold", "web4", "--reason", "the same oops")
	mustCode(t, r, 2, "hold beyond max_held")
	if !strings.Contains(r.stderr, "already holds 1 of its max_held 1 (web3)") {
		t.Fatalf("stderr %q", r.stderr)
	}
	if _, ok := get("web4"); ok {
		t.Fatal("a hold beyond max_held was written")
	}
	mustCode(t, cli(t, a, "", "hold", "web3", "--reason", "still looking", "--for", "72h"), 0, "hold web3 again")
	if rec, _ = get("web3"); rec.Reason != "still looking" || rec.Until.Sub(rec.Time) != 72*time.Hour {
		t.Fatalf("record %+v after a second hold", rec)
	}
	if l := list(); len(l) != 1 || l[0].Host != "web3" || l[0].State != "held" || l[0].Reason != "still looking" {
		t.Fatalf("list %+v", l)
	}
	r = cli(t, a, "", "hold", "list")
	mustCode(t, r, 0, "hold list")
	if !strings.Contains(r.stdout, "web3\tweb\theld\t") {
		t.Fatalf("hold list: %q", r.stdout)
	}

	mustCode(t, cli(t, a, "", "hold", "release", "web3"), 0, "release web3")
	if rec, ok = get("web3"); !ok || rec.Released.IsZero() || rec.ReleasedBy == "" {
		t.Fatalf("record after release %+v: want it kept, marked released", rec)
	}
	r = cli(t, a, "", "hold", "release", "web3")
	mustCode(t, r, 2, "release again")
	if !strings.Contains(r.stderr, "its hold is released") {
		t.Fatalf("stderr %q", r.stderr)
	}
	if l := list(); len(l) != 1 || l[0].State != "released" {
		t.Fatalf("list %+v", l)
	}
	// Released, web3 counts no more: web4 may be held.
	mustCode(t, cli(t, a, "", "hold", "web4", "--reason", "the same oops", "--for", "90m"), 0, "hold web4 once web3 is released")

	// A record written by hand: list names it, release names what is
	// wrong, the role's cap does not count it.
	if _, err := kv.Put(&api.KVPair{Key: "orchestrate/reaper/hold/web1", Value: []byte(`{"host":"web1","until":"2099-01-01T00:00:00Z"}`)}, nil); err != nil {
		t.Fatal(err)
	}
	r = cli(t, a, "", "hold", "list", "--json")
	mustCode(t, r, 0, "list with a bad record")
	if !strings.Contains(r.stderr, "orchestrate/reaper/hold/web1: not a hold record") {
		t.Fatalf("list stderr %q: want the bad record named", r.stderr)
	}
	r = cli(t, a, "", "hold", "release", "web1")
	mustCode(t, r, 2, "release of a bad record")
	if !strings.Contains(r.stderr, "not a hold record") {
		t.Fatalf("stderr %q", r.stderr)
	}
}
