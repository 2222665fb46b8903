package main

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"testing"

	"github.com/hashicorp/consul/api"

	"github.com/jiocloud/orchestrate/internal/consultest"
	"github.com/jiocloud/orchestrate/internal/nodeid"
)

// A booting server's token is the one the reaper's part of its user data
// writes to the node token file, whatever the operator's part is; user
// data that writes no token is refused, never read as a token.
func TestNodeTokenFromTheUserData(t *testing.T) {
	const secret = "6f1c2d3e-4b5a-4978-8a6b-5c4d3e2f1a0b"
	for _, tc := range []struct {
		name     string
		operator string
	}{
		{"no operator part", ""},
		{"a script", "#!/bin/sh\necho hello\n"},
		{"cloud-config writing other files", "#cloud-config\nwrite_files:\n  - path: /etc/motd\n    content: hi\n"},
		// cloud-init appends the parts' write_files in order: the
		// reaper's, last, is what the file holds.
		{"an operator part writing the token file too", "#cloud-config\nwrite_files:\n  - path: " + nodeid.TokenFile + "\n    content: not-the-token\n"},
		{"a comment only", "#cloud-config\n# nothing\n"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ud, err := nodeid.UserData(secret, []byte(tc.operator))
			if err != nil {
				t.Fatal(err)
			}
			got, err := nodeToken(ud)
			if err != nil || got != secret {
				t.Fatalf("nodeToken = %q, %v; want the reaper's token\n%s", got, err, ud)
			}
		})
	}
	mime := func(parts ...string) string {
		var b strings.Builder
		b.WriteString("Content-Type: multipart/mixed; boundary=\"B\"\nMIME-Version: 1.0\n\n")
		for _, p := range parts {
			b.WriteString("--B\nContent-Type: text/cloud-config\n\n" + p + "\n")
		}
		b.WriteString("--B--\n")
		return b.String()
	}
	for _, tc := range []struct{ name, userData, want string }{
		{"plain cloud-config", "#cloud-config\nwrite_files: []\n", "not MIME"},
		{"empty", "", "not MIME"},
		{"not multipart", "Content-Type: text/plain\n\nhello\n", "not MIME multipart"},
		{"multipart without a boundary", "Content-Type: multipart/mixed\n\nhello\n", "not MIME multipart"},
		{"no token part", mime("#cloud-config\nwrite_files:\n  - path: /etc/motd\n    content: hi\n"), "writes no token"},
		{"an empty token", mime("#cloud-config\nwrite_files:\n  - path: " + nodeid.TokenFile + "\n    content: \"\"\n"), "writes no token"},
		{"two words", mime("#cloud-config\nwrite_files:\n  - path: " + nodeid.TokenFile + "\n    content: \"a b\"\n"), "writes no token"},
		{"broken YAML", mime("#cloud-config\nwrite_files: [\n"), "cloud-config"},
		{"cut short", "Content-Type: multipart/mixed; boundary=\"B\"\n\n--B\nContent-Type: text/cloud-config\n\n#cloud-config\n", "user data"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := nodeToken([]byte(tc.userData))
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("nodeToken = %q, %v; want an error naming %q", got, err, tc.want)
			}
		})
	}
}

// sessionOn names the node in a session definition that names none, and
// leaves every other field, and a node named explicitly, as they were;
// what is not a session definition is refused.
func TestSessionOnItsNode(t *testing.T) {
	for _, tc := range []struct{ name, body, wantNode string }{
		{"no node", `{"Name":"slot","TTL":"15s","LockDelay":1000000,"Behavior":"delete","NodeChecks":[]}`, "compute1"},
		{"empty body", ``, "compute1"},
		{"empty node", `{"Node":""}`, "compute1"},
		{"another node named", `{"Node":"compute2"}`, "compute2"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r, _ := http.NewRequest(http.MethodPut, "http://x/v1/session/create", strings.NewReader(tc.body))
			if err := sessionOn(r, "compute1"); err != nil {
				t.Fatal(err)
			}
			body, _ := io.ReadAll(r.Body)
			if r.ContentLength != int64(len(body)) {
				t.Fatalf("ContentLength %d for %d bytes", r.ContentLength, len(body))
			}
			var def map[string]any
			if err := json.Unmarshal(body, &def); err != nil || def["Node"] != tc.wantNode {
				t.Fatalf("session definition %s (%v), want node %s", body, err, tc.wantNode)
			}
			if strings.Contains(tc.body, "LockDelay") && !bytes.Contains(body, []byte(`"LockDelay":1000000`)) {
				t.Fatalf("LockDelay changed: %s", body)
			}
		})
	}
	for _, body := range []string{`[1,2]`, `{"Node":`, `"x"`, `{"Name":"` + strings.Repeat("x", maxSessionBody) + `"}`} {
		r, _ := http.NewRequest(http.MethodPut, "http://x/v1/session/create", strings.NewReader(body))
		if err := sessionOn(r, "compute1"); err == nil {
			t.Errorf("sessionOn accepted %.40q", body)
		}
	}
}

// A node's agent port widens nothing: on a real agent with ACLs on
// (default deny), compute1's token creates a session through its port on
// compute1's node, which straight to the shared agent Consul refuses (the
// session would be on the agent's node), and through its port a session
// naming compute2 is refused too.
func TestNodeAgentCreatesSessionsOnItsNode(t *testing.T) {
	const mgmt = "0d4c3b2a-1e9f-4a8b-9c7d-6e5f4a3b2c1d"
	a := consultest.Start(t, consultest.Options{ACLToken: mgmt})
	ctx := context.Background()
	for _, n := range []string{"compute1", "compute2"} {
		if _, err := a.Client.Catalog().Register(&api.CatalogRegistration{Node: n, Address: "127.0.0.1"}, nil); err != nil {
			t.Fatal(err)
		}
	}
	pol, _, err := a.Client.ACL().PolicyCreate(&api.ACLPolicy{Name: "orchestrate-host-compute1", Rules: `session "compute1" { policy = "write" }`}, nil)
	if err != nil {
		t.Fatal(err)
	}
	tok, _, err := a.Client.ACL().TokenCreate(&api.ACLToken{Policies: []*api.ACLTokenPolicyLink{{ID: pol.ID}},
		NodeIdentities: []*api.ACLNodeIdentity{{NodeName: "compute1", Datacenter: a.Datacenter}}}, nil)
	if err != nil {
		t.Fatal(err)
	}
	agents := newNodeAgents(a.HTTPAddr)
	defer agents.close()
	addr, err := agents.addr("compute1")
	if err != nil {
		t.Fatal(err)
	}
	as := func(addr string) *api.Session {
		c, err := api.NewClient(&api.Config{Address: addr, Token: tok.SecretID})
		if err != nil {
			t.Fatal(err)
		}
		return c.Session()
	}
	wo := (&api.WriteOptions{}).WithContext(ctx)
	id, _, err := as(addr).CreateNoChecks(&api.SessionEntry{TTL: "15s"}, wo)
	if err != nil {
		t.Fatalf("compute1's session through its own port: %v", err)
	}
	se, _, err := a.Client.Session().Info(id, nil)
	if err != nil || se == nil || se.Node != "compute1" {
		t.Fatalf("the session is %+v (%v), want one on node compute1", se, err)
	}
	if _, _, err := as(a.HTTPAddr).CreateNoChecks(&api.SessionEntry{TTL: "15s"}, wo); err == nil || !strings.Contains(err.Error(), "session:write") {
		t.Fatalf("straight to the agent: %v, want refused (session:write on the agent's node)", err)
	}
	if _, _, err := as(addr).CreateNoChecks(&api.SessionEntry{TTL: "15s", Node: "compute2"}, wo); err == nil || !strings.Contains(err.Error(), "session:write") {
		t.Fatalf("a session on compute2 through compute1's port: %v, want refused", err)
	}
}
