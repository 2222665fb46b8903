package converge

import (
	"testing"
	"time"
)

// TestDefaultCheckTTLOutlivesANode: the orchestrate:puppet and
// orchestrate:validation checks are TTL checks that only converge refreshes,
// and converge runs only when something changes. An expired TTL check turns
// critical, and a critical node check takes every service of the node out
// of Consul DNS (checked against a real agent while reviewing this). With
// the old 30-day default, a cloud left alone for a month after a rollout
// lost every node's services from DNS within the same hour. The default
// must outlive any node.
func TestDefaultCheckTTLOutlivesANode(t *testing.T) {
	const nodeLife = 5 * 365 * 24 * time.Hour
	d := Defaults()
	if d.CheckTTL < nodeLife {
		t.Fatalf("default check TTL %s expires within a node's life (%s)", d.CheckTTL, nodeLife)
	}
	d.PuppetCmd = "true"
	if err := d.Validate(); err != nil {
		t.Fatalf("defaults do not validate: %v", err)
	}
}
