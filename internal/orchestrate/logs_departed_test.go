package orchestrate

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/consul/api"

	"github.com/jiocloud/orchestrate/internal/store/reaperkv"
	"github.com/jiocloud/orchestrate/internal/store/schema"
)

// The lab's death scenario: a node's failing step uploads its log to a
// real Swift, then the reaper deletes the server and forgets its records
// (store.ForgetHost, as its deregister does); `orchestrate logs HOST`
// still prints the log, through the departed record, saying on stderr
// that the host is gone and when it was forgotten. The same checks as a
// live host's apply; nothing prints a secret.
func TestLogsOfADepartedHost(t *testing.T) {
	n := failingSwiftNode(t)
	mustCode(t, n.convergeSwift(t), 1, "converge with Puppet failing")
	_, url := n.puppetStatus(t)
	st := mustStore(t, n.a)
	at := time.Date(2026, 11, 27, 17, 0, 0, 0, time.UTC)
	st.Now = func() time.Time { return at }
	if err := st.ForgetHost(context.Background(), "node1"); err != nil {
		t.Fatal(err)
	}
	if state, _ := n.puppetStatus(t); state != "" {
		t.Fatalf("node1's puppet record is still there (%s)", state)
	}
	r := n.logs(t, "node1")
	mustCode(t, r, 0, "logs of a forgotten host")
	if !strings.Contains(r.stdout, "puppet: output for the run log") {
		t.Fatalf("logs node1: stdout %q", r.stdout)
	}
	if !strings.Contains(r.stderr, "node1 is gone: its records were forgotten at 2026-11-27T17:00:00Z") || !strings.Contains(r.stderr, url) {
		t.Fatalf("logs node1: stderr %q, want the host gone, when, and the log's URL", r.stderr)
	}
	n.noSecret(t, "logs of a forgotten host", r.stdout, r.stderr)
	mustCode(t, n.logs(t, "node1", "--step", "puppet", "--version", "v2"), 0, "logs of a forgotten host's step and version")
	r = n.logs(t, "node1", "--step", "validation")
	mustCode(t, r, 1, "logs of a forgotten host's step with no log")
	if !strings.Contains(r.stderr, "nor does its departed record (forgotten 2026-11-27T17:00:00Z)") {
		t.Fatalf("stderr %q", r.stderr)
	}

	// A new server of the name, its own failure linking a log: its log,
	// not the departed one's.
	later := n.c.URL + "/node1/v3/puppet/20261128T000000.000Z.log"
	mustCode(t, cli(t, n.a, "", "update-status", "puppet", "failed", "--host", "node1", "--version", "v3", "--log-url", later), 0, "the new node1's failure")
	r = n.logs(t, "node1")
	mustCode(t, r, 1, "logs of the new node1, its log not uploaded")
	if strings.Contains(r.stderr, "gone") || !strings.Contains(r.stderr, later) {
		t.Fatalf("stderr %q, want the new server's log", r.stderr)
	}
	mustCode(t, n.logs(t, "node1", "--version", "v2"), 0, "logs of the earlier node1's version, from its departed record")

	// The departed record holds the same checks as a live record: a link
	// to another host's log, or another container, is refused.
	kv := n.a.Client.KV()
	key := reaperkv.DepartedKey(schema.DefaultPrefix, "node1")
	for _, tc := range []struct{ name, url string }{
		{"another host's log", n.c.URL + "/node2/v2/puppet/20260101T000000.000Z.log"},
		{"another container", n.s.StorageURL + "/secrets/node1/v2/puppet/20260101T000000.000Z.log"},
	} {
		_, data, _ := reaperkv.NewDeparted("node1", at, map[string]reaperkv.DepartedLog{"puppet": {State: "failed", Version: "v2", LogURL: tc.url}})
		if _, err := kv.Put(&api.KVPair{Key: key, Value: data}, nil); err != nil {
			t.Fatal(err)
		}
		r := n.logs(t, "node1", "--version", "v2")
		mustCode(t, r, 2, "a departed record linking "+tc.name)
		if !strings.Contains(r.stderr, "refused") {
			t.Fatalf("%s: stderr %q", tc.name, r.stderr)
		}
	}
	// Garbage written by hand: exit 2 naming the key, no panic.
	for _, v := range []string{"not json", `{"host":"node1"}`, `{"host":"node2","forgotten":"2026-11-27T17:00:00Z","logs":{"puppet":{"log_url":"x"}}}`} {
		if _, err := kv.Put(&api.KVPair{Key: key, Value: []byte(v)}, nil); err != nil {
			t.Fatal(err)
		}
		r := n.logs(t, "node1", "--version", "v2")
		mustCode(t, r, 2, "a departed record "+v)
		if !strings.Contains(r.stderr, "reaper/departed/node1") || !strings.Contains(r.stderr, "not a departed record") && !strings.Contains(r.stderr, "names host") {
			t.Fatalf("%s: stderr %q", v, r.stderr)
		}
	}
}

// A forgotten host whose records linked no log leaves no departed record:
// `orchestrate logs` finds nothing (exit 1).
func TestLogsOfADepartedHostWithoutALog(t *testing.T) {
	n := newSwiftNode(t)
	mustCode(t, cli(t, n.a, "", "update-status", "puppet", "failed", "--host", "node2", "--detail", "no upload"), 0, "node2's failure")
	if err := mustStore(t, n.a).ForgetHost(context.Background(), "node2"); err != nil {
		t.Fatal(err)
	}
	if ks := allKeys(t, n.a.Client); strings.Contains(strings.Join(ks, " "), "departed") {
		t.Fatalf("a departed record for a host with no log: %v", ks)
	}
	r := n.logs(t, "node2")
	mustCode(t, r, 1, "logs of a forgotten host with no log")
	if !strings.Contains(r.stderr, "its status records link none\n") {
		t.Fatalf("stderr %q", r.stderr)
	}
}
