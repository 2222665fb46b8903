package main

import (
	"bytes"
	"crypto/ecdsa"
	"crypto/rand"
	"errors"
	"fmt"
	"io"
	"mime"
	"mime/multipart"
	"net/mail"
	"os"
	"path/filepath"
	"strings"

	"github.com/hashicorp/consul/api"
	"gopkg.in/yaml.v3"

	"github.com/jiocloud/orchestrate/internal/nodeid"
	"github.com/jiocloud/orchestrate/internal/store"
	"github.com/jiocloud/orchestrate/internal/store/schema"
)

// Whose token a command runs with, besides the nodes' own (named by their
// host): the prompt of every command the demo prints names it.
const (
	// management is the agent's initial management token: the operator's
	// ACL setup (reaper identity --apply, the agent's DNS token) and the
	// demo's stand-ins for the machines' agents and the workload.
	management = "management"
	// operator holds key write on the prefix and reads the catalog, as
	// docs/acl.md gives an operator changing the cloud.
	operator = "operator"
	// reaperToken is a token of exactly packaging/acl/reaper.hcl.
	reaperToken = "reaper"
)

// operatorRules are an operator's who changes the cloud (docs/acl.md): operator.hcl with key write on the prefix.
const operatorRules = `key_prefix "orchestrate/" {
  policy = "write"
}
node_prefix "" {
  policy = "read"
}
service_prefix "" {
  policy = "read"
}
`

// newUUID is a random token secret in Consul's form.
func newUUID() (string, error) {
	b := make([]byte, 16)
	if _, err := rand.Read(b); err != nil {
		return "", err
	}
	b[6], b[8] = b[6]&0x0f|0x40, b[8]&0x3f|0x80
	return fmt.Sprintf("%x-%x-%x-%x-%x", b[0:4], b[4:6], b[6:8], b[8:10], b[10:]), nil
}

// tokenFile is where the token of who (management, operator, reaper or
// a host) is kept: a file of its own, mode 0600, as /etc/orchestrate/
// node.token on a node.
func (d *demo) tokenFile(who string) string {
	return filepath.Join(d.dir, "tokens", who+".token")
}

// writeToken keeps secret as who's token file.
func (d *demo) writeToken(who, secret string) error {
	if err := os.MkdirAll(filepath.Join(d.dir, "tokens"), 0o700); err != nil {
		return err
	}
	return writeFileAtomic(d.tokenFile(who), []byte(secret+"\n"), 0o600)
}

// writeFileAtomic writes data to path through a temporary file, so a
// reader never sees a partial token.
func writeFileAtomic(path string, data []byte, mode os.FileMode) error {
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, data, mode); err != nil {
		return err
	}
	return os.Rename(tmp, path)
}

// aclSetup does what docs/acl.md asks of an operator on a cloud with ACLs
// on: the agent's DNS token, the operator's and the reaper's tokens, the
// reaper's node identity key and `reaper identity --apply`, and a token
// of its own for each of the first nodes (built before the reaper ran).
func (d *demo) aclSetup(aclDir string) error {
	if err := d.writeToken(management, d.agent.Token); err != nil {
		return err
	}
	dns, err := d.createToken("", "", &api.ACLToken{Description: "the agent's DNS token",
		TemplatedPolicies: []*api.ACLTemplatedPolicy{{TemplateName: api.ACLTemplatedPolicyDNSName}}})
	if err != nil {
		return err
	}
	if _, err := d.agent.Client.Agent().UpdateDNSToken(dns, (&api.WriteOptions{}).WithContext(d.ctx)); err != nil {
		return fmt.Errorf("set the agent's DNS token: %w", err)
	}
	say("ACLs on, default deny; the agent's DNS token is Consul's builtin/dns (service-blocker's queries are answered with it)")
	reaperRules, err := os.ReadFile(filepath.Join(aclDir, "reaper.hcl"))
	if err != nil {
		return fmt.Errorf("the reaper's policy: %w (run from the repository's root, or give --acl)", err)
	}
	for _, t := range []struct{ who, rules string }{{operator, operatorRules}, {reaperToken, string(reaperRules)}} {
		secret, err := d.createToken("demo-"+t.who, t.rules, &api.ACLToken{Description: "orchestrate demo: " + t.who})
		if err != nil {
			return err
		}
		if err := d.writeToken(t.who, secret); err != nil {
			return err
		}
	}
	say("every command below runs with one token, named by its prompt, from a file of its own (mode 0600):")
	say("  management$  tokens/management.token: the agent's management token, for the ACL setup only")
	say("  operator$    tokens/operator.token: key write on orchestrate/ and catalog read (an operator changing the cloud)")
	say("  reaper$      tokens/reaper.token: exactly packaging/acl/reaper.hcl, no ACL rights")
	say("  compute1$    tokens/compute1.token: compute1's own token, and so for every node")
	key, err := d.identitySetup(aclDir)
	if err != nil {
		return err
	}
	return d.mintFirstNodes(key)
}

// createToken makes a token, with a policy name of rules when rules is
// not empty, and returns its secret.
func (d *demo) createToken(name, rules string, tok *api.ACLToken) (string, error) {
	acl := d.agent.Client.ACL()
	wo := (&api.WriteOptions{}).WithContext(d.ctx)
	if rules != "" {
		pol, _, err := acl.PolicyCreate(&api.ACLPolicy{Name: name, Rules: rules}, wo)
		if err != nil {
			return "", fmt.Errorf("create policy %s: %w", name, err)
		}
		tok.Policies = []*api.ACLTokenPolicyLink{{ID: pol.ID}}
	}
	created, _, err := acl.TokenCreate(tok, wo)
	if err != nil {
		return "", fmt.Errorf("create %s: %w", tok.Description, err)
	}
	return created.SecretID, nil
}

// identitySetup makes the reaper's node identity key (as `openssl ecparam
// -genkey` would, mode 0600), writes reaper.yaml naming it, and runs
// `reaper identity --apply` with the management token, as docs/acl.md
// tells the operator: the auth method, its binding rules, the shared
// role (node.hcl) and a host policy for every name a role may build.
func (d *demo) identitySetup(aclDir string) (*ecdsa.PrivateKey, error) {
	key, pemKey, err := nodeid.NewKey()
	if err != nil {
		return nil, err
	}
	keyFile := filepath.Join(d.dir, "node-identity.key")
	if err := writeFileAtomic(keyFile, pemKey, 0o600); err != nil {
		return nil, err
	}
	if err := os.WriteFile(d.reaperYAML(), []byte(reaperConfig(keyFile)), 0o644); err != nil {
		return nil, err
	}
	say("the reaper's key pair: node-identity.key (mode 0600); reaper.yaml has node_identity: {key_file: node-identity.key}")
	if _, err := d.cmd(0, management, "reaper", "identity", "--config", d.reaperYAML(),
		"--node-policy", filepath.Join(aclDir, "node.hcl"), "--apply"); err != nil {
		return nil, err
	}
	return key, nil
}

// mintFirstNodes gives each of the first nodes its own token. The reaper
// did not build them, so it gave them none: the demo logs in for each
// through the auth method with the reaper's key, as the reaper does for
// the servers it builds (by hand, docs/acl.md's `consul acl token create
// -node-identity` makes the same token).
func (d *demo) mintFirstNodes(key *ecdsa.PrivateKey) error {
	// A login needs no token.
	anon, err := api.NewClient(&api.Config{Address: d.agent.HTTPAddr})
	if err != nil {
		return err
	}
	m, err := nodeid.NewMinter(anon, key, nodeid.DefaultAuthMethod, nodeid.DefaultAudience)
	if err != nil {
		return err
	}
	d.minter = m
	d.firstTokens = map[string]string{}
	var names []string
	for _, nr := range allNodes() {
		id, err := m.Mint(d.ctx, nr[0], nr[1])
		if err != nil {
			return err
		}
		if err := d.writeToken(nr[0], id.Secret); err != nil {
			return err
		}
		d.firstTokens[nr[0]] = id.Sealed
		names = append(names, nr[0])
	}
	say("the first %d nodes (%s ... %s) are not built by the reaper, so it gives them no token: each gets", len(names), names[0], names[len(names)-1])
	say("its own as docs/acl.md gives one to a node the reaper does not build (its node identity, the role")
	say("orchestrate-node, its policy orchestrate-host-HOST), here by a login to the auth method with the reaper's key;")
	say("the servers the reaper builds get theirs in their user data (step 5)")
	return d.showToken("compute1")
}

// tokenOf is host's token secret, from its file.
func (d *demo) tokenOf(host string) (string, error) {
	data, err := os.ReadFile(d.tokenFile(host))
	if err != nil {
		return "", err
	}
	return strings.TrimSpace(string(data)), nil
}

// showToken prints what host's token is made of, read with the token
// itself.
func (d *demo) showToken(host string) error {
	secret, err := d.tokenOf(host)
	if err != nil {
		return err
	}
	tok, _, err := d.agent.Client.ACL().TokenReadSelf((&api.QueryOptions{Token: secret}).WithContext(d.ctx))
	if err != nil {
		return fmt.Errorf("read %s's token: %w", host, err)
	}
	var parts []string
	for _, n := range tok.NodeIdentities {
		parts = append(parts, "node identity "+n.NodeName+":"+n.Datacenter)
	}
	for _, r := range tok.Roles {
		parts = append(parts, "role "+r.Name)
	}
	for _, p := range tok.Policies {
		parts = append(parts, "policy "+p.Name)
	}
	say("%s's token (tokens/%s.token): %s", host, host, strings.Join(parts, ", "))
	return nil
}

// nodeToken is the node token in a server's user data, where cloud-init
// would write it: the file nodeid.TokenFile of the cloud-config parts of
// the MIME multipart the reaper made (the last write of it, as cloud-init
// appends the parts' write_files in order).
func nodeToken(userData []byte) (string, error) {
	msg, err := mail.ReadMessage(bytes.NewReader(userData))
	if err != nil {
		return "", fmt.Errorf("user data is not MIME: %w", err)
	}
	mt, params, err := mime.ParseMediaType(msg.Header.Get("Content-Type"))
	if err != nil || !strings.HasPrefix(mt, "multipart/") || params["boundary"] == "" {
		return "", fmt.Errorf("user data is not MIME multipart (%q)", msg.Header.Get("Content-Type"))
	}
	token := ""
	mr := multipart.NewReader(msg.Body, params["boundary"])
	for {
		p, err := mr.NextPart()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return "", fmt.Errorf("user data: %w", err)
		}
		if !strings.HasPrefix(p.Header.Get("Content-Type"), "text/cloud-config") {
			continue
		}
		var cc struct {
			WriteFiles []struct{ Path, Content string } `yaml:"write_files"`
		}
		if err := yaml.NewDecoder(p).Decode(&cc); err != nil && !errors.Is(err, io.EOF) {
			return "", fmt.Errorf("user data's cloud-config: %w", err)
		}
		for _, f := range cc.WriteFiles {
			if f.Path == nodeid.TokenFile {
				token = strings.TrimSpace(f.Content)
			}
		}
	}
	if token == "" || strings.ContainsAny(token, " \t\n") {
		return "", fmt.Errorf("user data writes no token to %s", nodeid.TokenFile)
	}
	return token, nil
}

// clientAs is an API client with host's token, as its file holds it now
// (a name the reaper builds again gets a new one). Clients are kept, one
// per token, so their connections are reused.
func (d *demo) clientAs(host string) (*api.Client, error) {
	secret, err := d.tokenOf(host)
	if err != nil {
		return nil, err
	}
	d.clientsMu.Lock()
	defer d.clientsMu.Unlock()
	if c := d.clients[secret]; c != nil {
		return c, nil
	}
	addr, err := d.agents.addr(host)
	if err != nil {
		return nil, err
	}
	c, err := api.NewClient(&api.Config{Address: addr, Token: secret})
	if err != nil {
		return nil, err
	}
	if d.clients == nil {
		d.clients = map[string]*api.Client{}
	}
	d.clients[secret] = c
	return c, nil
}

// storeAs is the store with host's token.
func (d *demo) storeAs(host string) (*store.Store, error) {
	c, err := d.clientAs(host)
	if err != nil {
		return nil, err
	}
	return store.New(c, schema.DefaultPrefix)
}

// tokenGone reports whether Consul no longer knows secret (logged out).
func (d *demo) tokenGone(secret string) (bool, error) {
	_, _, err := d.agent.Client.ACL().TokenReadSelf((&api.QueryOptions{Token: secret}).WithContext(d.ctx))
	var se api.StatusError
	switch {
	case err == nil:
		return false, nil
	case errors.As(err, &se) && se.Code == 403 && strings.Contains(se.Body, "ACL not found"):
		return true, nil
	}
	return false, err
}
