package store

import (
	"testing"

	"github.com/jiocloud/orchestrate/internal/store/reaperkv"
	"github.com/jiocloud/orchestrate/internal/store/schema"
)

// TestKeyLayout pins every key and directory the store builds to the
// layout DESIGN.md and the package comments give, written out in full: each
// key has one function that spells it, and this is what it spells, with
// the prefix's leading and trailing slashes dropped.
func TestKeyLayout(t *testing.T) {
	const p = "/orch/a/" // a prefix of two segments, with stray slashes
	s := &Store{prefix: "orch/a"}
	tests := []struct{ name, got, want string }{
		{"prefix", schema.PrefixDir(p), "orch/a/"},
		{"relative key", schema.RelKey(p, "orch/a/roles/db/desired"), "roles/db/desired"},
		{"current version", CurrentVersionKey(p), "orch/a/current_version"},
		{"desired", DesiredKey(p, "db"), "orch/a/roles/db/desired"},
		{"override", OverrideKey(p, "db"), "orch/a/roles/db/override"},
		{"scale-in", ScaleInKey(p, "db", "db1"), "orch/a/roles/db/scale_in/db1"},
		{"drain request", DrainKey(p, "db1"), "orch/a/drain/db1"},
		{"protection", ProtectKey(p, "db1"), "orch/a/protect/db1"},
		{"capacity", CapacityKey(p, "db"), "orch/a/capacity/db"},
		{"hook request", HookKey(p, "db", "db1"), "orch/a/hook/db/db1"},
		{"hook answer", HookAnswerKey(p, "db", "db1"), "orch/a/hook-answer/db/db1"},
		{"hook answers", HookAnswerDir(p), "orch/a/hook-answer/"},
		{"host's records", HostDir(p, "db1"), "orch/a/hosts/db1/"},
		{"host's version", HostVersionKey(p, "db1"), "orch/a/hosts/db1/version"},
		{"host's status", HostStatusKey(p, "db1", "puppet"), "orch/a/hosts/db1/status/puppet"},
		{"host's statuses", HostDir(p, "db1") + statusKind(""), "orch/a/hosts/db1/status/"},
		{"host's metric", MetricKey(p, "db1", "load"), "orch/a/hosts/db1/metrics/load"},
		{"host's drain answer", DrainAnswerKey(p, "db1"), "orch/a/hosts/db1/drain"},
		{"log grant", LogGrantKey(p, "db1"), "orch/a/loggrants/db1"},
		{"log grants", LogGrantDir(p), "orch/a/loggrants/"},
		{"rollout", rolloutDir(p, "db"), "orch/a/rollout/db/"},
		{"rollout, exported", s.RolloutDir("db"), "orch/a/rollout/db/"},
		{"rollout slot", rolloutSlotKey(p, "db", "db1"), "orch/a/rollout/db/slot/db1"},
		{"rollout progress", rolloutHostKey(p, "db", "db1"), "orch/a/rollout/db/hosts/db1"},
		{"rollout follower", rolloutFollowerKey(p, "db", "web"), "orch/a/rollout/db/followers/web"},
		{"doorbell", s.WakeKey("web"), "orch/a/wake/web"},
		{"older running version", keyDir(p, dirRunning), "orch/a/running_version/"},
		{"older status", keyDir(p, dirStatus), "orch/a/status/"},
		{"reaper leader", reaperkv.ReaperKey(p, reaperkv.ReaperLeaderKey), "orch/a/reaper/leader"},
		{"reaper armed", reaperkv.ReaperKey(p, reaperkv.ReaperArmedKey), "orch/a/reaper/armed"},
		{"reaper state", reaperkv.ReaperKey(p, reaperkv.ReaperStateKey), "orch/a/reaper/state"},
		{"standby", reaperkv.PoolKey(p, "lb", "lb3"), "orch/a/reaper/pool/lb/lb3"},
		{"pool flush", reaperkv.PoolFlushKey(p, "lb"), "orch/a/reaper/pool-flush/lb"},
		{"cool-off", reaperkv.CooloffKey(p, "db1"), "orch/a/reaper/cooloff/db1"},
		{"node token", reaperkv.NodeTokenKey(p, "db1"), "orch/a/reaper/token/db1"},
		{"server group", reaperkv.ServerGroupKey(p, "db"), "orch/a/reaper/servergroup/db"},
		{"hold", reaperkv.HoldKey(p, "db1"), "orch/a/reaper/hold/db1"},
		{"departed", reaperkv.DepartedKey(p, "db1"), "orch/a/reaper/departed/db1"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if tc.got != tc.want {
				t.Fatalf("got %q, want %q", tc.got, tc.want)
			}
		})
	}
}
