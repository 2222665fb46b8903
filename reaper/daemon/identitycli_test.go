package daemon_test

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/hashicorp/consul/api"
	"github.com/jiocloud/orchestrate/internal/cli"
	"github.com/jiocloud/orchestrate/internal/consultest"
	"github.com/jiocloud/orchestrate/internal/nodeid"
	"github.com/jiocloud/orchestrate/reaper/daemon"
)

// `reaper identity` prints, then with --apply and a management token
// writes, the auth method, the shared role and a policy per name each
// role may build; the reaper can then mint exactly those names. Without
// acl write it is exit 3 and writes nothing; a key anyone may read is
// refused.
func TestNodeRestrictionIdentitySetup(t *testing.T) {
	a := consultest.Start(t, consultest.Options{ACLToken: identityMgmt})
	dir := t.TempDir()
	key, pemKey, err := nodeid.NewKey()
	if err != nil {
		t.Fatal(err)
	}
	keyFile := filepath.Join(dir, "node-identity.key")
	os.WriteFile(keyFile, pemKey, 0o600)
	nodeHCL := filepath.Join(dir, "node.hcl")
	os.WriteFile(nodeHCL, []byte("key_prefix \"orchestrate/\" { policy = \"read\" }\n"), 0o644)
	conf := filepath.Join(dir, "reaper.yaml")
	os.WriteFile(conf, []byte(`roles:
  - name: web
    desired: 2
    autoscale: {target: 0.5, min: 2, max: 3, metric: {source: consul, name: load}}
    warm_pool: {size: 1}
    boot: {flavor: m1, image: debian, name_template: "web{n}"}
node_identity: {key_file: `+keyFile+`}
`), 0o600)
	run := func(token string, args ...string) (int, string) {
		var out, errOut strings.Builder
		code := daemon.Run(context.Background(), append([]string{"identity", "--config", conf, "--node-policy", nodeHCL, "--consul-addr", a.HTTPAddr, "--token", token}, args...), cli.IO{Stdout: &out, Stderr: &errOut})
		return code, out.String() + errOut.String()
	}
	// 3 (autoscale max) + 1 (pool) + 1 (max_in_flight) + 5 extra = 10.
	code, out := run(identityMgmt)
	if code != 0 || !strings.Contains(out, "policy orchestrate-host-web10:") || strings.Contains(out, "web11") || !strings.Contains(out, "nothing written") {
		t.Fatalf("print: exit %d:\n%s", code, out)
	}
	if p, _, _ := a.Client.ACL().PolicyReadByName("orchestrate-host-web1", nil); p != nil {
		t.Fatal("printing wrote a policy")
	}
	// A token that may not write ACLs: exit 3, nothing written.
	pol, _, _ := a.Client.ACL().PolicyCreate(&api.ACLPolicy{Name: "kv", Rules: `key_prefix "" { policy = "write" }`}, nil)
	tok, _, _ := a.Client.ACL().TokenCreate(&api.ACLToken{Policies: []*api.ACLTokenPolicyLink{{ID: pol.ID}}}, nil)
	if code, out := run(tok.SecretID, "--apply"); code != 3 || !strings.Contains(out, "the token needs acl:") || strings.Contains(out, tok.SecretID) {
		t.Fatalf("apply without acl write: exit %d:\n%q", code, out)
	}
	if code, out := run(identityMgmt, "--apply"); code != 0 || !strings.Contains(out, "10 host policies up to date") {
		t.Fatalf("apply: exit %d:\n%s", code, out)
	}
	if code, out := run(identityMgmt, "--apply"); code != 0 {
		t.Fatalf("apply again: exit %d:\n%s", code, out)
	}
	m, err := nodeid.NewMinter(a.Client, key, nodeid.DefaultAuthMethod, nodeid.DefaultAudience)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := m.Mint(context.Background(), "web10", "web"); err != nil {
		t.Fatalf("mint web10: %v", err)
	}
	if _, err := m.Mint(context.Background(), "web11", "web"); !errors.Is(err, nodeid.ErrNoHostPolicy) {
		t.Fatalf("mint web11 (not authorised): %v", err)
	}
	// A key every user may read is refused.
	os.Chmod(keyFile, 0o644)
	if code, out := run(identityMgmt); code != 2 || !strings.Contains(out, "readable by every user") {
		t.Fatalf("world-readable key: exit %d:\n%s", code, out)
	}
}
