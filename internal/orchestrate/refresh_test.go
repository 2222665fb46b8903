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

// `orchestrate refresh` writes a role's request for the reaper; bad input
// (an unknown role, a bad share or checkpoints, a rollback with nothing to
// roll back to, a continue with nothing to continue) is exit 2 and writes
// nothing; continue passes a checkpoint or retries a failure; cancel
// marks it; status prints it (JSON: [] when none); a request written by
// hand is exit 2.
func TestRefreshCommand(t *testing.T) {
	a := consultest.Start(t, consultest.Options{})
	put := func(key string, v any) {
		t.Helper()
		data, _ := json.Marshal(v)
		if _, err := a.Client.KV().Put(&api.KVPair{Key: key, Value: data}, nil); err != nil {
			t.Fatal(err)
		}
	}
	key := "orchestrate/reaper/refresh/web"
	get := func() (reaperkv.RefreshRecord, bool) {
		t.Helper()
		return kvJSON[reaperkv.RefreshRecord](t, a.Client, key)
	}
	r := cli(t, a, "", "refresh", "status", "--json")
	mustCode(t, r, 0, "status, nothing")
	if strings.TrimSpace(r.stdout) != "[]" {
		t.Fatalf("status --json with nothing: %q, want []", r.stdout)
	}
	mustCode(t, cli(t, a, "", "refresh", "web"), 2, "a role no reaper reports")
	put("orchestrate/reaper/state", reaperkv.ReaperReport{Time: time.Now(), Leader: "boot1", Armed: true, Interval: 30 * time.Second,
		Roles: []reaperkv.RoleReport{{Name: "web", Desired: 4, Count: 4, Spec: "9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08", Drifted: 4}}})
	for _, bad := range [][]string{
		{"refresh", "db"},
		{"refresh", "web", "--checkpoints", "50,25"},
		{"refresh", "web", "--checkpoints", "0"},
		{"refresh", "web", "--checkpoints", "100"},
		{"refresh", "web", "--min-healthy-percent", "101"},
		{"refresh", "web", "--min-healthy-percent", "-1"},
		{"refresh", "web", "--cancel", "--rollback"},
		{"refresh", "web", "--rollback"}, // no spec recorded before
		{"refresh", "continue", "web"},   // no request
		{"refresh", "web", "extra"},
		{"refresh", "../web"},
	} {
		mustCode(t, cli(t, a, "", bad...), 2, strings.Join(bad, " "))
		if _, ok := get(); ok {
			t.Fatalf("%s wrote a request", strings.Join(bad, " "))
		}
	}
	mustCode(t, cli(t, a, "", "refresh", "web", "--checkpoints", "25,50", "--min-healthy-percent", "75", "--reason", "image 20261127", "--yes"), 0, "refresh")
	rec, ok := get()
	if !ok || rec.MinHealthyPercent != 75 || len(rec.Checkpoints) != 2 || rec.Reason != "image 20261127" || rec.Rollback || rec.Time.IsZero() {
		t.Fatalf("request %+v", rec)
	}
	mustCode(t, cli(t, a, "", "refresh", "continue", "web"), 2, "continue, not at a checkpoint")

	rec.Seen, rec.State, rec.Spec = time.Now(), reaperkv.RefreshCheckpoint, "9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08"
	put(key, rec) // as the reaper writes it
	mustCode(t, cli(t, a, "", "refresh", "continue", "web"), 0, "continue at the checkpoint")
	if rec, _ := get(); rec.Continued != 1 || rec.Retries != 0 {
		t.Fatalf("after continue: %+v", rec)
	}
	rec, _ = get()
	rec.State, rec.Failures, rec.Detail = reaperkv.RefreshFailed, 1, "web5 in ERROR"
	put(key, rec)
	mustCode(t, cli(t, a, "", "refresh", "continue", "web"), 0, "continue after a failure")
	if rec, _ := get(); rec.Continued != 1 || rec.Retries != 1 {
		t.Fatalf("after continue: %+v", rec)
	}
	r = cli(t, a, "", "refresh", "status")
	mustCode(t, r, 0, "status")
	for _, want := range []string{"role web: spec 9f86d081884c, 4 server(s) drifted", "requested by", "(image 20261127): failed (web5 in ERROR)"} {
		if !strings.Contains(r.stdout, want) {
			t.Errorf("status lacks %q:\n%s", want, r.stdout)
		}
	}
	mustCode(t, cli(t, a, "", "refresh", "web", "--cancel"), 0, "cancel")
	if rec, _ := get(); rec.Cancelled.IsZero() || rec.Reason != "image 20261127" {
		t.Fatalf("after cancel: %+v", rec)
	}
	mustCode(t, cli(t, a, "", "refresh", "web", "--cancel"), 2, "cancel twice")

	put("orchestrate/reaper/spec/web", reaperkv.SpecRecord{Current: reaperkv.BootSpecInfo{Digest: "9f86d081884c"}, Previous: &reaperkv.BootSpecInfo{Digest: "60303ae22b99"}})
	mustCode(t, cli(t, a, "", "refresh", "web", "--rollback", "--yes"), 0, "rollback")
	if rec, _ := get(); !rec.Rollback || !rec.Cancelled.IsZero() || rec.Continued != 0 {
		t.Fatalf("a rollback is a new request: %+v", rec)
	}
	r = cli(t, a, "", "refresh", "status", "web", "--json")
	mustCode(t, r, 0, "status --json")
	var lines []refreshLine
	if err := json.Unmarshal([]byte(r.stdout), &lines); err != nil || len(lines) != 1 || lines[0].Request == nil || !lines[0].Request.Rollback {
		t.Fatalf("status --json: %v\n%s", err, r.stdout)
	}

	if _, err := a.Client.KV().Put(&api.KVPair{Key: key, Value: []byte(`{"time":"2026-11-27T00:00:00Z","continued":7}`)}, nil); err != nil {
		t.Fatal(err)
	}
	r = cli(t, a, "", "refresh", "status")
	mustCode(t, r, 2, "a request written by hand")
	if !strings.Contains(r.stderr, "reaper/refresh/web") {
		t.Errorf("the error does not name the key: %s", r.stderr)
	}
}
