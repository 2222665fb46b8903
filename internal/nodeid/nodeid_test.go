package nodeid

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"mime"
	"mime/multipart"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/consul/api"

	"github.com/jiocloud/orchestrate/internal/consultest"
)

const mgmt = "7b4c1a2e-9d3f-4e5a-8b6c-0d1e2f3a4b5c"

const sharedRules = `key_prefix "orchestrate/" { policy = "read" }
node_prefix "" { policy = "read" }
`

// hostRules is a host policy as the store renders it (its own records).
func hostRules(host string) string {
	return fmt.Sprintf("key_prefix \"orchestrate/hosts/%s/\" { policy = \"write\" }\nsession %q { policy = \"write\" }\n", host, host)
}

// world is an agent with ACLs on (default deny), the auth method set up
// for key, and host policies for web1 and web2 (not web3).
func world(t *testing.T) (*consultest.Agent, *Minter) {
	t.Helper()
	a := consultest.Start(t, consultest.Options{ACLToken: mgmt})
	key, _, err := NewKey()
	if err != nil {
		t.Fatal(err)
	}
	pub, err := PublicPEM(key)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	if err := Setup(ctx, a.Client, DefaultAuthMethod, DefaultAudience, DefaultRole, pub, sharedRules); err != nil {
		t.Fatal(err)
	}
	// Idempotent: a second run changes nothing and does not fail.
	if err := Setup(ctx, a.Client, DefaultAuthMethod, DefaultAudience, DefaultRole, pub, sharedRules); err != nil {
		t.Fatalf("second setup: %v", err)
	}
	for _, h := range []string{"web1", "web2"} {
		if err := ApplyHostPolicy(ctx, a.Client, h, hostRules(h)); err != nil {
			t.Fatal(err)
		}
	}
	// The minter logs in through a client holding no token at all: a
	// login needs none, and the reaper's own token needs no ACL rights.
	cfg := api.DefaultConfig()
	cfg.Address = a.HTTPAddr
	anon, err := api.NewClient(cfg)
	if err != nil {
		t.Fatal(err)
	}
	m, err := NewMinter(anon, key, DefaultAuthMethod, DefaultAudience)
	if err != nil {
		t.Fatal(err)
	}
	return a, m
}

func clientWith(t *testing.T, a *consultest.Agent, token string) *api.Client {
	t.Helper()
	cfg := api.DefaultConfig()
	cfg.Address, cfg.Token = a.HTTPAddr, token
	c, err := api.NewClient(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// A minted token writes its own host's records and nothing of another
// host's; a name the operator did not authorise gets no token at all;
// revoking ends the token.
func TestMintConfinesEachHost(t *testing.T) {
	a, m := world(t)
	ctx := context.Background()
	id1, err := m.Mint(ctx, "web1", "web")
	if err != nil {
		t.Fatal(err)
	}
	id2, err := m.Mint(ctx, "web2", "web")
	if err != nil {
		t.Fatal(err)
	}
	if id1.Secret == id2.Secret || id1.Secret == "" || strings.Contains(id1.Sealed, id1.Secret) {
		t.Fatalf("tokens not distinct, or the secret shows in the sealed form")
	}
	web1 := clientWith(t, a, id1.Secret)
	if _, err := web1.KV().Put(&api.KVPair{Key: "orchestrate/hosts/web1/version", Value: []byte(`{}`)}, nil); err != nil {
		t.Fatalf("web1 writing its own record: %v", err)
	}
	_, err = web1.KV().Put(&api.KVPair{Key: "orchestrate/hosts/web2/version", Value: []byte(`{}`)}, nil)
	if err == nil || !strings.Contains(err.Error(), "Permission denied") {
		t.Fatalf("web1 writing web2's record: %v, want permission denied", err)
	}
	// Sessions: its own node only.
	if _, _, err := web1.Session().Create(&api.SessionEntry{Node: "web2", Checks: []string{}}, nil); err == nil {
		t.Fatal("web1 created a session on web2's node")
	}
	// Node identity: write on its own node, not another's.
	reg := func(c *api.Client, node string) error {
		_, err := c.Catalog().Register(&api.CatalogRegistration{Node: node, Address: "127.0.0.9"}, nil)
		return err
	}
	if err := reg(web1, "web1"); err != nil {
		t.Fatalf("web1 registering its own node: %v", err)
	}
	if err := reg(web1, "web2"); err == nil {
		t.Fatal("web1 registered web2's node")
	}

	// web3 has no policy: refused, and the token that login made is gone.
	before := tokenCount(t, a)
	_, err = m.Mint(ctx, "web3", "web")
	if !errors.Is(err, ErrNoHostPolicy) || !strings.Contains(err.Error(), "no policy orchestrate-host-web3") {
		t.Fatalf("mint without a host policy: %v", err)
	}
	if after := tokenCount(t, a); after != before {
		t.Fatalf("a refused mint left a token: %d tokens, was %d", after, before)
	}

	// Revoke: the token stops working; a second revoke is no error.
	if err := m.Revoke(ctx, id1.Sealed); err != nil {
		t.Fatal(err)
	}
	if _, err := web1.KV().Put(&api.KVPair{Key: "orchestrate/hosts/web1/version", Value: []byte(`{}`)}, nil); err == nil {
		t.Fatal("a revoked token still writes")
	}
	if err := m.Revoke(ctx, id1.Sealed); err != nil {
		t.Fatalf("revoking twice: %v", err)
	}
}

func tokenCount(t *testing.T, a *consultest.Agent) int {
	t.Helper()
	toks, _, err := a.Client.ACL().TokenList(nil)
	if err != nil {
		t.Fatal(err)
	}
	return len(toks)
}

// What an attacker might try against the auth method: a JWT signed by
// another key, an expired one, one for a host name made to break out of
// the policy name, a sealed token changed or opened with another key.
func TestMintRefusesForgeries(t *testing.T) {
	a, m := world(t)
	ctx := context.Background()
	other, _, err := NewKey()
	if err != nil {
		t.Fatal(err)
	}
	forger, err := NewMinter(m.client, other, DefaultAuthMethod, DefaultAudience)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := forger.Mint(ctx, "web1", "web"); err == nil {
		t.Fatal("a JWT signed by another key logged in")
	}
	old := *m
	old.now = func() time.Time { return time.Now().Add(-time.Hour) }
	if _, err := old.Mint(ctx, "web1", "web"); err == nil {
		t.Fatal("an expired JWT logged in")
	}
	for _, h := range []string{"web1\"", "Web1", "web1/../web2", "", "-web1", strings.Repeat("a", 200)} {
		if _, err := m.Mint(ctx, h, "web"); err == nil || !strings.Contains(err.Error(), "cannot have a Consul node identity") {
			t.Errorf("mint for %q: %v", h, err)
		}
	}
	id, err := m.Mint(ctx, "web2", "web")
	if err != nil {
		t.Fatal(err)
	}
	if err := forger.Revoke(ctx, id.Sealed); err == nil || strings.Contains(err.Error(), id.Secret) {
		t.Fatalf("another key opened the sealed token, or the error shows it: %v", err)
	}
	tampered := []byte(id.Sealed)
	tampered[len(tampered)/2] ^= 1
	if err := m.Revoke(ctx, string(tampered)); err == nil {
		t.Fatal("a changed sealed token opened")
	}
	_ = a
}

// The user data cloud-init reads: the operator's part whole and first,
// the token part last with a merge that appends; a boundary that is in no
// part; user data that cannot be combined is refused by name.
func TestUserData(t *testing.T) {
	op := []byte("#cloud-config\nwrite_files:\n  - path: /etc/x\n    content: hi\nruncmd:\n  - [true]\n")
	ud, err := UserData("0b1c2d3e-aaaa-bbbb-cccc-111122223333", op)
	if err != nil {
		t.Fatal(err)
	}
	head, body, _ := bytes.Cut(ud, []byte("\n\n"))
	mt, params, err := mime.ParseMediaType(strings.TrimPrefix(strings.SplitN(string(head), "\n", 2)[0], "Content-Type: "))
	if err != nil || mt != "multipart/mixed" {
		t.Fatalf("content type %q: %v", mt, err)
	}
	r := multipart.NewReader(bytes.NewReader(body), params["boundary"])
	var parts []string
	for {
		p, err := r.NextPart()
		if err != nil {
			break
		}
		var b bytes.Buffer
		b.ReadFrom(p)
		parts = append(parts, p.Header.Get("Content-Type")+"|"+b.String())
	}
	if len(parts) != 2 || !strings.HasPrefix(parts[0], "text/cloud-config") || !strings.Contains(parts[0], "path: /etc/x") {
		t.Fatalf("parts %q", parts)
	}
	if !strings.Contains(parts[1], "settings: [append]") || !strings.Contains(parts[1], `"agent": "0b1c2d3e-aaaa-bbbb-cccc-111122223333"`) {
		t.Fatalf("token part %q", parts[1])
	}
	for _, tc := range []struct {
		data []byte
		want string
	}{
		{[]byte("Content-Type: multipart/mixed\n"), "already MIME"},
		{[]byte("hello"), "starts with neither"},
	} {
		if _, err := UserData("s", tc.data); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("user data %q: %v", tc.data, err)
		}
	}
	if _, err := UserData("a\"b", op); err == nil {
		t.Error("a token with a quote was put into YAML")
	}
	if ud, err := UserData("0b1c", []byte("#!/bin/sh\necho hi\n")); err != nil || !bytes.Contains(ud, []byte("text/x-shellscript")) {
		t.Errorf("shell script user data: %v\n%s", err, ud)
	}
}

// The reaper's part carries the log grant in a 0600 file of root's when
// there is one, and refuses a grant that could break out of its YAML block.
func TestUserDataWithGrant(t *testing.T) {
	grant := []byte(`{"container_url":"http://127.0.0.1:1/v1/AUTH_a/logs","prefix":"web1/"}`)
	ud, err := UserDataWithGrant("0f7c7a4e-0000-4000-8000-000000000001", grant, []byte("#cloud-config\n"))
	if err != nil {
		t.Fatal(err)
	}
	want := "  - path: " + LogGrantFile + "\n    owner: root:root\n    permissions: \"0600\"\n    content: |\n      " + string(grant) + "\n"
	if !strings.Contains(string(ud), want) {
		t.Fatalf("user data without the grant's file:\n%s", ud)
	}
	plain, _ := UserData("0f7c7a4e-0000-4000-8000-000000000001", []byte("#cloud-config\n"))
	if strings.Contains(string(plain), LogGrantFile) {
		t.Fatal("user data without a grant names the grant's file")
	}
	for _, bad := range []string{"{\"a\":1}\n  - path: /etc/shadow", "not json", "{\"a\":\"1\r\"}"} {
		if _, err := UserDataWithGrant("0f7c7a4e-0000-4000-8000-000000000001", []byte(bad), nil); err == nil {
			t.Errorf("grant %q accepted", bad)
		}
	}
}
