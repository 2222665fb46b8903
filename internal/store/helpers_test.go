package store_test

import (
	"testing"

	"github.com/hashicorp/consul/api"

	"github.com/jiocloud/orchestrate/internal/consultest"
	"github.com/jiocloud/orchestrate/internal/store"
)

// oldLayout is what orchestrate before node restriction wrote for web1 and
// web2, value for value (the JSON its store marshalled): versions, status
// in two categories (web2's consistent run failed, suspect), load reports
// and a drain request for web2 that web2 answered inside it.
var oldLayout = map[string]string{
	"running_version/v1/web1":        `{"time":"2026-11-20T10:00:00.123456789Z"}`,
	"running_version/v1/web2":        `{"time":"2026-11-20T10:01:00Z"}`,
	"status/puppet/success/web1":     `{"time":"2026-11-20T10:00:00Z","version":"v1","detail":"","log_url":"http://logs/web1"}`,
	"status/validation/success/web1": `{"time":"2026-11-20T10:02:00Z","version":"v1","detail":"","log_url":""}`,
	"status/puppet/failed/web2":      `{"time":"2026-11-20T10:03:00Z","version":"v1","detail":"Exec[x] returned 1","log_url":"","suspect":true}`,
	"status/validation/pending/web2": `{"time":"2026-11-20T10:03:00Z","version":"v1","detail":"waiting for db","log_url":"","waiting":true}`,
	"metrics/web/web1/load":          `{"value":0.73,"time":"2026-11-20T10:04:00Z"}`,
	"metrics/web/web2/load":          `{"value":0.2,"time":"2026-11-20T10:04:00Z"}`,
	"drain/web2": `{"requested":"2026-11-20T10:05:00Z","role":"web","entry":"web.187a.1","reason":"surplus","deadline":"2026-11-20T11:05:00Z",` +
		`"on_failure":"abort","on_timeout":"abort","answer":{"time":"2026-11-20T10:06:00Z","by":"drain handler on web2","drained":true}}`,
}

// seed writes kv (keys relative to prefix) with the management client.
func seed(t *testing.T, c *api.Client, prefix string, kv map[string]string) {
	t.Helper()
	for k, v := range kv {
		if _, err := c.KV().Put(&api.KVPair{Key: prefix + "/" + k, Value: []byte(v)}, nil); err != nil {
			t.Fatal(err)
		}
	}
}

// newStore starts an agent and returns a store on it under
// test/orchestrate, and the agent's management client.
func newStore(t *testing.T) (*store.Store, *api.Client) {
	t.Helper()
	a := consultest.Start(t, consultest.Options{})
	s, err := store.New(a.Client, "test/orchestrate")
	if err != nil {
		t.Fatal(err)
	}
	return s, a.Client
}

// keys lists every key under p.
func keys(t *testing.T, c *api.Client, p string) []string {
	t.Helper()
	ks, _, err := c.KV().Keys(p, "", nil)
	if err != nil {
		t.Fatal(err)
	}
	return ks
}
