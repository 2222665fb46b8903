package nodeid

import (
	"bytes"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"mime"
	"strings"

	"github.com/jiocloud/orchestrate/internal/paths"
)

// Where the reaper's part of a server's user data puts the node's token.
const (
	// TokenFile is read by orchestrate, hiera-services and the watch
	// handlers (--token-file).
	TokenFile = paths.NodeToken
	// AgentTokenFile sets the Consul agent's own tokens to the node's:
	// agent (its node, its checks) and default (the watches' queries).
	AgentTokenFile = paths.AgentTokenFile
	// LogGrantFile holds the node's write-only upload grant for its
	// failure logs (internal/logship), when the reaper has logs: set.
	LogGrantFile = paths.LogGrant
)

// partTypes maps the first line of a user data file to its MIME type, as
// cloud-init tells them apart.
var partTypes = []struct{ start, mimeType string }{
	{"#cloud-config", "text/cloud-config"},
	{"#!", "text/x-shellscript"},
	{"#include", "text/x-include-url"},
	{"#cloud-boothook", "text/cloud-boothook"},
	{"#part-handler", "text/part-handler"},
	{"## template: jinja", "text/jinja2"},
}

// PartType is the MIME type cloud-init gives user data, or an error saying
// why the reaper cannot put it beside the node's token part.
func PartType(data []byte) (string, error) {
	for _, p := range partTypes {
		if bytes.HasPrefix(data, []byte(p.start)) {
			return p.mimeType, nil
		}
	}
	if bytes.HasPrefix(bytes.ToLower(data), []byte("content-type:")) || bytes.HasPrefix(bytes.ToLower(data), []byte("mime-version:")) {
		return "", fmt.Errorf("is already MIME multipart: give the reaper its parts as one file of cloud-config or a script")
	}
	return "", fmt.Errorf("starts with neither #cloud-config, #!, #include, #cloud-boothook, #part-handler nor '## template: jinja': cloud-init would not run it")
}

// UserData is the user data of a server: the operator's file (first) and
// the reaper's part with the node's token (last, merged by appending, so
// the operator's write_files and runcmd stay whole), as multipart MIME
// that cloud-init reads. The token goes nowhere else.
func UserData(secret string, operator []byte) ([]byte, error) {
	return UserDataWithGrant(secret, nil, operator)
}

// UserDataWithGrant is UserData whose reaper part also writes the node's
// log upload grant (its JSON, one line) to LogGrantFile, mode 0600; nil
// writes none.
func UserDataWithGrant(secret string, grant, operator []byte) ([]byte, error) {
	if secret == "" || strings.ContainsAny(secret, "\"\\\n\r") {
		return nil, fmt.Errorf("a node token must be a non-empty string without quotes or line breaks")
	}
	// The grant goes in a YAML literal block: one line of JSON, nothing
	// that ends the block.
	if bytes.ContainsAny(grant, "\n\r") || (grant != nil && !json.Valid(grant)) {
		return nil, fmt.Errorf("a log grant must be one line of JSON")
	}
	var parts [][2]string // mime type, body
	if len(operator) > 0 {
		t, err := PartType(operator)
		if err != nil {
			return nil, fmt.Errorf("user data %w", err)
		}
		parts = append(parts, [2]string{t, string(operator)})
	}
	parts = append(parts, [2]string{"text/cloud-config", tokenPart(secret, grant)})
	boundary, err := newBoundary(parts)
	if err != nil {
		return nil, err
	}
	var b strings.Builder
	fmt.Fprintf(&b, "Content-Type: %s\nMIME-Version: 1.0\n\n", mime.FormatMediaType("multipart/mixed", map[string]string{"boundary": boundary}))
	for i, p := range parts {
		name := "operator"
		if i == len(parts)-1 {
			name = "orchestrate-node-token"
		}
		fmt.Fprintf(&b, "--%s\nContent-Type: %s; charset=\"utf-8\"\nMIME-Version: 1.0\nContent-Transfer-Encoding: 8bit\nContent-Disposition: attachment; filename=\"%s\"\n\n%s", boundary, p[0], name, p[1])
		if !strings.HasSuffix(p[1], "\n") {
			b.WriteString("\n")
		}
	}
	fmt.Fprintf(&b, "--%s--\n", boundary)
	return []byte(b.String()), nil
}

// tokenPart is the reaper's cloud-config: the node's token in the files
// orchestrate and the Consul agent read, and its log upload grant when
// there is one. Both are written by root before
// any package is installed; the operator's part hands them on (the
// shipped examples/user-data.yaml gives the agent's file to consul's
// group). merge_how appends its lists to the operator's.
func tokenPart(secret string, grant []byte) string {
	part := fmt.Sprintf(`#cloud-config
# Written by the orchestrate reaper: this server's own Consul token.
merge_how:
  - name: list
    settings: [append]
  - name: dict
    settings: [no_replace, recurse_list]
write_files:
  - path: %s
    owner: root:root
    permissions: "0600"
    content: "%s\n"
  - path: %s
    owner: root:root
    permissions: "0640"
    content: |
      {"acl": {"tokens": {"agent": "%s", "default": "%s"}}}
`, TokenFile, secret, AgentTokenFile, secret, secret)
	if grant != nil {
		part += fmt.Sprintf(`  - path: %s
    owner: root:root
    permissions: "0600"
    content: |
      %s
`, LogGrantFile, grant)
	}
	return part
}

// newBoundary is a MIME boundary found in no part.
func newBoundary(parts [][2]string) (string, error) {
	for range 8 {
		r := make([]byte, 12)
		if _, err := rand.Read(r); err != nil {
			return "", err
		}
		b := "orchestrate-" + hex.EncodeToString(r)
		clash := false
		for _, p := range parts {
			clash = clash || strings.Contains(p[1], b)
		}
		if !clash {
			return b, nil
		}
	}
	return "", fmt.Errorf("no MIME boundary free of the user data")
}
