package hiera

import (
	"os"
	"reflect"
	"sort"
	"strings"
	"testing"

	"github.com/hashicorp/consul/api"

	"github.com/jiocloud/orchestrate/internal/consultest"
)

// TestHostileNames registers hostile service names, tags, meta, node names,
// addresses and tagged-address keys in a real agent, and checks the output
// parses, holds exactly what was registered under valid names, injects
// nothing, and names every skipped service once in a warning.
func TestHostileNames(t *testing.T) {
	a := consultest.Start(t, consultest.Options{})
	c := a.Client

	// 1. Hostile service names, each on its own node. Valid ones stay.
	var skipped, kept []string
	for n, name := range append(hostile, "ok_name-1", strings.Repeat("x", MaxNameLen)) {
		if name == "" {
			continue
		}
		reg := &api.CatalogRegistration{
			Node: "n" + string(rune('a'+n%26)) + strings.Repeat("z", n/26), Address: "10.9.0.1",
			Service: &api.AgentService{ID: "id-" + strings.Repeat("i", n+1), Service: name, Port: 1000 + n,
				Tags: hostile[:len(hostile)-1], Meta: map[string]string{"k": name}},
		}
		if _, err := c.Catalog().Register(reg, nil); err != nil {
			t.Logf("agent refuses service name %q: %v", name, err)
			continue
		}
		if ValidServiceName(name) == nil {
			kept = append(kept, name)
		} else {
			skipped = append(skipped, name)
		}
	}
	if len(skipped) < 20 || len(kept) < 2 {
		t.Fatalf("the agent accepted too few hostile names to test anything: kept %q, skipped %d", kept, len(skipped))
	}

	// 2. One valid service whose values are all hostile: addresses, node
	// names and tagged addresses (valid keys with hostile values, hostile
	// keys that must be skipped, and "address"/"port"/"nodes" that would
	// overwrite other keys).
	var wantAddrs, wantNodes, wantEth0, validTagKeys []string
	for n, v := range hostile {
		if v == "" || strings.ContainsAny(v, "/") {
			continue
		}
		node := "node " + v
		reg := &api.CatalogRegistration{
			Node: node, Address: "10.8.0.1",
			Service: &api.AgentService{
				ID: "evil-" + strings.Repeat("e", n+1), Service: "evil-values", Address: v, Port: 7000 + n,
				TaggedAddresses: map[string]api.ServiceAddress{
					"eth0": {Address: v, Port: 1}, v: {Address: "10.7.0.1", Port: 2},
					"address": {Address: "6.6.6.6"}, "port": {Address: "6.6.6.7"}, "nodes": {Address: "6.6.6.8"},
				},
			},
		}
		if _, err := c.Catalog().Register(reg, nil); err != nil {
			t.Logf("agent refuses node %q / address %q: %v", node, v, err)
			continue
		}
		wantAddrs = append(wantAddrs, v)
		wantNodes = append(wantNodes, node)
		wantEth0 = append(wantEth0, v)
		if ValidTaggedAddressKey(v) == nil {
			validTagKeys = append(validTagKeys, v)
		}
	}
	if len(wantAddrs) < 20 {
		t.Fatalf("the agent accepted only %d hostile addresses", len(wantAddrs))
	}

	out := outPath(t)
	code, stderr := runHS(t, a, "--out", out)
	if code != 0 {
		t.Fatalf("exit %d: %s", code, stderr)
	}
	got := readKeys(t, out)

	// Exactly the keys of the valid services, the agent's own "consul" and
	// the dependency keys.
	var wantKeys []string
	for _, svc := range append(kept, "evil-values", "consul") {
		for _, g := range []string{"services::", "healthy_services::"} {
			wantKeys = append(wantKeys, g+svc+"::address", g+svc+"::port", g+svc+"::nodes")
		}
	}
	for _, k := range validTagKeys {
		wantKeys = append(wantKeys, "services::evil-values::"+k, "healthy_services::evil-values::"+k)
	}
	wantKeys = append(wantKeys, "services::evil-values::eth0", "healthy_services::evil-values::eth0",
		"orchestrate::dependencies_met", "orchestrate::unmet_dependencies")
	var gotKeys []string
	for k := range got {
		gotKeys = append(gotKeys, k)
	}
	sort.Strings(gotKeys)
	sort.Strings(wantKeys)
	if !reflect.DeepEqual(gotKeys, wantKeys) {
		data, _ := os.ReadFile(out)
		t.Fatalf("keys:\n got %q\nwant %q\nfile:\n%s", gotKeys, wantKeys, data)
	}
	check := func(key string, want []string) {
		t.Helper()
		w := uniqueStrings(want)
		if g := got[key]; !reflect.DeepEqual(g, strs(w...)) {
			t.Errorf("%s =\n %#v\nwant\n %#v", key, g, w)
		}
	}
	check("services::evil-values::address", wantAddrs)
	check("healthy_services::evil-values::address", wantAddrs)
	check("services::evil-values::nodes", wantNodes)
	check("services::evil-values::eth0", wantEth0)
	for _, k := range validTagKeys {
		check("services::evil-values::"+k, []string{"10.7.0.1"})
	}
	for _, svc := range kept {
		if g := got["services::"+svc+"::address"]; !reflect.DeepEqual(g, strs("10.9.0.1")) {
			t.Errorf("services::%s::address = %v", svc, g)
		}
	}

	// Each skipped service is named in exactly one warning.
	for _, name := range skipped {
		n := strings.Count(stderr, "service="+logQuote(name)+" ")
		if n != 1 {
			t.Errorf("skipped service %q: %d warnings naming it, want 1", name, n)
		}
	}
	// Hostile tagged-address keys are skipped with a warning, too.
	for _, k := range []string{"address", "port", "nodes", "a: b"} {
		if !strings.Contains(stderr, "key="+logQuote(k)) {
			t.Errorf("no warning naming skipped tagged address key %q", k)
		}
	}
	if t.Failed() {
		t.Logf("stderr:\n%s", stderr)
	}
}
