package exitcode

import (
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/hashicorp/consul/api"

	"github.com/jiocloud/orchestrate/internal/consultest"
)

// Consul's real refusals and a real refused connection read, through
// Message, in the exit code's words: what could not be reached or what the
// token lacks, never the HTTP client's text (URLs, "dial tcp", "Unexpected
// response code"), the token or its accessor ID.
func TestMessage(t *testing.T) {
	const secret = "5e7c1b2a-0d4f-4a51-9a57-3c0f6c2f9e11"
	a := consultest.Start(t, consultest.Options{ACLToken: secret})
	pol, _, err := a.Client.ACL().PolicyCreate(&api.ACLPolicy{Name: "read-only", Rules: `key_prefix "" { policy = "read" }`}, nil)
	if err != nil {
		t.Fatal(err)
	}
	tok, _, err := a.Client.ACL().TokenCreate(&api.ACLToken{Policies: []*api.ACLTokenPolicyLink{{ID: pol.ID}}}, nil)
	if err != nil {
		t.Fatal(err)
	}
	client := func(addr, token string) *api.Client {
		c, err := api.NewClient(&api.Config{Address: addr, Token: token})
		if err != nil {
			t.Fatal(err)
		}
		return c
	}
	put := func(c *api.Client) error {
		_, err := c.KV().Put(&api.KVPair{Key: "orchestrate/roles/web/desired", Value: []byte("3")}, nil)
		return err
	}
	for _, tc := range []struct {
		name string
		err  error
		want string
	}{
		{"agent not running", put(client("127.0.0.1:1", secret)), "cannot reach Consul at 127.0.0.1:1: connection refused (is the agent running"},
		{"token lacks write", put(client(a.HTTPAddr, tok.SecretID)), `Consul refused the token: permission denied (the token needs key:write on orchestrate/roles/web/desired)`},
		{"unknown token", put(client(a.HTTPAddr, "00000000-1111-2222-3333-444444444444")), "Consul refused the token: ACL not found, no such token"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if tc.err == nil {
				t.Fatal("the write succeeded")
			}
			msg := Message(tc.err)
			if !strings.Contains(msg, tc.want) {
				t.Errorf("Message = %q, want it to contain %q", msg, tc.want)
			}
			for _, leak := range []string{"dial tcp", "http://", "Unexpected response code", tok.AccessorID, tok.SecretID, secret} {
				if strings.Contains(msg, leak) {
					t.Errorf("Message = %q shows %q", msg, leak)
				}
			}
			if Code(tc.err) != Unavailable {
				t.Errorf("Code = %d, want %d", Code(tc.err), Unavailable)
			}
		})
	}
}

// A transaction's refusals, which Consul gives as text, are said once,
// without the accessor ID.
func TestRefused(t *testing.T) {
	const in = `migrate web1: transaction rolled back: Permission denied: token with AccessorID 'ab19' lacks permission 'key:write' on "a/1"; Permission denied: token with AccessorID 'ab19' lacks permission 'key:write' on "a/2"; Permission denied: token with AccessorID 'ab19' lacks permission 'key:read' on "b"`
	const want = `migrate web1: transaction rolled back: Consul refused the token: permission denied (the token needs key:write on a/1 and a/2, and key:read on b)`
	if got := refused(in); got != want {
		t.Errorf("refused:\n got %s\nwant %s", got, want)
	}
	if got := refused("nothing refused"); got != "nothing refused" {
		t.Errorf("refused changed a message without a refusal: %q", got)
	}
}

// An error is printed as one line whatever it quotes: a newline or a
// terminal escape in it (from a remote side's body, a KV value) is shown
// escaped.
func TestMessageOneLine(t *testing.T) {
	err := fmt.Errorf("read orchestrate/x: %w", api.StatusError{Code: 500, Body: "boom\x1b[2J\nforged line"})
	msg := Message(err)
	if strings.ContainsAny(msg, "\x1b\n") || !strings.Contains(msg, `boom\x1b[2J`) {
		t.Errorf("Message = %q, want one line with the escape shown", msg)
	}
	if got := Message(errors.New("value \"a\x1b]0;pwned\x07\"\nnext")); strings.ContainsAny(got, "\x1b\x07\n") {
		t.Errorf("Message = %q, want control characters escaped", got)
	}
}
