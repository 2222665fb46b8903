package reaperkv

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"
)

func activities(n int, reason string) []Activity {
	out := make([]Activity, n)
	for i := range out {
		out[i] = Activity{Time: time.Unix(int64(i), 0).UTC(), Leader: "boot1", Kind: "create", Role: "web", Action: fmt.Sprintf("create web web%d", i), Reason: reason, Result: "done"}
	}
	return out
}

// The history keeps the newest activities within both bounds, and drops
// the oldest first.
func TestAppendHistoryBounds(t *testing.T) {
	for _, tc := range []struct {
		name             string
		have, add        int
		reason           string
		maxN, maxB       int
		wantFirst, wantN int
	}{
		{name: "under both bounds", have: 3, add: 2, maxN: 10, maxB: 1 << 20, wantFirst: 0, wantN: 5},
		{name: "count bound", have: 8, add: 5, maxN: 10, maxB: 1 << 20, wantFirst: 3, wantN: 10},
		{name: "adding more than the bound keeps the newest added", have: 2, add: 15, maxN: 10, maxB: 1 << 20, wantFirst: 7, wantN: 10},
		{name: "byte bound", have: 50, add: 50, reason: strings.Repeat("x", 1000), maxN: 1000, maxB: 20 << 10, wantN: -1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			all := activities(tc.have+tc.add, tc.reason)
			h, data, err := AppendHistory(all[:tc.have], all[tc.have:], tc.maxN, tc.maxB)
			if err != nil {
				t.Fatal(err)
			}
			if len(data) > tc.maxB || len(h) > tc.maxN {
				t.Fatalf("%d entries, %d bytes: over the bounds %d, %d", len(h), len(data), tc.maxN, tc.maxB)
			}
			if h[len(h)-1].Action != all[len(all)-1].Action {
				t.Fatalf("the newest activity was dropped: last is %q", h[len(h)-1].Action)
			}
			if tc.wantN >= 0 && (len(h) != tc.wantN || h[0].Action != all[tc.wantFirst].Action) {
				t.Fatalf("kept %d from %q, want %d from %q", len(h), h[0].Action, tc.wantN, all[tc.wantFirst].Action)
			}
			var back []Activity
			if err := json.Unmarshal(data, &back); err != nil || len(back) != len(h) {
				t.Fatalf("the value does not read back: %v", err)
			}
		})
	}
	if h, err := ParseHistory([]byte(`{"not":"a list"}`)); err == nil {
		t.Fatalf("a value the reaper did not write parsed as %v", h)
	}
}

// An activity's event payload fits what the agent's HTTP API takes (300
// bytes), stays JSON, and is cut on a rune boundary, the cut marked.
func TestEventPayloadFits(t *testing.T) {
	a := activities(1, strings.Repeat("é", 400))[0]
	a.Error = strings.Repeat("500 Internal Server Error ", 30)
	p := EventPayload(a)
	if len(p) > MaxEventPayload {
		t.Fatalf("payload %d bytes: over %d", len(p), MaxEventPayload)
	}
	var back Activity
	if err := json.Unmarshal(p, &back); err != nil {
		t.Fatalf("payload is no JSON: %v: %s", err, p)
	}
	if back.Kind != "create" || back.Role != "web" || back.Result != "done" || !strings.HasSuffix(back.Error+back.Reason, "...") || !json.Valid(p) {
		t.Fatalf("cut payload lost its facts: %+v", back)
	}
	if short := activities(1, "")[0]; string(EventPayload(short)) != string(must(json.Marshal(short))) {
		t.Fatal("a payload that fits was changed")
	}
}

func must(b []byte, err error) []byte {
	if err != nil {
		panic(err)
	}
	return b
}
