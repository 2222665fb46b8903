package orchestrate

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/consul/api"

	"github.com/jiocloud/orchestrate/internal/consultest"
	"github.com/jiocloud/orchestrate/internal/store"
	"github.com/jiocloud/orchestrate/internal/store/reaperkv"
	"github.com/jiocloud/orchestrate/internal/store/schema"
	"github.com/jiocloud/orchestrate/internal/testutil"
)

// TestHeartbeatWatch: the watches watch-config generates answer the
// reaper's heartbeat, on a real agent: once when the agent starts, then
// each time the leader rings (a rewrite of <prefix>/reaper/heartbeat),
// one write of the host's own record each. A write of anything else
// rings nothing.
func TestHeartbeatWatch(t *testing.T) {
	dir := t.TempDir()
	ws := generatedWatches(t, "--hiera-services", builtBinary(t, "hiera-services"), "--orchestrate", builtBinary(t, "orchestrate"),
		"--out", filepath.Join(dir, "services.yaml"), "--host", "web8")
	a := consultest.Start(t, consultest.Options{NodeName: "web8", HCL: agentConfig(t, ws), HandlerEnv: true})
	logs := func() string { b, _ := os.ReadFile(a.LogPath); return string(b) }
	key := store.HeartbeatKey(schema.DefaultPrefix, "web8")
	index := func() uint64 {
		p, _, err := a.Client.KV().Get(key, nil)
		if err != nil {
			t.Fatal(err)
		}
		if p == nil {
			return 0
		}
		return p.ModifyIndex
	}
	// Consul runs a key watch's handler when the agent starts, the key
	// missing or not.
	testutil.Eventually(t, 20*time.Second, "the heartbeat written at the agent's start", func() bool { return index() > 0 }, logs)
	time.Sleep(time.Second) // the start's run, and nothing after it
	first := index()
	if _, err := a.Client.KV().Put(&api.KVPair{Key: schema.Join(schema.DefaultPrefix, "current_version"), Value: []byte("v1")}, nil); err != nil {
		t.Fatal(err)
	}
	time.Sleep(2 * time.Second)
	if index() != first {
		t.Fatal("the heartbeat answered a write that was no ring")
	}
	for ring := 1; ring <= 2; ring++ {
		prev := index()
		if _, err := a.Client.KV().Put(&api.KVPair{Key: reaperkv.ReaperKey(schema.DefaultPrefix, reaperkv.ReaperHeartbeatKey), Value: []byte(`{"time":"` + time.Now().UTC().Format(time.RFC3339Nano) + `"}`)}, nil); err != nil {
			t.Fatal(err)
		}
		testutil.Eventually(t, 20*time.Second, "the node's answer to ring "+string(rune('0'+ring)), func() bool { return index() > prev }, logs)
	}
	snap, err := mustStore(t, a).Snapshot(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if r := snap.Records["web8"]; r.Keys != 1 || time.Since(r.Heartbeat) > time.Minute {
		t.Fatalf("web8's records: %+v, want one heartbeat", r)
	}
	if strings.Contains(logs(), "Failed to run watch handler") {
		t.Fatalf("a handler failed:\n%s", logs())
	}
}

// The command: a host that is no host name is refused, exit 2, nothing
// written.
func TestHeartbeatBadHost(t *testing.T) {
	a := consultest.Start(t, consultest.Options{})
	r := cli(t, a, "", "heartbeat", "--host", "web1/../web2")
	if r.code != 2 || !strings.Contains(r.stderr, "host") {
		t.Fatalf("exit %d: %s", r.code, r.stderr)
	}
	if ks := allKeys(t, a.Client); len(ks) != 0 {
		t.Fatalf("written: %v", ks)
	}
	mustCode(t, cli(t, a, "", "heartbeat", "--host", "web1"), 0, "heartbeat")
	if ks := allKeys(t, a.Client); len(ks) != 1 || ks[0] != store.HeartbeatKey(schema.DefaultPrefix, "web1") {
		t.Fatalf("written: %v", ks)
	}
}
