package store_test

import (
	"errors"
	"strings"
	"testing"

	"github.com/jiocloud/orchestrate/internal/store"
)

// A host's policy names exactly its own records; a name or prefix that
// could end the HCL string, start an interpolation or widen a rule is
// refused by name. (The rules' effect on a real ACL agent:
// TestNodeRestrictionRolloutAttacks in internal/orchestrate.)
func TestHostPolicyRules(t *testing.T) {
	got, err := store.HostPolicyRules("cloud1/orchestrate", "web_1-a", "web")
	if err != nil {
		t.Fatal(err)
	}
	want := `# orchestrate-host-web_1-a: the records of host web_1-a (role web), and nothing else.

# Its status, version, metrics and drain answer.
key_prefix "cloud1/orchestrate/hosts/web_1-a/" {
  policy = "write"
}

# Its claim on an update slot of its role, locked by its session.
key "cloud1/orchestrate/rollout/web/slot/web_1-a" {
  policy = "write"
}

# Its progress in its role's rollout.
key "cloud1/orchestrate/rollout/web/hosts/web_1-a" {
  policy = "write"
}

# Sessions on its own node (the holder of its slot claim).
session "web_1-a" {
  policy = "write"
}

# Its role's service (named as the role), which its agent registers
# with the node's token (the agent's default token).
service "web" {
  policy = "write"
}

# Its own upload grant for its failure logs in Swift, renewed by the
# reaper (the shared node policy denies every other host's).
key "cloud1/orchestrate/loggrants/web_1-a" {
  policy = "read"
}
`
	if got != want {
		t.Fatalf("rules:\n%s\nwant:\n%s", got, want)
	}
	for _, tc := range []struct{ prefix, host, role, want string }{
		{"orchestrate", `web1"`, "web", `host "web1\""`},
		{"orchestrate", `web1" } key_prefix "" { policy = "write`, "web", "white space"},
		{"orchestrate", `web1\`, "web", `host "web1\\"`},
		{"orchestrate", "${node}", "web", `host "${node}"`},
		{"orchestrate", "%{x}", "web", `host "%{x}"`},
		{"orchestrate", "web*", "web", `host "web*"`},
		{"orchestrate", "", "web", "host is empty"},
		{"orchestrate", "..", "web", `".." is not a name`},
		{"orchestrate", "-web1", "web", `host "-web1"`},
		{"orchestrate", "web1.", "web", `host "web1."`},
		{"orchestrate", "web1.dc1", "web", `host "web1.dc1" cannot have a policy`},
		{"orchestrate", "Web1", "web", `host "Web1"`},
		{"orchestrate", strings.Repeat("a", 112), "web", "at most 111 bytes"},
		{"orchestrate", "web/1", "web", "contains a slash"},
		{"orchestrate", "web1", "we\"b", `role "we\"b"`},
		{"orchestrate", "web1", "", "role is empty"},
		{`orch"estrate`, "web1", "web", `segment "orch\"estrate"`},
		{"orchestrate/", "web1", "web", "prefix segment is empty"},
		{"", "web1", "web", "prefix is empty"},
		{"orchestrate", strings.Repeat("a", 201), "web", "longer than 200"},
	} {
		_, err := store.HostPolicyRules(tc.prefix, tc.host, tc.role)
		var ie *store.InputError
		if !errors.As(err, &ie) || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("HostPolicyRules(%q, %q, %q) = %v, want an input error containing %q", tc.prefix, tc.host, tc.role, err, tc.want)
		}
	}
}
