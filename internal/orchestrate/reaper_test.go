package orchestrate

import (
	"bytes"
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/consul/api"

	"github.com/jiocloud/orchestrate/internal/consultest"
	"github.com/jiocloud/orchestrate/internal/store/reaperkv"
)

func TestReaperArmDisarm(t *testing.T) {
	a := consultest.Start(t, consultest.Options{})
	mustCode(t, cli(t, a, "", "reaper", "arm", "--yes", "--reason", "initial build checked by hand"), 0, "reaper arm")
	p, _, err := a.Client.KV().Get("orchestrate/reaper/armed", nil)
	if err != nil || p == nil {
		t.Fatalf("armed key: %v %v", p, err)
	}
	var armed reaperkv.ArmRecord
	if err := json.Unmarshal(p.Value, &armed); err != nil || armed.Reason != "initial build checked by hand" || armed.By == "" {
		t.Fatalf("armed = %+v, %v", armed, err)
	}
	// A disarm is a record too, so the reaper never arms itself again.
	mustCode(t, cli(t, a, "", "reaper", "disarm", "--reason", "maintenance window"), 0, "reaper disarm")
	p, _, err = a.Client.KV().Get("orchestrate/reaper/armed", nil)
	if err != nil || p == nil {
		t.Fatalf("disarm removed the record: %v %v", p, err)
	}
	rec, err := reaperkv.ParseArmRecord(p.Value)
	if err != nil || rec.Arms() || rec.Reason != "maintenance window" {
		t.Fatalf("after disarm the key holds %+v (%v), want a disarm record", rec, err)
	}
	r := cli(t, a, "", "reaper", "fire")
	mustCode(t, r, 2, "reaper fire")
	if !strings.Contains(r.stderr, `"fire"`) {
		t.Fatalf("stderr %q does not name the bad action", r.stderr)
	}
}

// orchestrate status shows what the reaper sees and plans, and why it is
// not armed, from <prefix>/reaper/state.
func TestStatusShowsReaperState(t *testing.T) {
	a := consultest.Start(t, consultest.Options{})
	r := cli(t, a, "", "status")
	mustCode(t, r, 0, "status without a reaper")
	if !strings.Contains(r.stdout, "reaper: no report") {
		t.Fatalf("status without a reaper:\n%s", r.stdout)
	}
	st := reaperkv.ReaperReport{
		Time: time.Now(), Leader: "boot1-42-abc", DryRun: true, Interval: 30 * time.Second,
		NotArmedReason: "not armed: web has 2 of 3 servers healthy with validation success",
		Roles: []reaperkv.RoleReport{{Name: "web", Desired: 3, Count: 3, Healthy: 2,
			States:    map[string]int{reaperkv.ServerHealthy: 2, reaperkv.ServerUnhealthy: 1},
			Attention: []reaperkv.ServerReport{{Name: "web2", ID: "u2", State: reaperkv.ServerUnhealthy}}}},
		Planned: []string{"create web web4 (replace web2 (unhealthy))"},
		Blocked: []string{"web: replacement of web2 (unhealthy) waits: not armed"},
		Actions: []reaperkv.PlanAction{{Op: "create", Role: "web", Host: "web4", Reason: "replace web2 (unhealthy)", Text: "create web web4 (replace web2 (unhealthy))"},
			{Op: reaperkv.PlanReplace, Role: "web", Host: "web2", Reason: "unhealthy", Held: true, Why: reaperkv.HoldDisarmed, WhyText: "not armed",
				Text: "web: replacement of web2 (unhealthy) waits: not armed"}},
		RoleBackoff: map[string]reaperkv.RoleBackoff{"web": {Until: time.Now().Add(time.Minute), Reason: "400 Invalid flavorRef"}},
	}
	data, _ := json.Marshal(st)
	if _, err := a.Client.KV().Put(&api.KVPair{Key: "orchestrate/reaper/state", Value: data}, nil); err != nil {
		t.Fatal(err)
	}
	r = cli(t, a, "", "status")
	mustCode(t, r, 0, "status")
	for _, want := range []string{
		"reaper: leader boot1-42-abc, NOT ARMED, DRY RUN", "! reaper NOT ARMED: web has 2 of 3 servers healthy with validation",
		"web: serving 2/3", "1 unhealthy", "would: create web4 (replace web2 (unhealthy))", "held back: replace web2 (unhealthy) waits: not armed",
	} {
		if !strings.Contains(r.stdout, want) {
			t.Errorf("status lacks %q:\n%s", want, r.stdout)
		}
	}
	r = cli(t, a, "", "reaper", "status")
	mustCode(t, r, 0, "reaper status")
	for _, want := range []string{
		"reaper: leader boot1-42-abc", "DRY RUN, NOT ARMED",
		"not armed: web has 2 of 3 servers healthy with validation success",
		"role web: desired 3, servers 3, healthy 2 (healthy 2, unhealthy 1)",
		"web2 unhealthy", "would: create web web4", "held back: web: replacement of web2",
		"ROLE BACKOFF", "role web: creates held back until", "400 Invalid flavorRef",
	} {
		if !strings.Contains(r.stdout, want) {
			t.Errorf("reaper status lacks %q:\n%s", want, r.stdout)
		}
	}
	r = cli(t, a, "", "status", "--json")
	mustCode(t, r, 0, "status --json")
	var rep struct {
		Reaper reaperReport `json:"reaper"`
	}
	if err := json.Unmarshal([]byte(r.stdout), &rep); err != nil {
		t.Fatalf("status --json: %v\n%s", err, r.stdout)
	}
	if rep.Reaper.State == nil || rep.Reaper.State.Leader != "boot1-42-abc" || rep.Reaper.Stale {
		t.Fatalf("status --json reaper = %+v", rep.Reaper)
	}
	r = cli(t, a, "", "reaper", "status")
	mustCode(t, r, 0, "reaper status")
	if !strings.Contains(r.stdout, "role web: desired 3") {
		t.Fatalf("reaper status:\n%s", r.stdout)
	}
	// A state from long ago is flagged stale.
	st.Time = time.Now().Add(-time.Hour)
	data, _ = json.Marshal(st)
	a.Client.KV().Put(&api.KVPair{Key: "orchestrate/reaper/state", Value: data}, nil)
	if r = cli(t, a, "", "reaper", "status"); !strings.Contains(r.stdout, "STALE") {
		t.Fatalf("old state not flagged stale:\n%s", r.stdout)
	}
}

// TestReaperStatusExitCodes: `reaper status` with Consul unreachable is exit
// 3 (it was 2, a usage error, and with --json 0); a state key holding
// something the reaper did not write is exit 2, --json or not.
func TestReaperStatusExitCodes(t *testing.T) {
	t.Run("unreachable", func(t *testing.T) {
		t.Setenv("CONSUL_HTTP_ADDR", "127.0.0.1:1")
		for _, args := range [][]string{{"reaper", "status"}, {"reaper", "status", "--json"}} {
			var out, errb bytes.Buffer
			code := Run(context.Background(), args, IO{Stdin: strings.NewReader(""), Stdout: &out, Stderr: &errb})
			if code != 3 {
				t.Errorf("%v: exit %d, want 3\nstdout: %s\nstderr: %s", args, code, out.String(), errb.String())
			}
			// The error is said once, in the exit code's words: on stderr
			// (text), or in the JSON's error field (--json).
			const want = "cannot reach Consul at 127.0.0.1:1: connection refused"
			said := out.String() + errb.String()
			if strings.Count(said, want) != 1 || strings.Contains(said, "dial tcp") {
				t.Errorf("%v: want %q said once, without the transport's words\nstdout: %s\nstderr: %s", args, want, out.String(), errb.String())
			}
		}
	})
	t.Run("corrupt", func(t *testing.T) {
		a := consultest.Start(t, consultest.Options{})
		if _, err := a.Client.KV().Put(&api.KVPair{Key: "orchestrate/reaper/state", Value: []byte("{not json")}, nil); err != nil {
			t.Fatal(err)
		}
		for _, args := range [][]string{{"reaper", "status"}, {"reaper", "status", "--json"}} {
			r := cli(t, a, "", args...)
			mustCode(t, r, 2, strings.Join(args, " "))
		}
	})
}

// A role whose servers were built from another boot spec shows it in
// `status` and `reaper status`, and in --json as numbers; a role on its
// spec shows nothing.
func TestStatusShowsDrift(t *testing.T) {
	a := consultest.Start(t, consultest.Options{})
	t.Setenv("COLUMNS", "300") // status fits its lines to the width: each whole
	st := reaperkv.ReaperReport{
		Time: time.Now(), Leader: "boot1-42-abc", Armed: true, Interval: 30 * time.Second,
		Roles: []reaperkv.RoleReport{
			{Name: "web", Desired: 3, Count: 3, Healthy: 3, States: map[string]int{reaperkv.ServerHealthy: 3},
				Spec: "9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08", Drifted: 2, SpecUnknown: 1},
			{Name: "db", Desired: 1, Count: 1, Healthy: 1, States: map[string]int{reaperkv.ServerHealthy: 1}, Spec: "60303ae22b998861bce3b28f33eec1be758a213c86c93c076dbe9f558c11c752"},
		},
	}
	data, _ := json.Marshal(st)
	if _, err := a.Client.KV().Put(&api.KVPair{Key: "orchestrate/reaper/state", Value: data}, nil); err != nil {
		t.Fatal(err)
	}
	for _, args := range [][]string{{"status"}, {"reaper", "status"}} {
		r := cli(t, a, "", args...)
		mustCode(t, r, 0, strings.Join(args, " "))
		want := "boot spec 9f86d081884c: 2 of 3 servers DRIFTED (built from another image, flavor, networks, key or user data); 1 with no recorded spec"
		if !strings.Contains(r.stdout, want) {
			t.Errorf("%s lacks %q:\n%s", strings.Join(args, " "), want, r.stdout)
		}
		if strings.Contains(r.stdout, "boot spec 60303ae22b99") {
			t.Errorf("%s shows drift for db, which has none:\n%s", strings.Join(args, " "), r.stdout)
		}
	}
	r := cli(t, a, "", "status", "--json")
	mustCode(t, r, 0, "status --json")
	var rep struct {
		Reaper reaperReport `json:"reaper"`
	}
	if err := json.Unmarshal([]byte(r.stdout), &rep); err != nil || rep.Reaper.State == nil {
		t.Fatalf("status --json: %v\n%s", err, r.stdout)
	}
	if w := rep.Reaper.State.Roles[0]; w.Drifted != 2 || w.SpecUnknown != 1 || w.Spec != st.Roles[0].Spec {
		t.Fatalf("status --json web = %+v", w)
	}
}

// A role's placement shows in `status` and `reaper status`: its serving
// servers by zone, a zone backed off with until when and why, its server
// group, and what is wrong with the group.
func TestStatusShowsPlacement(t *testing.T) {
	a := consultest.Start(t, consultest.Options{})
	t.Setenv("COLUMNS", "300") // status fits its lines to the width: each whole
	until := time.Date(2026, 3, 1, 12, 5, 0, 0, time.UTC)
	st := reaperkv.ReaperReport{
		Time: time.Now(), Leader: "boot1-42-abc", Armed: true, Interval: 30 * time.Second,
		Roles: []reaperkv.RoleReport{{Name: "db", Desired: 3, Count: 3, Healthy: 3, States: map[string]int{reaperkv.ServerHealthy: 3},
			Placement: &reaperkv.PlacementReport{
				Zones:        map[string]int{"az1": 2, "az2": 0, "az3": 1},
				ZoneBackoff:  map[string]reaperkv.RoleBackoff{"az2": {Until: until, Reason: "boot db4: capacity: server went to ERROR: No valid host was found."}},
				Group:        &reaperkv.ServerGroupRecord{Role: "db", ID: "5e0c", Name: "reaper-db", Policy: "soft-anti-affinity"},
				GroupProblem: "server group reaper-db 5e0c has policy soft-anti-affinity, the configuration says anti-affinity",
			}}},
	}
	data, _ := json.Marshal(st)
	if _, err := a.Client.KV().Put(&api.KVPair{Key: "orchestrate/reaper/state", Value: data}, nil); err != nil {
		t.Fatal(err)
	}
	for _, args := range [][]string{{"status"}, {"reaper", "status"}} {
		r := cli(t, a, "", args...)
		mustCode(t, r, 0, strings.Join(args, " "))
		for _, want := range []string{
			"zones (serving servers): az1 2, az2 0 (BACKED OFF until 2026-03-01T12:05:00Z: boot db4: capacity: server went to ERROR: No valid host was found.), az3 1",
			"server group reaper-db (5e0c, soft-anti-affinity)",
			"server group PROBLEM: server group reaper-db 5e0c has policy soft-anti-affinity, the configuration says anti-affinity",
		} {
			if !strings.Contains(r.stdout, want) {
				t.Errorf("%s lacks %q:\n%s", strings.Join(args, " "), want, r.stdout)
			}
		}
	}
}

// `orchestrate reaper history` prints the reaper's activities oldest
// first, filtered by role and age, as text or JSON ([] when none); a
// history the reaper did not write is exit 2.
func TestReaperHistory(t *testing.T) {
	a := consultest.Start(t, consultest.Options{})
	r := cli(t, a, "", "reaper", "history")
	mustCode(t, r, 0, "history before any")
	if !strings.Contains(r.stdout, "no reaper activity recorded") {
		t.Fatalf("empty history:\n%s", r.stdout)
	}
	now := time.Now().UTC()
	_, data, err := reaperkv.AppendHistory(nil, []reaperkv.Activity{
		{Time: now.Add(-2 * time.Hour), Leader: "boot1", Kind: "create", Role: "web", Action: "create web web4 (replace web2 (unhealthy))", Result: "done"},
		{Time: now.Add(-10 * time.Minute), Leader: "boot1", Kind: "delete", Role: "db", Action: "delete db db3", Result: "failed", Error: "409 locked"},
		{Time: now.Add(-time.Minute), Leader: "boot2", Kind: reaperkv.ActivityPause, Reason: "5 of 7 servers look unhealthy", Result: "done"},
	}, reaperkv.MaxHistoryEntries, reaperkv.MaxHistoryBytes)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := a.Client.KV().Put(&api.KVPair{Key: "orchestrate/history/reaper", Value: data}, nil); err != nil {
		t.Fatal(err)
	}
	r = cli(t, a, "", "reaper", "history")
	mustCode(t, r, 0, "history")
	lines := strings.Split(strings.TrimSpace(r.stdout), "\n")
	if len(lines) != 4 || !strings.Contains(lines[1], "create") || !strings.Contains(lines[2], "409 locked") || !strings.Contains(lines[3], "5 of 7 servers look unhealthy") {
		t.Fatalf("history, oldest first:\n%s", r.stdout)
	}
	if r = cli(t, a, "", "reaper", "history", "--role", "db"); strings.Contains(r.stdout, "web4") || !strings.Contains(r.stdout, "delete db db3") {
		t.Fatalf("history --role db:\n%s", r.stdout)
	}
	if r = cli(t, a, "", "reaper", "history", "--since", "1h"); strings.Contains(r.stdout, "web4") || !strings.Contains(r.stdout, "db3") {
		t.Fatalf("history --since 1h:\n%s", r.stdout)
	}
	r = cli(t, a, "", "reaper", "history", "--json", "--role", "nope")
	mustCode(t, r, 0, "history --json of no activity")
	if strings.TrimSpace(r.stdout) != "[]" {
		t.Fatalf("history --json of none = %q, want []", r.stdout)
	}
	r = cli(t, a, "", "reaper", "history", "--json")
	var h []reaperkv.Activity
	if err := json.Unmarshal([]byte(r.stdout), &h); err != nil || len(h) != 3 || h[1].Error != "409 locked" {
		t.Fatalf("history --json: %v %+v", err, h)
	}
	mustCode(t, cli(t, a, "", "reaper", "history", "--since", "-1h"), 2, "a negative --since")
	a.Client.KV().Put(&api.KVPair{Key: "orchestrate/history/reaper", Value: []byte("written by hand")}, nil)
	mustCode(t, cli(t, a, "", "reaper", "history"), 2, "a history the reaper did not write")
}
