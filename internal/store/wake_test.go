package store_test

import (
	"testing"

	"github.com/jiocloud/orchestrate/internal/store"
)

// TestWakesReaper: what operators, nodes and handlers write to change a
// decision wakes the reaper; what it writes itself each cycle, and what
// moves all the time, does not.
func TestWakesReaper(t *testing.T) {
	cases := []struct {
		key  string
		want bool
	}{
		{"orchestrate/current_version", true},
		{"orchestrate/roles/web/desired", true},
		{"orchestrate/reaper/armed", true},
		{"orchestrate/reaper/hold/web2", true},
		{"orchestrate/reaper/pool-flush/web", true},
		{"orchestrate/reaper/refresh/web", true},
		{"orchestrate/drain/web2", true},
		{"orchestrate/protect/web2", true},
		{"orchestrate/hook-answer/web/web2", true},
		{"orchestrate/hosts/web2/drain", true},
		{"orchestrate/hosts/web2/status/validation", true},
		{"orchestrate/hosts/web2/status/provisioned", true},
		{"orchestrate/status/validation/success/web2", true},
		{"orchestrate/reaper/state", false},
		{"orchestrate/reaper/journal/e1", false},
		{"orchestrate/reaper/heartbeat", false},
		{"orchestrate/reaper/leader", false},
		{"orchestrate/reaper/budget", false},
		{"orchestrate/history/reaper/1", false},
		{"orchestrate/hosts/web2/heartbeat", false},
		{"orchestrate/hosts/web2/metrics/load", false},
		{"orchestrate/hosts/web2/status/puppet", false},
		{"orchestrate/metrics/web/web2/load", false},
		{"orchestrate/running_version/v1/web2", false},
		{"orchestrate/capacity/web", false},
		{"other/roles/web/desired", false},
	}
	for _, tc := range cases {
		t.Run(tc.key, func(t *testing.T) {
			if got := store.WakesReaper("orchestrate", tc.key); got != tc.want {
				t.Fatalf("WakesReaper(%q) = %v, want %v", tc.key, got, tc.want)
			}
		})
	}
}
