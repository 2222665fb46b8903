package orchestrate

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/consul/api"

	"github.com/jiocloud/orchestrate/internal/consultest"
	"github.com/jiocloud/orchestrate/internal/store/reaperkv"
	"github.com/jiocloud/orchestrate/internal/store/schema"
	"github.com/jiocloud/orchestrate/internal/testutil"
)

// maintenanceNotes is the notes of the node's maintenance check, and
// whether it has one, from the catalog (what DNS and hiera-services see).
func maintenanceNotes(t *testing.T, a *consultest.Agent, node string) (string, bool) {
	t.Helper()
	checks, _, err := a.Client.Health().Node(node, nil)
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range checks {
		if c.CheckID == reaperkv.NodeMaintenanceCheck {
			return c.Notes, true
		}
	}
	return "", false
}

// TestStandbyWatch: with watch-config --standby, the node's own agent runs
// `orchestrate standby` when its warm pool record appears (node
// maintenance, standby notes) and when the reaper's claim removes it (the
// maintenance ends), on a real agent.
func TestStandbyWatch(t *testing.T) {
	dir := t.TempDir()
	ws := generatedWatches(t, "--hiera-services", builtBinary(t, "hiera-services"), "--orchestrate", builtBinary(t, "orchestrate"),
		"--out", filepath.Join(dir, "services.yaml"), "--host", "web8", "--role", "web", "--consistent-cmd", "/bin/true", "--standby")
	found := false
	for _, w := range ws {
		found = found || (w.Type == "key" && w.Key == reaperkv.PoolKey(schema.DefaultPrefix, "web", "web8"))
	}
	if !found {
		t.Fatalf("no key watch on the standby record: %+v", ws)
	}
	a := consultest.Start(t, consultest.Options{NodeName: "web8", HCL: agentConfig(t, ws), HandlerEnv: true})
	logs := func() string { b, _ := os.ReadFile(a.LogPath); return string(b) }
	rec, _ := json.Marshal(reaperkv.StandbyRecord{Role: "web", Host: "web8", ID: "id-8", State: reaperkv.StandbyBuilding, Created: time.Now()})
	if _, err := a.Client.KV().Put(&api.KVPair{Key: reaperkv.PoolKey(schema.DefaultPrefix, "web", "web8"), Value: rec}, nil); err != nil {
		t.Fatal(err)
	}
	testutil.Eventually(t, 20*time.Second, "the node in standby maintenance", func() bool {
		notes, ok := maintenanceNotes(t, a, "web8")
		return ok && strings.HasPrefix(notes, reaperkv.StandbyNotesPrefix)
	}, logs)
	// The claim: the reaper removes the record in its journal transaction.
	if _, err := a.Client.KV().Delete(reaperkv.PoolKey(schema.DefaultPrefix, "web", "web8"), nil); err != nil {
		t.Fatal(err)
	}
	testutil.Eventually(t, 20*time.Second, "the maintenance ended by the node's handler", func() bool {
		_, ok := maintenanceNotes(t, a, "web8")
		return !ok
	}, logs)
}

// TestStandbyLeavesOtherMaintenanceAlone: without a record, a maintenance
// an operator set stays; --host must be the local agent's node; --role is
// required, and watch-config --standby needs --role.
func TestStandbyLeavesOtherMaintenanceAlone(t *testing.T) {
	a := consultest.Start(t, consultest.Options{NodeName: "web9"})
	if err := a.Client.Agent().EnableNodeMaintenance("operator: disk swap"); err != nil {
		t.Fatal(err)
	}
	mustCode(t, cli(t, a, "", "standby", "--handler", "--role", "web"), 0, "no record")
	if notes, ok := maintenanceNotes(t, a, "web9"); !ok || notes != "operator: disk swap" {
		t.Fatalf("the operator's maintenance changed: %q %v", notes, ok)
	}
	if r := cli(t, a, "", "standby", "--role", "web", "--host", "web1"); r.code != 2 || !strings.Contains(r.stderr, "not the local agent's node") {
		t.Fatalf("another host: exit %d: %s", r.code, r.stderr)
	}
	mustCode(t, cli(t, a, "", "standby"), 2, "no --role")
	mustCode(t, cli(t, a, "", "watch-config", "--host", "web9", "--standby"), 2, "watch-config --standby without --role")
}
