package store_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/consul/api"

	"github.com/jiocloud/orchestrate/internal/consultest"
	"github.com/jiocloud/orchestrate/internal/store"
	"github.com/jiocloud/orchestrate/internal/store/reaperkv"
)

const departedURL = "https://swift.example.net/v1/AUTH_ops/logs/web1/v2/puppet/20261127T150405.006Z.log"

// A forgotten host whose failed step linked a log leaves a departed
// record with that link (capped), dated by the store's clock; a host
// whose records link none leaves none, and does not remove an earlier
// server's.
func TestForgetHostKeepsLogLinks(t *testing.T) {
	s, c := newStore(t)
	ctx := context.Background()
	at := time.Date(2026, 11, 27, 16, 0, 0, 0, time.UTC)
	s.Now = func() time.Time { return at }
	long := strings.Repeat("é", 1000)
	for _, w := range []struct {
		cat, state string
		v          store.StatusValue
	}{
		{"puppet", store.StateFailed, store.StatusValue{Version: "v2", Detail: long, LogURL: departedURL, Suspect: true}},
		{"validation", store.StateSuccess, store.StatusValue{Version: "v2"}},
	} {
		if err := s.UpdateStatus(ctx, "web1", w.cat, w.state, w.v); err != nil {
			t.Fatal(err)
		}
	}
	if err := s.ReportVersion(ctx, "web1", "v2"); err != nil {
		t.Fatal(err)
	}
	if err := s.ForgetHost(ctx, "web1"); err != nil {
		t.Fatal(err)
	}
	if ks := keys(t, c, store.HostDir("test/orchestrate", "web1")); len(ks) != 0 {
		t.Fatalf("web1's records left: %v", ks)
	}
	rec, found, err := s.Departed(ctx, "web1")
	if err != nil || !found {
		t.Fatalf("departed record: %v, found %v", err, found)
	}
	l, ok := rec.Logs["puppet"]
	if !rec.Forgotten.Equal(at) || len(rec.Logs) != 1 || !ok || l.LogURL != departedURL || l.State != store.StateFailed || l.Version != "v2" {
		t.Fatalf("departed record %+v", rec)
	}
	if len(l.Detail) > reaperkv.MaxDepartedDetail+3 || !strings.HasSuffix(l.Detail, "...") || !strings.HasPrefix(l.Detail, "é") {
		t.Fatalf("detail of %d bytes not capped at %d: %q", len(l.Detail), reaperkv.MaxDepartedDetail, l.Detail)
	}

	// web2 links no log: no record. A later web1 linking none leaves
	// the earlier server's record.
	for _, h := range []string{"web2", "web1"} {
		if err := s.UpdateStatus(ctx, h, "puppet", store.StateFailed, store.StatusValue{Version: "v3", Detail: "no upload"}); err != nil {
			t.Fatal(err)
		}
		if err := s.ForgetHost(ctx, h); err != nil {
			t.Fatal(err)
		}
	}
	if _, found, err := s.Departed(ctx, "web2"); err != nil || found {
		t.Fatalf("web2 linked no log: departed record found %v, %v", found, err)
	}
	if again, _, _ := s.Departed(ctx, "web1"); again.Logs["puppet"].LogURL != departedURL {
		t.Fatalf("web1's earlier record was replaced: %+v", again)
	}
	if ks := keys(t, c, "test/orchestrate/hosts/"); len(ks) != 0 {
		t.Fatalf("records left: %v", ks)
	}
}

// The departed record and the forget are one transaction: a token that
// may delete the host's records but not write under reaper/ forgets
// nothing, and one that may write the record but not delete the host's
// records writes no record.
func TestForgetHostDepartedIsOneTransaction(t *testing.T) {
	const mgmt = "3c0ffee0-0000-4000-8000-000000000001"
	a := consultest.Start(t, consultest.Options{ACLToken: mgmt})
	ctx := context.Background()
	admin, err := store.New(a.Client, "test/orchestrate")
	if err != nil {
		t.Fatal(err)
	}
	if err := admin.UpdateStatus(ctx, "web1", "puppet", store.StateFailed, store.StatusValue{Version: "v2", LogURL: departedURL}); err != nil {
		t.Fatal(err)
	}
	before := keys(t, a.Client, "test/")
	for _, tc := range []struct{ name, rules string }{
		{"no write on reaper/", `key_prefix "test/orchestrate/" { policy = "read" }
key_prefix "test/orchestrate/hosts/" { policy = "write" }`},
		{"no write on hosts/", `key_prefix "test/orchestrate/" { policy = "read" }
key_prefix "test/orchestrate/reaper/" { policy = "write" }`},
	} {
		pol, _, err := a.Client.ACL().PolicyCreate(&api.ACLPolicy{Name: strings.ReplaceAll(tc.name, " ", "-"), Rules: tc.rules}, nil)
		if err != nil {
			t.Fatal(err)
		}
		tok, _, err := a.Client.ACL().TokenCreate(&api.ACLToken{Policies: []*api.ACLTokenPolicyLink{{ID: pol.ID}}}, nil)
		if err != nil {
			t.Fatal(err)
		}
		cfg := api.DefaultConfig()
		cfg.Address, cfg.Token = a.HTTPAddr, tok.SecretID
		c, err := api.NewClient(cfg)
		if err != nil {
			t.Fatal(err)
		}
		s, err := store.New(c, "test/orchestrate")
		if err != nil {
			t.Fatal(err)
		}
		if err := s.ForgetHost(ctx, "web1"); err == nil || !strings.Contains(err.Error(), "Permission denied") {
			t.Fatalf("%s: forget: %v, want a refusal", tc.name, err)
		}
		if after := keys(t, a.Client, "test/"); strings.Join(after, " ") != strings.Join(before, " ") {
			t.Fatalf("%s: keys %v, want %v unchanged", tc.name, after, before)
		}
	}
	if err := admin.ForgetHost(ctx, "web1"); err != nil {
		t.Fatal(err)
	}
	if after := keys(t, a.Client, "test/"); len(after) != 1 || after[0] != reaperkv.DepartedKey("test/orchestrate", "web1") {
		t.Fatalf("after the forget: %v, want the departed record alone", after)
	}
}

// A departed record written by hand (garbage, another host's, an
// unbounded one) is an input error naming the key, never a panic.
func TestDepartedGarbage(t *testing.T) {
	s, c := newStore(t)
	ctx := context.Background()
	for _, v := range []string{`not json`, `{"host":"web2","forgotten":"2026-11-27T16:00:00Z","logs":{"puppet":{"log_url":"x"}}}`,
		`{"host":"web1","forgotten":"2026-11-27T16:00:00Z","logs":{}}`, `{"host":"web1","logs":{"puppet":{"log_url":"x"}}}`,
		`{"host":"web1","forgotten":"2026-11-27T16:00:00Z","logs":{"puppet":{"log_url":"` + strings.Repeat("x", 5000) + `"}}}`, `null`, ``} {
		if _, err := c.KV().Put(&api.KVPair{Key: reaperkv.DepartedKey("test/orchestrate", "web1"), Value: []byte(v)}, nil); err != nil {
			t.Fatal(err)
		}
		_, found, err := s.Departed(ctx, "web1")
		var in *store.InputError
		if found || !errors.As(err, &in) || !strings.Contains(err.Error(), "reaper/departed/web1") {
			t.Errorf("%.40q: found %v, %v; want an input error naming the key", v, found, err)
		}
	}
}

// An orphan's removal (ForgetRecordsOps) keeps its log links too, in its
// one transaction.
func TestForgetRecordsOpsKeepsLogLinks(t *testing.T) {
	s, c := newStore(t)
	ctx := context.Background()
	if err := s.UpdateStatus(ctx, "web7", "provisioned", store.StateFailed, store.StatusValue{Detail: "runcmd failed", LogURL: departedURL}); err != nil {
		t.Fatal(err)
	}
	snap, err := s.Snapshot(ctx)
	if err != nil {
		t.Fatal(err)
	}
	ops, err := s.ForgetRecordsOps(ctx, "web7", snap.Records["web7"].Index)
	if err != nil {
		t.Fatal(err)
	}
	if ok, resp, _, err := c.KV().Txn(ops, nil); err != nil || !ok {
		t.Fatalf("txn: %v %s", err, store.TxnErrors(resp))
	}
	rec, found, err := s.Departed(ctx, "web7")
	if err != nil || !found || rec.Logs["provisioned"].LogURL != departedURL {
		t.Fatalf("departed record %+v, found %v, %v", rec, found, err)
	}
	if ks := keys(t, c, store.HostDir("test/orchestrate", "web7")); len(ks) != 0 {
		t.Fatalf("web7's records left: %v", ks)
	}
}
