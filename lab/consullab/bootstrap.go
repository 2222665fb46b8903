package consullab

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"

	"github.com/hashicorp/consul/api"

	"github.com/jiocloud/orchestrate/internal/fileutil"
)

// BootstrapOptions name what Bootstrap installs.
type BootstrapOptions struct {
	// ACLDir holds the package's policies, node.hcl, operator.hcl and
	// reaper.hcl (packaging/acl in the repository).
	ACLDir string
	// Reaper is the reaper binary (go build ./cmd/reaper).
	Reaper string
	// ReaperConfig is the lab reaper's reaper.yaml, with node_identity:
	// `reaper identity --apply` authorises the names of its roles.
	ReaperConfig string
}

// Tokens are the secrets Bootstrap made, each also in TokenFile(name).
type Tokens struct {
	// Reaper holds exactly packaging/acl/reaper.hcl.
	Reaper string
	// Operator holds key write on the prefix and catalog read: an
	// operator changing the cloud (docs/acl.md).
	Operator string
	// DNS holds Consul's builtin/dns templated policy: every agent's DNS
	// token (the servers' is set).
	DNS string
}

// The shipped policies, by name, and their file in ACLDir.
var shippedPolicies = [][2]string{
	{"orchestrate-node", "node.hcl"},
	{"orchestrate-operator", "operator.hcl"},
	{"orchestrate-reaper", "reaper.hcl"},
}

// operatorPolicy is the operator's who changes the cloud: operator.hcl
// with key write on the prefix (docs/acl.md).
const (
	operatorPolicy = "lab-operator"
	operatorRules  = `# The lab operator: key write on the prefix, the catalog read.
key_prefix "orchestrate/" {
  policy = "write"
}
node_prefix "" {
  policy = "read"
}
service_prefix "" {
  policy = "read"
}
`
)

// TokenFile is where token name (reaper, operator, dns) is kept, 0600.
func (c *Cluster) TokenFile(name string) string {
	return filepath.Join(c.Dir, "tokens", name+".token")
}

// Bootstrap does, with the management token, what docs/acl.md asks of an
// operator of a cloud with ACLs on: the shipped policies
// (orchestrate-node, -operator, -reaper), a reaper token of exactly
// reaper.hcl, an operator token, the DNS token (set as every server's DNS
// token), each server's agent token (its node identity), and `reaper
// identity --apply` with o.ReaperConfig. Every server must run. It is
// idempotent: a token whose file still holds a working token is kept.
func (c *Cluster) Bootstrap(ctx context.Context, o BootstrapOptions) (*Tokens, error) {
	leader, err := c.Leader(ctx)
	if err != nil {
		return nil, err
	}
	for i := range c.Addrs {
		if !c.Running(i) {
			return nil, fmt.Errorf("consullab: bootstrap: server %d does not run", i+1)
		}
	}
	cl, err := c.Client(leader, c.ManagementToken)
	if err != nil {
		return nil, err
	}
	for _, p := range shippedPolicies {
		rules, err := fileutil.ReadLimited(filepath.Join(o.ACLDir, p[1]), 64<<10)
		if err != nil {
			return nil, fmt.Errorf("consullab: the shipped policy %s: %w", p[0], err)
		}
		if err := upsertPolicy(ctx, cl, p[0], string(rules)); err != nil {
			return nil, err
		}
	}
	if err := upsertPolicy(ctx, cl, operatorPolicy, operatorRules); err != nil {
		return nil, err
	}
	t := &Tokens{}
	for _, want := range []struct {
		name string
		dst  *string
		tok  api.ACLToken
	}{
		{"reaper", &t.Reaper, api.ACLToken{Description: "lab: the reaper (packaging/acl/reaper.hcl)",
			Policies: []*api.ACLTokenPolicyLink{{Name: "orchestrate-reaper"}}}},
		{"operator", &t.Operator, api.ACLToken{Description: "lab: an operator (key write on orchestrate/, catalog read)",
			Policies: []*api.ACLTokenPolicyLink{{Name: operatorPolicy}}}},
		{"dns", &t.DNS, api.ACLToken{Description: "lab: the agents' DNS token",
			TemplatedPolicies: []*api.ACLTemplatedPolicy{{TemplateName: api.ACLTemplatedPolicyDNSName}}}},
	} {
		if *want.dst, err = c.token(ctx, cl, want.name, &want.tok); err != nil {
			return nil, err
		}
	}
	if err := c.serverTokens(ctx, cl, t.DNS); err != nil {
		return nil, err
	}
	if err := c.reaperIdentity(ctx, leader, o); err != nil {
		return nil, err
	}
	c.log.Info("consul ACLs bootstrapped", "tokens", filepath.Dir(c.TokenFile("x")))
	return t, nil
}

// upsertPolicy creates policy name with rules, or updates it to them.
func upsertPolicy(ctx context.Context, cl *api.Client, name, rules string) error {
	wo := (&api.WriteOptions{}).WithContext(ctx)
	p, _, err := cl.ACL().PolicyReadByName(name, (&api.QueryOptions{}).WithContext(ctx))
	if err != nil {
		return fmt.Errorf("consullab: read policy %s: %w", name, err)
	}
	if p == nil {
		_, _, err = cl.ACL().PolicyCreate(&api.ACLPolicy{Name: name, Rules: rules}, wo)
	} else if p.Rules != rules {
		p.Rules = rules
		_, _, err = cl.ACL().PolicyUpdate(p, wo)
	}
	if err != nil {
		return fmt.Errorf("consullab: write policy %s: %w", name, err)
	}
	return nil
}

// token returns the secret of token name: the one in its file while
// Consul still knows it, else a new one made from tok, written to the
// file (0600) first thing after its creation.
func (c *Cluster) token(ctx context.Context, cl *api.Client, name string, tok *api.ACLToken) (string, error) {
	if b, err := os.ReadFile(c.TokenFile(name)); err == nil {
		secret := strings.TrimSpace(string(b))
		_, _, err := cl.ACL().TokenReadSelf((&api.QueryOptions{Token: secret}).WithContext(ctx))
		if err == nil {
			return secret, nil
		}
	}
	made, _, err := cl.ACL().TokenCreate(tok, (&api.WriteOptions{}).WithContext(ctx))
	if err != nil {
		return "", fmt.Errorf("consullab: create the %s token: %w", name, err)
	}
	if err := writeSecret(c.TokenFile(name), []byte(made.SecretID+"\n")); err != nil {
		return "", err
	}
	return made.SecretID, nil
}

// serverTokens gives every server its agent token (its own node identity,
// so it may register itself and update its coordinates) and the DNS
// token. The servers persist both (enable_token_persistence).
func (c *Cluster) serverTokens(ctx context.Context, cl *api.Client, dns string) error {
	for i := range c.Addrs {
		agentTok, err := c.token(ctx, cl, serverName(i), &api.ACLToken{
			Description:    "lab: the agent token of " + serverName(i),
			NodeIdentities: []*api.ACLNodeIdentity{{NodeName: serverName(i), Datacenter: Datacenter}},
		})
		if err != nil {
			return err
		}
		sc, err := c.Client(i, c.ManagementToken)
		if err != nil {
			return err
		}
		wo := (&api.WriteOptions{}).WithContext(ctx)
		if _, err := sc.Agent().UpdateAgentACLToken(agentTok, wo); err != nil {
			return fmt.Errorf("consullab: set the agent token of server %d: %w", i+1, err)
		}
		if _, err := sc.Agent().UpdateDNSToken(dns, wo); err != nil {
			return fmt.Errorf("consullab: set the DNS token of server %d: %w", i+1, err)
		}
	}
	return nil
}

// reaperIdentity runs `reaper identity --apply` against the leader with
// the management token from its file (never on a command line).
func (c *Cluster) reaperIdentity(ctx context.Context, leader int, o BootstrapOptions) error {
	cmd := exec.CommandContext(ctx, o.Reaper, "identity", "--config", o.ReaperConfig,
		"--node-policy", filepath.Join(o.ACLDir, "node.hcl"), "--apply")
	cmd.Env = append(cleanEnv(), "CONSUL_HTTP_ADDR="+c.HTTPAddr(leader), "CONSUL_HTTP_TOKEN_FILE="+c.ManagementTokenFile())
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	err := cmd.Run()
	if werr := os.WriteFile(filepath.Join(c.Dir, "reaper-identity.log"), out.Bytes(), 0o600); werr != nil {
		err = errors.Join(err, werr)
	}
	if err != nil {
		return fmt.Errorf("consullab: reaper identity --apply: %w: %s", err, bytes.TrimSpace(out.Bytes()))
	}
	return nil
}
