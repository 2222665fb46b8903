package nodeid

import (
	"context"
	"fmt"

	"github.com/hashicorp/consul/api"
)

// AuthMethod is the JWT auth method that trusts pubPEM (the reaper's public
// key) for audience, mapping the host and role claims to ${value.host} and
// ${value.role}.
func AuthMethod(name, audience, pubPEM string) *api.ACLAuthMethod {
	return &api.ACLAuthMethod{
		Name: name, Type: "jwt", DisplayName: "orchestrate: servers the reaper builds",
		Description: "Tokens of servers the orchestrate reaper builds: each is the node identity of its host, the shared role and the host's own policy",
		Config: map[string]any{
			"JWTValidationPubKeys": []string{pubPEM},
			"JWTSupportedAlgs":     []string{"ES256"},
			"BoundAudiences":       []string{audience},
			"BoundIssuer":          Issuer,
			"ClaimMappings":        map[string]string{ClaimHost: VarHost, ClaimRole: VarRole},
		},
	}
}

// BindingRules are the auth method's rules: the host's node identity (its
// own node and checks, its maintenance), the shared role (read), and the
// host's own policy (its KV records and sessions), which Consul leaves out
// when the operator did not create it.
func BindingRules(authMethod, role string) []*api.ACLBindingRule {
	return []*api.ACLBindingRule{
		{AuthMethod: authMethod, Description: "orchestrate: the host's node identity", BindType: api.BindingRuleBindTypeNode, BindName: "${value." + VarHost + "}"},
		{AuthMethod: authMethod, Description: "orchestrate: the shared read-only role", BindType: api.BindingRuleBindTypeRole, BindName: role},
		{AuthMethod: authMethod, Description: "orchestrate: the host's own records", BindType: api.BindingRuleBindTypePolicy, BindName: HostPolicyPrefix + "${value." + VarHost + "}"},
	}
}

// Setup creates (or brings up to date) the auth method, its binding rules,
// and the shared role with policy rolePolicy holding sharedRules: what an
// operator's management token does once (`reaper identity setup`), and the
// tests and the demo do on their agents. Idempotent.
func Setup(ctx context.Context, c *api.Client, authMethod, audience, role, pubPEM, sharedRules string) error {
	acl := c.ACL()
	wo := (&api.WriteOptions{}).WithContext(ctx)
	qo := (&api.QueryOptions{}).WithContext(ctx)
	m := AuthMethod(authMethod, audience, pubPEM)
	if old, _, err := acl.AuthMethodRead(authMethod, qo); err != nil {
		return fmt.Errorf("read auth method %s: %w", authMethod, err)
	} else if old == nil {
		if _, _, err := acl.AuthMethodCreate(m, wo); err != nil {
			return fmt.Errorf("create auth method %s: %w", authMethod, err)
		}
	} else if _, _, err := acl.AuthMethodUpdate(m, wo); err != nil {
		return fmt.Errorf("update auth method %s: %w", authMethod, err)
	}
	rules, _, err := acl.BindingRuleList(authMethod, qo)
	if err != nil {
		return fmt.Errorf("list binding rules of %s: %w", authMethod, err)
	}
	for _, want := range BindingRules(authMethod, role) {
		if !hasRule(rules, want) {
			if _, _, err := acl.BindingRuleCreate(want, wo); err != nil {
				return fmt.Errorf("create binding rule %s %s: %w", want.BindType, want.BindName, err)
			}
		}
	}
	return setupRole(ctx, c, role, sharedRules)
}

func hasRule(rules []*api.ACLBindingRule, want *api.ACLBindingRule) bool {
	for _, r := range rules {
		if r.BindType == want.BindType && r.BindName == want.BindName && r.Selector == "" {
			return true
		}
	}
	return false
}

// setupRole creates or updates the shared policy (named as the role) and
// the role holding it.
func setupRole(ctx context.Context, c *api.Client, role, rules string) error {
	acl := c.ACL()
	wo := (&api.WriteOptions{}).WithContext(ctx)
	qo := (&api.QueryOptions{}).WithContext(ctx)
	p, _, err := acl.PolicyReadByName(role, qo)
	if err != nil {
		return fmt.Errorf("read policy %s: %w", role, err)
	}
	if p == nil {
		if p, _, err = acl.PolicyCreate(&api.ACLPolicy{Name: role, Description: "orchestrate: what every node reads", Rules: rules}, wo); err != nil {
			return fmt.Errorf("create policy %s: %w", role, err)
		}
	} else if p.Rules != rules {
		p.Rules = rules
		if p, _, err = acl.PolicyUpdate(p, wo); err != nil {
			return fmt.Errorf("update policy %s: %w", role, err)
		}
	}
	r, _, err := acl.RoleReadByName(role, qo)
	if err != nil {
		return fmt.Errorf("read role %s: %w", role, err)
	}
	if r == nil {
		_, _, err = acl.RoleCreate(&api.ACLRole{Name: role, Description: "orchestrate: every node", Policies: []*api.ACLRolePolicyLink{{ID: p.ID}}}, wo)
		if err != nil {
			return fmt.Errorf("create role %s: %w", role, err)
		}
	}
	return nil
}

// ApplyHostPolicy creates or updates host's own policy with rules.
func ApplyHostPolicy(ctx context.Context, c *api.Client, host, rules string) error {
	if err := ValidHost(host); err != nil {
		return err
	}
	acl := c.ACL()
	name := HostPolicyName(host)
	p, _, err := acl.PolicyReadByName(name, (&api.QueryOptions{}).WithContext(ctx))
	if err != nil {
		return fmt.Errorf("read policy %s: %w", name, err)
	}
	wo := (&api.WriteOptions{}).WithContext(ctx)
	switch {
	case p == nil:
		_, _, err = acl.PolicyCreate(&api.ACLPolicy{Name: name, Description: "orchestrate: the records of host " + host, Rules: rules}, wo)
	case p.Rules != rules:
		p.Rules = rules
		_, _, err = acl.PolicyUpdate(p, wo)
	}
	if err != nil {
		return fmt.Errorf("write policy %s: %w", name, err)
	}
	return nil
}
