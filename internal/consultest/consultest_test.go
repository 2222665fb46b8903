package consultest

import (
	"context"
	"testing"
	"time"

	"github.com/hashicorp/consul/api"
)

// A client agent joined to a dev server keeps working across a restart:
// it is back in the catalog on the same address, and the cluster's data
// (held by the server) is still there, though a TTL check it holds is
// critical.
func TestClientAgentRestart(t *testing.T) {
	t.Parallel()
	server := Start(t, Options{})
	client := Start(t, Options{JoinLAN: server.SerfLANAddr()})
	if _, err := client.Client.KV().Put(&api.KVPair{Key: "k", Value: []byte("v")}, nil); err != nil {
		t.Fatal(err)
	}
	// A TTL check on the agent (as the reaper registers) is critical after
	// the restart until its owner updates it: the agent is ready anyway.
	if err := client.Client.Agent().ServiceRegister(&api.AgentServiceRegistration{ID: "svc", Name: "svc",
		Check: &api.AgentServiceCheck{CheckID: "svc-alive", TTL: "1s"}}); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	if err := client.Restart(ctx, 200*time.Millisecond); err != nil {
		t.Fatalf("restart: %v", err)
	}
	p, _, err := client.Client.KV().Get("k", nil)
	if err != nil || p == nil || string(p.Value) != "v" {
		t.Fatalf("after the restart: %v %v", p, err)
	}
	nodes, _, err := server.Client.Catalog().Nodes(nil)
	if err != nil {
		t.Fatal(err)
	}
	found := false
	for _, n := range nodes {
		found = found || n.Node == client.NodeName
	}
	if !found {
		t.Fatalf("client node %s not in the catalog after its restart: %v", client.NodeName, nodes)
	}
	client.Stop()
	if err := client.Restart(ctx, 0); err == nil {
		t.Fatal("restart of a stopped agent succeeded")
	}
}
