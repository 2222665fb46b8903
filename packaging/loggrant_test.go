package packaging_test

import (
	"strings"
	"testing"

	"github.com/hashicorp/consul/api"

	"github.com/jiocloud/orchestrate/internal/store"
)

// The upload grants under <prefix>/loggrants/ (docs/acl.md): with the
// shipped node.hcl and the rendered host policy, host A's token reads its
// own grant and can obtain host B's by no read, list, keys or transaction,
// and writes none; without node.hcl's deny rule it could (the rule is what
// keeps them apart: the shared role reads the whole prefix).
func TestLogGrantConfinedToItsHost(t *testing.T) {
	t.Parallel()
	w := newACLWorld(t)
	grants := map[string]string{
		"web1": `{"container_url":"http://127.0.0.1:1/v1/AUTH_a/logs","prefix":"web1/","signature":"SECRET-OF-WEB1"}`,
		"web2": `{"container_url":"http://127.0.0.1:1/v1/AUTH_a/logs","prefix":"web2/","signature":"SECRET-OF-WEB2"}`,
	}
	for h, g := range grants {
		if _, err := w.admin.KV().Put(&api.KVPair{Key: store.LogGrantKey("orchestrate", h), Value: []byte(g)}, nil); err != nil {
			t.Fatal(err)
		}
	}
	leaks := func(t *testing.T, c *api.Client) []string {
		t.Helper()
		var how []string
		kv := c.KV()
		if p, _, err := kv.Get(store.LogGrantKey("orchestrate", "web2"), nil); err == nil && p != nil {
			how = append(how, "get")
		}
		for _, dir := range []string{"orchestrate/", store.LogGrantDir("orchestrate"), "orchestrate/loggrants"} {
			pairs, _, _ := kv.List(dir, nil)
			for _, p := range pairs {
				if strings.Contains(string(p.Value), "SECRET-OF-WEB2") {
					how = append(how, "list "+dir)
				}
			}
			keys, _, _ := kv.Keys(dir, "", nil)
			for _, k := range keys {
				if k == store.LogGrantKey("orchestrate", "web2") {
					how = append(how, "keys "+dir)
				}
			}
		}
		ok, resp, _, _ := c.Txn().Txn(api.TxnOps{{KV: &api.KVTxnOp{Verb: api.KVGet, Key: store.LogGrantKey("orchestrate", "web2")}}}, nil)
		if ok && resp != nil {
			for _, r := range resp.Results {
				if r.KV != nil && strings.Contains(string(r.KV.Value), "SECRET-OF-WEB2") {
					how = append(how, "txn get")
				}
			}
		}
		return how
	}
	a := w.clientOf(t, w.hostToken(t, "web1", "web", tokenOpts{}))
	p, _, err := a.KV().Get(store.LogGrantKey("orchestrate", "web1"), nil)
	if err != nil || p == nil || string(p.Value) != grants["web1"] {
		t.Fatalf("web1 reading its own grant: %v %v", p, err)
	}
	if how := leaks(t, a); len(how) > 0 {
		t.Fatalf("web1's token obtains web2's grant by %v", how)
	}
	for _, h := range []string{"web1", "web2"} {
		before := w.kvDump(t)
		if _, err := a.KV().Put(&api.KVPair{Key: store.LogGrantKey("orchestrate", h), Value: []byte("{}")}, nil); err == nil {
			t.Fatalf("web1's token wrote %s's grant", h)
		}
		if _, err := a.KV().Delete(store.LogGrantKey("orchestrate", h), nil); err == nil {
			t.Fatalf("web1's token deleted %s's grant", h)
		}
		w.sameKV(t, "web1 writing "+h+"'s grant", before)
	}
	open := w.clientOf(t, w.hostToken(t, "web1", "web", tokenOpts{drop: `key_prefix "orchestrate/loggrants/"`}))
	if how := leaks(t, open); len(how) == 0 {
		t.Fatal("without node.hcl's deny rule web1 still cannot read web2's grant: the test proves nothing")
	}
}
