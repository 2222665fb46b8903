package reaperkv

import (
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/jiocloud/orchestrate/internal/store/schema"
)

// A hook's event payload fits what the agent's HTTP API takes (300 bytes)
// whatever the names' length (up to 200 bytes each), and always names the
// hook and its entry; short names keep everything.
func TestHookEventPayloadFits(t *testing.T) {
	deadline := time.Date(2026, 11, 25, 12, 10, 0, 0, time.UTC)
	for _, tc := range []struct {
		name, role, host string
		wantAll, wantCut bool
	}{
		{"short names", "web", "web4", true, false},
		{"long role and host", strings.Repeat("r", 200), strings.Repeat("h", 200), false, true},
		{"long host", "web", strings.Repeat("h", 200), false, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			req := schema.HookRequest{Role: tc.role, Host: tc.host, Hook: schema.HookLaunch, Entry: tc.role + ".187a3e5f2b1c4d00.12",
				Deadline: deadline, Default: schema.HookAbandon}
			p := HookEventPayload(req)
			if len(p) > MaxEventPayload {
				t.Fatalf("payload %d bytes: over %d", len(p), MaxEventPayload)
			}
			var b HookEventBody
			if err := json.Unmarshal(p, &b); err != nil {
				t.Fatalf("payload is no JSON: %v: %s", err, p)
			}
			if b.Hook != schema.HookLaunch || b.Entry != req.Entry {
				t.Fatalf("payload %s lost the hook or the entry", p)
			}
			all := b.Role == tc.role && b.Host == tc.host && b.Deadline.Equal(deadline) && b.Default == schema.HookAbandon
			if all != tc.wantAll || b.Cut != tc.wantCut {
				t.Fatalf("payload %s: everything kept %t (want %t), cut %t (want %t)", p, all, tc.wantAll, b.Cut, tc.wantCut)
			}
		})
	}
}

// A hook is pending from its request to its result.
func TestHookStatePending(t *testing.T) {
	var none *HookState
	if none.Pending() || !(&HookState{}).Pending() || (&HookState{Result: schema.HookContinue}).Pending() {
		t.Fatal("Pending: want false for none, true while no result, false with one")
	}
}
