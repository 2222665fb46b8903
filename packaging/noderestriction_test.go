package packaging_test

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/consul/api"

	"github.com/jiocloud/orchestrate/internal/store"
	"github.com/jiocloud/orchestrate/internal/store/reaperkv"
)

// restrictedWorld is an ACL agent (default deny) with web2's records
// written by web2's own token (version v1, validation success, a load
// report) and a drain request for web1 and for web2 written by the
// reaper's (management) token; it returns web1's and web2's token files.
func restrictedWorld(t *testing.T) (w *aclWorld, a, b string) {
	t.Helper()
	w = newACLWorld(t)
	kv := w.admin.KV()
	if _, err := kv.Put(&api.KVPair{Key: "orchestrate/current_version", Value: []byte("v2")}, nil); err != nil {
		t.Fatal(err)
	}
	a = w.hostToken(t, "web1", "web", tokenOpts{})
	b = w.hostToken(t, "web2", "web", tokenOpts{})
	must(t, "web2's own version", w.run(t, b, "orchestrate", "report-version", "--host", "web2", "v1"), 0, "")
	must(t, "web2's own status", w.run(t, b, "orchestrate", "update-status", "--host", "web2", "--version", "v2", "validation", "success"), 0, "")
	must(t, "web2's own metric", w.run(t, b, "orchestrate", "report-metric", "--host", "web2", "--role", "web", "load", "0.4"), 0, "")
	now := time.Now().UTC()
	for _, h := range []string{"web1", "web2"} {
		req := fmt.Sprintf(`{"requested": %q, "role": "web", "entry": "web.%s.1", "reason": "surplus", "deadline": %q}`,
			now.Format(time.RFC3339), h, now.Add(time.Hour).Format(time.RFC3339))
		if _, err := kv.Put(&api.KVPair{Key: store.DrainKey("orchestrate", h), Value: []byte(req)}, nil); err != nil {
			t.Fatal(err)
		}
	}
	return w, a, b
}

// Every write a node makes through orchestrate, with web1's token (the
// shared node role and web1's own policy, exactly as shipped), against
// web2's record: refused by Consul (exit 3 naming key:write) and nothing
// written; the same against web1's own record: done.
func TestNodeRestrictionCommandMatrix(t *testing.T) {
	t.Parallel()
	w, a, _ := restrictedWorld(t)
	for _, tc := range []struct {
		name string
		args []string // {HOST} is web1 or web2
	}{
		{"update-status", []string{"update-status", "--host", "{HOST}", "puppet", "failed", "--detail", "forged"}},
		{"update-status --version", []string{"update-status", "--host", "{HOST}", "--version", "v2", "validation", "failed"}},
		{"report-version", []string{"report-version", "--host", "{HOST}", "v2"}},
		{"report-metric", []string{"report-metric", "--host", "{HOST}", "--role", "web", "load", "9"}},
		// A forged heartbeat would hide another host's silence.
		{"heartbeat", []string{"heartbeat", "--host", "{HOST}"}},
		{"drained", []string{"drained", "{HOST}"}},
		{"drained --failed", []string{"drained", "--failed", "--detail", "forged", "{HOST}"}},
		{"drain handler", []string{"drain", "--host", "{HOST}", "--drain-cmd", "true", "--lock-file", filepath.Join(t.TempDir(), "drain.lock")}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			with := func(host string) []string {
				out := make([]string, len(tc.args))
				for i, s := range tc.args {
					out[i] = strings.ReplaceAll(s, "{HOST}", host)
				}
				return out
			}
			before := w.kvDump(t)
			must(t, tc.name+" for web2", w.run(t, a, "orchestrate", with("web2")...), 3, "the token needs key:write")
			w.sameKV(t, tc.name+" for web2", before)
			must(t, tc.name+" for web1", w.run(t, a, "orchestrate", with("web1")...), 0, "")
		})
	}
	// The platform answers for a host with an operator's token, in the
	// host's own record.
	op := w.token(t, `key_prefix "orchestrate/" { policy = "write" }`)
	must(t, "drained web2 with an operator's token", w.run(t, op, "orchestrate", "drained", "--detail", "moved by the platform", "web2"), 0, "")
	if got := w.kvDump(t)["orchestrate/hosts/web2/drain"]; !strings.Contains(got, `"entry":"web.web2.1"`) || !strings.Contains(got, "moved by the platform") {
		t.Errorf("web2's answer record: %q", got)
	}
}

// The raw writes a node's token could try: web1's token against every
// record of web2 (and the reaper's drain requests, its own included) is
// refused with 403, whatever the verb; a transaction that mixes its own
// record with web2's writes nothing; its own records it writes.
func TestNodeRestrictionRawWrites(t *testing.T) {
	t.Parallel()
	w, a, _ := restrictedWorld(t)
	c := w.clientOf(t, a)
	kv := c.KV()
	theirs := []string{
		"orchestrate/hosts/web2/version", "orchestrate/hosts/web2/status/puppet", "orchestrate/hosts/web2/metrics/load",
		"orchestrate/hosts/web2/drain", "orchestrate/hosts/web2/anything",
		"orchestrate/hosts/web10/version", "orchestrate/hosts/web1", "orchestrate/hosts/web1x/status/puppet",
		"orchestrate/drain/web2", "orchestrate/drain/web1",
		// An instance refresh or rollback of a whole role, forged, would
		// rebuild every server of it (or roll it back to an older spec).
		"orchestrate/reaper/refresh/web", "orchestrate/reaper/spec/web",
		// A hold, its own included, would keep a node out of the reaper's
		// reach (never deleted) and another out of service.
		"orchestrate/reaper/hold/web2", "orchestrate/reaper/hold/web1",
		// A departed record, its own included, would point the operator's
		// signed read of a gone host's log elsewhere, or erase it.
		reaperkv.DepartedKey("orchestrate", "web2"), reaperkv.DepartedKey("orchestrate", "web1"),
		// The layout before node restriction: nothing may write it now.
		"orchestrate/running_version/v2/web2", "orchestrate/running_version/v2/web1", "orchestrate/status/puppet/failed/web2",
		"orchestrate/status/puppet/success/web1", "orchestrate/metrics/web/web2/load", "orchestrate/metrics/web/web1/load",
	}
	before := w.kvDump(t)
	denied := func(what string, err error) {
		t.Helper()
		if err == nil || !strings.Contains(err.Error(), "Permission denied") {
			t.Errorf("web1's token: %s: %v, want Permission denied", what, err)
		}
	}
	for _, k := range theirs {
		_, err := kv.Put(&api.KVPair{Key: k, Value: []byte(`{"state":"failed","suspect":true}`)}, nil)
		denied("put "+k, err)
		_, _, err = kv.CAS(&api.KVPair{Key: k, Value: []byte(`{}`)}, nil)
		denied("cas "+k, err)
		_, err = kv.Delete(k, nil)
		denied("delete "+k, err)
	}
	for _, dir := range []string{"orchestrate/hosts/web2/", "orchestrate/hosts/", "orchestrate/drain/", "orchestrate/"} {
		_, err := kv.DeleteTree(dir, nil)
		denied("delete tree "+dir, err)
	}
	ok, resp, _, err := kv.Txn(api.KVTxnOps{
		{Verb: api.KVSet, Key: "orchestrate/hosts/web1/metrics/load", Value: []byte(`{"role":"web","value":1,"time":"2026-01-01T00:00:00Z"}`)},
		{Verb: api.KVSet, Key: "orchestrate/hosts/web2/metrics/load", Value: []byte(`{"role":"web","value":99,"time":"2026-01-01T00:00:00Z"}`)},
	}, nil)
	if err == nil && (ok || !strings.Contains(store.TxnErrors(resp), "Permission denied")) {
		t.Errorf("a transaction writing web1's and web2's metric: ok %v, %s", ok, store.TxnErrors(resp))
	}
	w.sameKV(t, "web1's raw writes on others' records", before)
	for _, k := range []string{"orchestrate/hosts/web1/version", "orchestrate/hosts/web1/status/puppet", "orchestrate/hosts/web1/metrics/load", "orchestrate/hosts/web1/drain"} {
		if _, err := kv.Put(&api.KVPair{Key: k, Value: []byte(`{}`)}, nil); err != nil {
			t.Errorf("web1 writing its own %s: %v", k, err)
		}
		if _, err := kv.Delete(k, nil); err != nil {
			t.Errorf("web1 deleting its own %s: %v", k, err)
		}
	}
}

// The attacks on node-written records, each with web1's token
// through orchestrate: web2's status forged as a failed, suspect run (which
// a role with replace_suspect would replace), web2's version set so it
// never upgrades, web2's load forged to force scale-out, web2's drain
// answered as drained (the reaper would delete it at once) and a drain
// request forged for web2 (its handler would move its work away). Each is
// refused and the reaper's reading of the records is what web2 wrote.
func TestNodeRestrictionAttacks(t *testing.T) {
	t.Parallel()
	w, a, _ := restrictedWorld(t)
	ctx := context.Background()
	mine, err := store.New(w.clientOf(t, a), "orchestrate")
	if err != nil {
		t.Fatal(err)
	}
	admin, err := store.New(w.admin, "orchestrate")
	if err != nil {
		t.Fatal(err)
	}
	before := w.kvDump(t)

	err = mine.UpdateStatus(ctx, "web2", store.CategoryPuppet, store.StateFailed, store.StatusValue{Version: "v2", Suspect: true, Detail: "forged"})
	if err == nil || !strings.Contains(err.Error(), "Permission denied") {
		t.Errorf("web1 forging web2's suspect failure: %v, want Permission denied", err)
	}
	must(t, "web1 setting web2's version", w.run(t, a, "orchestrate", "report-version", "--host", "web2", "v2"), 3, "the token needs key:write")
	must(t, "web1 forging web2's load", w.run(t, a, "orchestrate", "report-metric", "--host", "web2", "--role", "web", "load", "1000"), 3, "the token needs key:write")
	must(t, "web1 answering web2's drain", w.run(t, a, "orchestrate", "drained", "web2"), 3, "the token needs key:write")
	_, err = w.clientOf(t, a).KV().Put(&api.KVPair{Key: store.DrainKey("orchestrate", "web2"),
		Value: []byte(`{"requested":"2026-01-01T00:00:00Z","role":"web","entry":"forged","reason":"forged","deadline":"2099-01-01T00:00:00Z"}`)}, nil)
	if err == nil || !strings.Contains(err.Error(), "Permission denied") {
		t.Errorf("web1 forging a drain request for web2: %v, want Permission denied", err)
	}
	// A node holding itself, well-formed record and all, would be out of
	// the reaper's reach; holding web2 would take it out of service.
	for _, h := range []string{"web1", "web2"} {
		rec := reaperkv.HoldRecord{Host: h, Role: "web", Reason: "forged", By: h, Time: time.Now().UTC(), Until: time.Now().UTC().Add(time.Hour)}
		if err := mine.PutHold(ctx, rec, 0); err == nil || !strings.Contains(err.Error(), "Permission denied") {
			t.Errorf("web1 writing a hold of %s: %v, want Permission denied", h, err)
		}
	}
	w.sameKV(t, "the attacks", before)

	snap, err := admin.Snapshot(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if s := snap.Suspects(); len(s) != 0 {
		t.Errorf("suspects %v, want none", s)
	}
	if h := snap.Hosts["web2"]; h == nil || h.Version != "v1" {
		t.Errorf("web2's version: %+v, want v1 (as web2 reported)", h)
	}
	if v, err := admin.HostVersions(ctx, "web2"); err != nil || len(v) != 1 || v[0] != "v1" {
		t.Errorf("web2's versions %v %v, want [v1]: web2 upgrades to v2", v, err)
	}
	if d := snap.Scaling.Drains["web2"]; d.Answer != nil || d.Entry != "web.web2.1" {
		t.Errorf("web2's drain: %+v, want the reaper's request, unanswered", d)
	}
	rep, _ := json.Marshal(snap.Scaling.Metrics)
	if strings.Contains(string(rep), "1000") || !strings.Contains(string(rep), "0.4") {
		t.Errorf("metrics %s, want web2's own 0.4 only", rep)
	}
}

// theOldLayout is what orchestrate before node restriction wrote for web1
// and web2, value for value: versions, status (web2's consistent run
// failed, suspect), load reports, and web2's answer inside its drain
// request.
var theOldLayout = map[string]string{
	"orchestrate/running_version/v1/web1":    `{"time":"2026-11-20T10:00:00.123456789Z"}`,
	"orchestrate/running_version/v1/web2":    `{"time":"2026-11-20T10:01:00Z"}`,
	"orchestrate/status/puppet/success/web1": `{"time":"2026-11-20T10:00:00Z","version":"v1","detail":"","log_url":""}`,
	"orchestrate/status/puppet/failed/web2":  `{"time":"2026-11-20T10:03:00Z","version":"v1","detail":"Exec[x] returned 1","log_url":"","suspect":true}`,
	"orchestrate/metrics/web/web1/load":      `{"value":0.73,"time":"2026-11-20T10:04:00Z"}`,
	"orchestrate/drain/web2": `{"requested":"2026-11-20T10:05:00Z","role":"web","entry":"web.187a.1","reason":"surplus","deadline":"2099-11-20T11:05:00Z",` +
		`"on_failure":"abort","on_timeout":"abort","answer":{"time":"2026-11-20T10:06:00Z","by":"drain handler on web2","drained":true}}`,
}

// The upgrade from the older layout with the binaries and the tokens an
// operator has: status (read-only operator token) shows the older records;
// migrate --check lists them (exit 1); migrate is refused to a node's
// token and to the read-only operator (exit 3, nothing moved) and to
// anyone while an older rollout slot is held (exit 1, naming it); with a
// token that writes the prefix it moves everything while web1 writes its
// own status with its own token, whose last write stands; the older keys
// are gone, status shows the same records, and --check exits 0.
func TestNodeRestrictionMigrateCommand(t *testing.T) {
	t.Parallel()
	w := newACLWorld(t)
	for k, v := range theOldLayout {
		if _, err := w.admin.KV().Put(&api.KVPair{Key: k, Value: []byte(v)}, nil); err != nil {
			t.Fatal(err)
		}
	}
	reader := w.token(t, policyText(t, "operator.hcl", ""))
	web1 := w.hostToken(t, "web1", "web", tokenOpts{})
	admin := filepath.Join(t.TempDir(), "mgmt.token")
	if err := os.WriteFile(admin, []byte(mgmtToken+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	status := func(what string) string {
		t.Helper()
		r := w.run(t, reader, "orchestrate", "status", "--no-catalog", "--host", "web1")
		must(t, what, r, 0, "")
		if !strings.Contains(r.stdout, "version v1") {
			t.Errorf("%s: web1 not on v1 in\n%s", what, r.stdout)
		}
		r2 := w.run(t, reader, "orchestrate", "status", "--no-catalog", "--host", "web2")
		must(t, what, r2, 0, "")
		for _, want := range []string{"version v1", "failed SUSPECT", "drained (drain handler on web2 at 2026-11-20T10:06:00Z)"} {
			if !strings.Contains(r2.stdout, want) {
				t.Errorf("%s: no %q in\n%s", what, want, r2.stdout)
			}
		}
		return r.stderr
	}
	if e := status("status before"); !strings.Contains(e, "6 records are still in the layout before node restriction") {
		t.Errorf("status does not say the older layout is left: %s", e)
	}
	r := w.run(t, reader, "orchestrate", "migrate", "--check")
	must(t, "migrate --check before", r, 1, "6 records to move")
	if !strings.Contains(r.stdout, "web2\tdrain\tthe answer inside orchestrate/drain/web2 -> orchestrate/hosts/web2/drain") {
		t.Errorf("migrate --check:\n%s", r.stdout)
	}
	before := w.kvDump(t)
	must(t, "migrate with a node's token", w.run(t, web1, "orchestrate", "migrate"), 3, "Consul refused the token: permission denied (the token needs key:write on ")
	must(t, "migrate with the read-only operator token", w.run(t, reader, "orchestrate", "migrate"), 3, "Consul refused the token: permission denied (the token needs key:write on ")
	w.sameKV(t, "refused migrations", before)

	sess, _, err := w.admin.Session().Create(&api.SessionEntry{Behavior: api.SessionBehaviorDelete, TTL: "60s"}, nil)
	if err != nil {
		t.Fatal(err)
	}
	slot := "orchestrate/rollout/web/slot/" + sess
	if ok, _, err := w.admin.KV().Acquire(&api.KVPair{Key: slot, Value: []byte(`{"host":"web1","version":"v2","time":"2026-11-20T10:00:00Z"}`), Session: sess}, nil); err != nil || !ok {
		t.Fatalf("acquire %v %v", ok, err)
	}
	before = w.kvDump(t)
	must(t, "migrate with an older slot held", w.run(t, admin, "orchestrate", "migrate"), 1, slot)
	must(t, "migrate --check with an older slot held", w.run(t, reader, "orchestrate", "migrate", "--check"), 1, "1 held slots")
	w.sameKV(t, "a migration refused for a held slot", before)
	if _, err := w.admin.Session().Destroy(sess, nil); err != nil {
		t.Fatal(err)
	}

	// web1 writes its own status, with its own token, while the
	// migration runs.
	done := make(chan struct{})
	var last string
	go func() {
		defer close(done)
		for i := range 5 {
			last = fmt.Sprintf("own write %d", i)
			must(t, "web1's own status", w.run(t, web1, "orchestrate", "update-status", "--host", "web1", "--detail", last, "puppet", "running"), 0, "")
		}
	}()
	must(t, "migrate", w.run(t, admin, "orchestrate", "migrate"), 0, "")
	<-done
	after := w.kvDump(t)
	for k := range theOldLayout {
		if _, ok := after[k]; ok && k != "orchestrate/drain/web2" {
			t.Errorf("older key %s left", k)
		}
	}
	if strings.Contains(after["orchestrate/drain/web2"], "answer") || !strings.Contains(after["orchestrate/hosts/web2/drain"], `"entry":"web.187a.1"`) {
		t.Errorf("drain request %s, answer %s", after["orchestrate/drain/web2"], after["orchestrate/hosts/web2/drain"])
	}
	if got := after["orchestrate/hosts/web1/status/puppet"]; !strings.Contains(got, `"detail":"`+last+`"`) {
		t.Errorf("web1's own status %s, want its last write %q", got, last)
	}
	if !strings.Contains(after["orchestrate/hosts/web2/status/puppet"], `"suspect":true`) || !strings.Contains(after["orchestrate/hosts/web1/metrics/load"], `"role":"web"`) {
		t.Errorf("moved records: %v", after)
	}
	if e := status("status after"); strings.Contains(e, "layout before node restriction") {
		t.Errorf("status still says the older layout is left: %s", e)
	}
	must(t, "migrate --check after", w.run(t, reader, "orchestrate", "migrate", "--check"), 0, "nothing is left")
}

// The host policy docs/acl.md shows is the one store.HostPolicyRules renders.
func TestNodeRestrictionREADMEShowsTheHostPolicy(t *testing.T) {
	b, err := os.ReadFile("../docs/acl.md")
	if err != nil {
		t.Fatal(err)
	}
	text := string(b)
	at := strings.Index(text, "The host's own policy, as `store.HostPolicyRules")
	if at < 0 {
		t.Fatal("docs/acl.md no longer shows the host policy")
	}
	start := strings.Index(text[at:], "```hcl\n")
	end := strings.Index(text[at+start+7:], "```")
	if start < 0 || end < 0 {
		t.Fatal("no hcl block after the host policy's paragraph")
	}
	shown := text[at+start+7 : at+start+7+end]
	want, err := store.HostPolicyRules("orchestrate", "web1", "web")
	if err != nil {
		t.Fatal(err)
	}
	if shown != want {
		t.Fatalf("docs/acl.md shows:\n%s\nHostPolicyRules renders:\n%s", shown, want)
	}
}
