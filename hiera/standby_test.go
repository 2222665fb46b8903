package hiera

import (
	"os"
	"path/filepath"
	"reflect"
	"testing"
	"time"

	"github.com/hashicorp/consul/api"

	"github.com/jiocloud/orchestrate/internal/consultest"
	"github.com/jiocloud/orchestrate/internal/store/reaperkv"
	"github.com/jiocloud/orchestrate/internal/testutil"
)

// maintain puts node in Consul's node maintenance through the catalog, as
// the reaper does, with notes.
func maintain(t testing.TB, c *api.Client, node, addr, notes string) {
	t.Helper()
	if _, err := c.Catalog().Register(&api.CatalogRegistration{Node: node, Address: addr, SkipNodeUpdate: true,
		Check: &api.AgentCheck{Node: node, CheckID: reaperkv.NodeMaintenanceCheck, Name: "Node Maintenance Mode", Status: api.HealthCritical, Notes: notes}}, nil); err != nil {
		t.Fatal(err)
	}
}

// TestStandbysAreInNoKey: a warm pool standby (node maintenance whose
// notes say standby) is in no services:: or healthy_services:: key and no
// dependency count; a node an operator put in maintenance stays in
// services:: as before. Once claimed (its maintenance ended), the standby
// appears in the keys of a --watch run.
func TestStandbysAreInNoKey(t *testing.T) {
	a := consultest.Start(t, consultest.Options{})
	register(t, a.Client, inst{node: "web1", nodeAddr: "10.0.0.1", svc: "web", port: 80, status: "passing"})
	register(t, a.Client, inst{node: "web2", nodeAddr: "10.0.0.2", svc: "web", port: 80, status: "passing"})
	register(t, a.Client, inst{node: "web3", nodeAddr: "10.0.0.3", svc: "web", port: 80, status: "passing"})
	maintain(t, a.Client, "web2", "10.0.0.2", reaperkv.StandbyNotesPrefix+" standby of the warm pool of role web")
	maintain(t, a.Client, "web3", "10.0.0.3", "operator: disk replacement")
	deps := filepath.Join(t.TempDir(), "deps.yaml")
	if err := os.WriteFile(deps, []byte("web: {addressable: 2, functional: 2}\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	out := outPath(t)
	if code, stderr := runHS(t, a, "--out", out, "--dependencies", deps); code != 0 {
		t.Fatalf("exit %d: %s", code, stderr)
	}
	keys := readKeys(t, out)
	for key, want := range map[string][]any{
		"services::web::nodes":           strs("web1", "web3"),
		"services::web::address":         strs("10.0.0.1", "10.0.0.3"),
		"healthy_services::web::nodes":   strs("web1"),
		"healthy_services::web::address": strs("10.0.0.1"),
	} {
		if !reflect.DeepEqual(keys[key], want) {
			t.Errorf("%s = %v, want %v", key, keys[key], want)
		}
	}
	for key, want := range map[string]any{"orchestrate::dependencies::web::addressable": 1, "orchestrate::dependencies::web::functional": 1} {
		if got := keys[key]; !reflect.DeepEqual(got, want) {
			t.Errorf("%s = %v, want %v", key, got, want)
		}
	}

	w := startWatch(a.HTTPAddr, out)
	defer w.cancel()
	list := func(key string) []any { v, _ := keysIfAny(t, out)[key].([]any); return v }
	testutil.Eventually(t, 15*time.Second, "the first render", func() bool { return len(list("healthy_services::web::nodes")) == 1 }, w.logs.String)
	// The claim: the reaper ends the standby's maintenance.
	claimed := time.Now()
	if _, err := a.Client.Catalog().Deregister(&api.CatalogDeregistration{Node: "web2", CheckID: reaperkv.NodeMaintenanceCheck}, nil); err != nil {
		t.Fatal(err)
	}
	testutil.Eventually(t, 5*time.Second, "the claimed standby in healthy_services::web::nodes", func() bool {
		return reflect.DeepEqual(list("healthy_services::web::nodes"), strs("web1", "web2"))
	}, w.logs.String)
	t.Logf("the claimed standby appeared %s after its maintenance ended", time.Since(claimed).Round(time.Millisecond))
	if got := list("services::web::nodes"); !reflect.DeepEqual(got, strs("web1", "web2", "web3")) {
		t.Errorf("services::web::nodes = %v after the claim", got)
	}
	w.stop(t)
}
