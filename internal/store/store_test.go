package store_test

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hashicorp/consul/api"
	"github.com/jiocloud/orchestrate/internal/store"
	"github.com/jiocloud/orchestrate/internal/store/reaperkv"
)

// A host's version is one key of its own, rewritten by each report.
func TestReportVersionOneKeyPerHost(t *testing.T) {
	ctx := context.Background()
	s, c := newStore(t)
	for _, v := range []string{"v1", "v2", "v2", "v3", "v1"} {
		if err := s.ReportVersion(ctx, "h1", v); err != nil {
			t.Fatalf("ReportVersion(%s): %v", v, err)
		}
		if got := keys(t, c, "test/orchestrate/"); len(got) != 1 || got[0] != "test/orchestrate/hosts/h1/version" {
			t.Fatalf("after reporting %s: keys %v, want exactly [test/orchestrate/hosts/h1/version]", v, got)
		}
		p, _, err := c.KV().Get("test/orchestrate/hosts/h1/version", nil)
		if err != nil || !strings.Contains(string(p.Value), `"version":"`+v+`"`) {
			t.Fatalf("after reporting %s: %s %v", v, p.Value, err)
		}
	}
	if err := s.ReportVersion(ctx, "h2", "v3"); err != nil {
		t.Fatal(err)
	}
	vs, err := s.HostVersions(ctx, "h1")
	if err != nil || len(vs) != 1 || vs[0] != "v1" {
		t.Fatalf("HostVersions(h1) = %v, %v; want [v1]", vs, err)
	}
	snap, err := s.Snapshot(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if got := snap.VersionCounts(); got["v1"] != 1 || got["v3"] != 1 || len(got) != 2 {
		t.Fatalf("VersionCounts = %v, want v1:1 v3:1", got)
	}
}

// A host under two versions in the older layout (written by hand, or by
// an older tool) is reported as a problem; its first report of its own
// stands over both, which stay for `orchestrate migrate`.
func TestReportVersionStandsOverTheOlderLayout(t *testing.T) {
	ctx := context.Background()
	s, c := newStore(t)
	for _, k := range []string{"v1", "v2"} {
		if _, err := c.KV().Put(&api.KVPair{Key: "test/orchestrate/running_version/" + k + "/h1", Value: []byte(`{"time":"2026-01-01T00:00:00Z"}`)}, nil); err != nil {
			t.Fatal(err)
		}
	}
	snap, err := s.Snapshot(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(snap.Problems) != 1 || !strings.Contains(snap.Problems[0].Problem, "also under version") {
		t.Fatalf("Problems = %v, want one naming the duplicate", snap.Problems)
	}
	if vs, err := s.HostVersions(ctx, "h1"); err != nil || len(vs) != 2 {
		t.Fatalf("HostVersions before the report = %v %v, want both older versions", vs, err)
	}
	if err := s.ReportVersion(ctx, "h1", "v3"); err != nil {
		t.Fatal(err)
	}
	if vs, err := s.HostVersions(ctx, "h1"); err != nil || len(vs) != 1 || vs[0] != "v3" {
		t.Fatalf("HostVersions = %v %v, want [v3]", vs, err)
	}
	snap, err = s.Snapshot(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if h := snap.Hosts["h1"]; h == nil || h.Version != "v3" || len(snap.OldLayout) != 2 {
		t.Fatalf("host %+v, older keys %v: want v3, both older keys listed", h, snap.OldLayout)
	}
}

// Each category is one key of the host's own holding its state.
func TestUpdateStatusOneStatePerCategory(t *testing.T) {
	ctx := context.Background()
	s, c := newStore(t)
	if err := s.ReportVersion(ctx, "h1", "v7"); err != nil {
		t.Fatal(err)
	}
	steps := []struct{ cat, state string }{
		{"puppet", "running"}, {"puppet", "failed"}, {"validation", "pending"},
		{"puppet", "success"}, {"validation", "success"}, {"puppet", "success"},
	}
	for _, st := range steps {
		if err := s.UpdateStatus(ctx, "h1", st.cat, st.state, store.StatusValue{Version: "v7", Detail: "step " + st.state}); err != nil {
			t.Fatalf("UpdateStatus(%s %s): %v", st.cat, st.state, err)
		}
		k := "test/orchestrate/hosts/h1/status/" + st.cat
		p, _, err := c.KV().Get(k, nil)
		if err != nil || p == nil || !strings.HasPrefix(string(p.Value), `{"state":"`+st.state+`",`) {
			t.Fatalf("after %s %s: %s = %v %v", st.cat, st.state, k, p, err)
		}
		if got := keys(t, c, "test/orchestrate/hosts/h1/status/"); len(got) > 2 {
			t.Fatalf("after %s %s: keys %v", st.cat, st.state, got)
		}
	}
	snap, err := s.Snapshot(ctx)
	if err != nil {
		t.Fatal(err)
	}
	h := snap.Hosts["h1"]
	if h == nil || h.Version != "v7" || h.Status["puppet"].State != "success" || h.Status["validation"].State != "success" {
		t.Fatalf("snapshot host = %+v", h)
	}
	if h.Status["puppet"].Version != "v7" || h.Status["puppet"].Detail != "step success" || h.Status["puppet"].Time.IsZero() {
		t.Fatalf("status value not round-tripped: %+v", h.Status["puppet"])
	}
	if f := snap.Failures(); len(f) != 0 {
		t.Fatalf("Failures = %v, want none", f)
	}
	hs, err := s.HostStatus(ctx, "h1")
	if err != nil || hs["puppet"].State != "success" || hs["validation"].State != "success" || len(hs) != 2 {
		t.Fatalf("HostStatus = %+v %v", hs, err)
	}
}

func TestBadInputWritesNothing(t *testing.T) {
	ctx := context.Background()
	s, c := newStore(t)
	calls := []struct {
		name string
		call func() error
	}{
		{"empty version", func() error { return s.ReportVersion(ctx, "h1", "") }},
		{"slash version", func() error { return s.ReportVersion(ctx, "h1", "v1/x") }},
		{"slash host", func() error { return s.ReportVersion(ctx, "h/1", "v1") }},
		{"empty host", func() error { return s.UpdateStatus(ctx, "", "puppet", "success", store.StatusValue{}) }},
		{"slash category", func() error { return s.UpdateStatus(ctx, "h1", "pup/pet", "success", store.StatusValue{}) }},
		{"unknown state", func() error { return s.UpdateStatus(ctx, "h1", "puppet", "sucess", store.StatusValue{}) }},
		{"empty trigger", func() error { return s.SetCurrentVersion(ctx, "") }},
		{"negative scale", func() error { return s.SetDesired(ctx, "db", -1) }},
	}
	for _, tc := range calls {
		t.Run(tc.name, func(t *testing.T) {
			err := tc.call()
			var ie *store.InputError
			if !errors.As(err, &ie) {
				t.Fatalf("err = %v, want an InputError", err)
			}
		})
	}
	if got := keys(t, c, "test/"); len(got) != 0 {
		t.Fatalf("bad input wrote keys: %v", got)
	}
}

func TestSnapshotReportsCorruptValues(t *testing.T) {
	ctx := context.Background()
	s, c := newStore(t)
	put := func(k, v string) {
		if _, err := c.KV().Put(&api.KVPair{Key: "test/orchestrate/" + k, Value: []byte(v)}, nil); err != nil {
			t.Fatal(err)
		}
	}
	put("status/puppet/failed/h1", "{not json")
	put("status/puppet/bogus/h2", `{"time":"2026-01-01T00:00:00Z"}`)
	put("running_version/v1/h3", "garbage")
	put("roles/db/desired", "three")
	put("status/puppet/success/h4", `{"time":"2026-01-01T00:00:00Z","version":"v1","detail":"","log_url":""}`)
	// The host-first layout: a corrupt status counts as an unreadable
	// failure; a version, metric or drain answer that is not one is none.
	put("hosts/h5/status/puppet", `{"state":"failed"`)
	put("hosts/h6/status/puppet", `{"state":"exploded","time":"2026-01-01T00:00:00Z"}`)
	put("hosts/h7/version", `{"time":"2026-01-01T00:00:00Z"}`)
	put("hosts/h7/metrics/load", `{"value":"high"}`)
	put("hosts/h7/drain", `{"drained":true}`)
	put("hosts/h7/elsewhere", `{}`)
	put("hosts/h8", `{}`)
	snap, err := s.Snapshot(ctx)
	if err != nil {
		t.Fatalf("Snapshot must not fail on corrupt values: %v", err)
	}
	if len(snap.Problems) != 11 {
		t.Fatalf("Problems = %v, want 11", snap.Problems)
	}
	f := snap.Failures()
	if len(f) != 3 || f[0].Host != "h1" || !strings.Contains(f[0].Detail, "unreadable") || f[1].Host != "h5" || f[2].Host != "h6" {
		t.Fatalf("Failures = %+v, want h1, h5 and h6 with unreadable values", f)
	}
	if h := snap.Hosts["h7"]; (h != nil && h.Version != "") || len(snap.Scaling.Metrics["h7"]) != 0 {
		t.Fatalf("h7 = %+v, metrics %v: want no version, no metric", h, snap.Scaling.Metrics["h7"])
	}
	// The host's own reader names its unreadable version record (exit 2)
	// rather than take the host for one that never reported.
	var ie *store.InputError
	if _, err := s.HostVersions(ctx, "h7"); !errors.As(err, &ie) || !strings.Contains(err.Error(), "test/orchestrate/hosts/h7/version") {
		t.Fatalf("HostVersions(h7) = %v, want an input error naming the key", err)
	}
	if snap.Hosts["h3"] == nil || snap.Hosts["h3"].Version != "v1" {
		t.Fatalf("h3 with a corrupt timestamp still runs v1: %+v", snap.Hosts["h3"])
	}
	if snap.Hosts["h4"].Status["puppet"].State != "success" {
		t.Fatalf("h4 = %+v", snap.Hosts["h4"])
	}
}

// TestConcurrentHosts has 50 hosts report versions and statuses at once,
// several times each, against the real agent; every host must end in
// exactly the last version and state it reported.
func TestConcurrentHosts(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	s, c := newStore(t)
	const hosts = 50
	versions := []string{"v1", "v2", "v3"}
	states := []string{"running", "failed", "pending", "success"}
	type final struct{ version, puppet, validation string }
	finals := make([]final, hosts)
	var wg sync.WaitGroup
	errs := make(chan error, hosts)
	for i := 0; i < hosts; i++ {
		wg.Add(1)
		go func(i int) {
			defer wg.Done()
			host := fmt.Sprintf("h%02d", i)
			r := rand.New(rand.NewPCG(uint64(i), 7))
			var f final
			for round := 0; round < 4; round++ {
				f.version = versions[r.IntN(len(versions))]
				if err := s.ReportVersion(ctx, host, f.version); err != nil {
					errs <- fmt.Errorf("%s report %s: %w", host, f.version, err)
					return
				}
				f.puppet = states[r.IntN(len(states))]
				if err := s.UpdateStatus(ctx, host, "puppet", f.puppet, store.StatusValue{Version: f.version}); err != nil {
					errs <- fmt.Errorf("%s puppet %s: %w", host, f.puppet, err)
					return
				}
				f.validation = states[r.IntN(len(states))]
				if err := s.UpdateStatus(ctx, host, "validation", f.validation, store.StatusValue{Version: f.version}); err != nil {
					errs <- fmt.Errorf("%s validation %s: %w", host, f.validation, err)
					return
				}
			}
			finals[i] = f
		}(i)
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	if t.Failed() {
		return
	}
	snap, err := s.Snapshot(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(snap.Problems) != 0 {
		t.Fatalf("problems after concurrent writes: %v", snap.Problems)
	}
	if len(snap.Hosts) != hosts {
		t.Fatalf("%d hosts in KV, want %d", len(snap.Hosts), hosts)
	}
	for i, f := range finals {
		h := snap.Hosts[fmt.Sprintf("h%02d", i)]
		if h.Version != f.version || h.Status["puppet"].State != f.puppet || h.Status["validation"].State != f.validation {
			t.Errorf("%s = %s/%s/%s, want %s/%s/%s", h.Name, h.Version, h.Status["puppet"].State, h.Status["validation"].State, f.version, f.puppet, f.validation)
		}
	}
	// Exactly its version and one key per category for each host.
	if n := len(keys(t, c, "test/orchestrate/hosts/")); n != 3*hosts {
		t.Errorf("%d keys under hosts/, want %d", n, 3*hosts)
	}
}

// TestConcurrentMovesOfOneHost races writers on the same host's records:
// every write lands (a check-and-set that lost retries on the record that
// stands) and the host has one version and one puppet state.
func TestConcurrentMovesOfOneHost(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	s, c := newStore(t)
	var wg sync.WaitGroup
	errs := make(chan error, 8)
	for i := 0; i < 8; i++ {
		wg.Add(1)
		go func(i int) {
			defer wg.Done()
			for round := 0; round < 5; round++ {
				v := fmt.Sprintf("v%d", (i+round)%4)
				if err := s.ReportVersion(ctx, "contended", v); err != nil {
					errs <- err
					return
				}
				if err := s.UpdateStatus(ctx, "contended", "puppet", store.States[(i+round)%4], store.StatusValue{}); err != nil {
					errs <- err
					return
				}
			}
		}(i)
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	if got := keys(t, c, "test/orchestrate/"); strings.Join(got, " ") != "test/orchestrate/hosts/contended/status/puppet test/orchestrate/hosts/contended/version" {
		t.Fatalf("keys after racing writes: %v", got)
	}
}

// TestConcurrentFirstWrites races two writers on hosts that have no key
// yet: both read nothing and check-and-set at index 0; the loser reads
// again and writes over the winner's record, so both writes land and the
// host has one record of each kind.
func TestConcurrentFirstWrites(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	s, c := newStore(t)
	const hosts = 30
	var wg sync.WaitGroup
	errs := make(chan error, 4*hosts)
	for i := 0; i < hosts; i++ {
		host := fmt.Sprintf("fresh%02d", i)
		for w, pair := range [][2]string{{"v1", "failed"}, {"v2", "success"}} {
			wg.Add(1)
			go func() {
				defer wg.Done()
				if err := s.ReportVersion(ctx, host, pair[0]); err != nil {
					errs <- fmt.Errorf("writer %d report: %w", w, err)
				}
				if err := s.UpdateStatus(ctx, host, "puppet", pair[1], store.StatusValue{}); err != nil {
					errs <- fmt.Errorf("writer %d status: %w", w, err)
				}
			}()
		}
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	if n := len(keys(t, c, "test/orchestrate/")); n != 2*hosts {
		t.Errorf("%d keys, want %d (a version and a puppet state per host)", n, 2*hosts)
	}
}

// TestParseArmRecord: only a JSON arm record with a time and an author
// counts; false, an empty value or a word written by hand never arms.
func TestParseArmRecord(t *testing.T) {
	for _, bad := range []string{"", "false", "true", "yes", "{}", `{"by":"ops"}`, `{"time":"2026-11-23T09:00:00Z"}`,
		`{"time":"2026-11-23T09:00:00Z","by":" "}`, `{"time":"2026-11-23T09:00:00Z","by":"ops","armed":false}`, `[1]`} {
		if rec, err := reaperkv.ParseArmRecord([]byte(bad)); err == nil {
			t.Errorf("ParseArmRecord(%q) = %+v, want an error", bad, rec)
		}
	}
	rec, err := reaperkv.ParseArmRecord([]byte(`{"time":"2026-11-23T09:00:00Z","by":"ops@host","reason":"checked"}`))
	if err != nil || !rec.Arms() {
		t.Errorf("an arm record: %+v, %v; want it to arm", rec, err)
	}
	rec, err = reaperkv.ParseArmRecord([]byte(`{"time":"2026-11-23T09:00:00Z","by":"ops@host","disarmed":true}`))
	if err != nil || rec.Arms() {
		t.Errorf("a disarm record: %+v, %v; want it well-formed and not arming", rec, err)
	}
}

// ForgetHost removes every record of one host, even more than one
// transaction holds, and nothing of a host whose name merely shares a
// prefix or a version named like the host.
func TestForgetHost(t *testing.T) {
	ctx := context.Background()
	s, c := newStore(t)
	for _, h := range []string{"web1", "web10", "web1x"} {
		if err := s.ReportVersion(ctx, h, "v1"); err != nil {
			t.Fatal(err)
		}
		for _, cat := range []string{store.CategoryPuppet, store.CategoryValidation} {
			if err := s.UpdateStatus(ctx, h, cat, store.StateSuccess, store.StatusValue{Version: "v1"}); err != nil {
				t.Fatal(err)
			}
		}
	}
	// Stale records written by hand: more than one transaction can delete.
	for i := range 140 {
		key := fmt.Sprintf("test/orchestrate/running_version/old%d/web1", i)
		if _, err := c.KV().Put(&api.KVPair{Key: key, Value: []byte(`{}`)}, nil); err != nil {
			t.Fatal(err)
		}
	}
	// Its load report and drain answer, and web10's.
	for _, h := range []string{"web1", "web10"} {
		if err := s.ReportMetric(ctx, "web", h, "load", 0.5); err != nil {
			t.Fatal(err)
		}
		if _, err := c.KV().Put(&api.KVPair{Key: store.DrainAnswerKey("test/orchestrate", h), Value: []byte(`{"entry":"web.1","time":"2026-01-01T00:00:00Z","by":"t","drained":true}`)}, nil); err != nil {
			t.Fatal(err)
		}
	}
	// A version that happens to be named like the host.
	if err := s.ReportVersion(ctx, "web2", "web1"); err != nil {
		t.Fatal(err)
	}
	// Rollout progress, of web1 and of another host; a follower mark
	// (a role) named like the host stays.
	for _, h := range []string{"web1", "web10"} {
		if err := s.EndSlot(ctx, "web", nil, h, false, store.RolloutHost{Version: "v1", State: store.RolloutDone}); err != nil {
			t.Fatalf("record rollout progress of %s: %v", h, err)
		}
	}
	if _, err := c.KV().Put(&api.KVPair{Key: "test/orchestrate/rollout/lb/followers/web1"}, nil); err != nil {
		t.Fatal(err)
	}
	if err := s.ForgetHost(ctx, "web1"); err != nil {
		t.Fatal(err)
	}
	left, err := s.HostKeys(ctx, "web1")
	if err != nil || len(left) != 0 {
		t.Fatalf("web1 keys left: %v (%v)", left, err)
	}
	snap, err := s.Snapshot(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if got := strings.Join(snap.HostNames(), ","); got != "web10,web1x,web2" {
		t.Fatalf("hosts after forgetting web1 = %s, want web10,web1x,web2", got)
	}
	if _, ok := snap.Scaling.Metrics["web1"]; ok || len(snap.Scaling.Metrics["web10"]) != 1 {
		t.Fatalf("metrics after forgetting web1: %v", snap.Scaling.Metrics)
	}
	if snap.Hosts["web2"].Version != "web1" || len(snap.Hosts["web10"].Status) != 2 {
		t.Fatalf("another host's records changed: %+v %+v", snap.Hosts["web2"], snap.Hosts["web10"])
	}
	r, err := s.Rollout(ctx, "web")
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := r.Hosts["web1"]; ok || r.Hosts["web10"].State != store.RolloutDone {
		t.Fatalf("rollout records after forgetting web1: %+v", r.Hosts)
	}
	if lb, err := s.Rollout(ctx, "lb"); err != nil || len(lb.Followers) != 1 {
		t.Fatalf("a follower mark named like the host went: %+v %v", lb, err)
	}
	if err := s.ForgetHost(ctx, "web1"); err != nil {
		t.Fatalf("forgetting a forgotten host: %v", err)
	}
	var ie *store.InputError
	if err := s.ForgetHost(ctx, "../x"); !errors.As(err, &ie) {
		t.Fatalf("ForgetHost(../x) = %v, want an input error", err)
	}
}
