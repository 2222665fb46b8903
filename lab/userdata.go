// Package lab brings up the whole cloud on this machine, on real parts, and
// breaks it on purpose (issue 28; lab/README.md). The scenarios are Go tests
// behind the build tag lab (`make lab`); this file, untagged, is the part
// that needs no root: the user data of the lab's servers.
package lab

import (
	"bytes"
	"encoding/json"
	"fmt"
	"strings"
)

// Site is what an operator fills into examples/user-data.yaml: the
// values the example marks change-me, and nothing else.
type Site struct {
	// RepoSource is the apt source line of the orchestrate repository.
	RepoSource string
	// RepoKey is its armoured public key.
	RepoKey string
	// ConsulServers are the addresses the agents join.
	ConsulServers []string
	// GossipKey is the cluster's gossip key; CAPEM its CA certificate.
	GossipKey string
	CAPEM     string
	// SitePackage is the package of the site's Puppet code (the roles).
	SitePackage string
}

// placeholders are the lines of examples/user-data.yaml that carry a
// value an operator replaces; RoleUserData refuses an example where one
// is missing, so the example and the lab cannot drift apart unseen.
var placeholders = struct {
	source, key, join, encrypt, ca, pkg, role string
}{
	source:  `      source: "deb [signed-by=$KEY_FILE] https://apt.example.net/orchestrate bookworm main"` + "\n",
	key:     "        change-me: the repository's ASCII-armoured public key\n",
	join:    `"retry_join": ["consul1.example.net", "consul2.example.net", "consul3.example.net"],`,
	encrypt: `"encrypt": "Y2hhbmdlLW1lOiBjb25zdWwga2V5Z2VuIDMyIGJ5dGU=",`,
	ca:      "      change-me: the cluster's CA certificate (consul tls ca create)\n",
	pkg:     "  - change-me-site-puppet-code\n",
	role:    "include change_me::role",
}

// RoleUserData is example (examples/user-data.yaml) with the site's values
// and roleClass (the role's Puppet class) in place of its change-me ones:
// the user data an operator gives a role (reaper.yaml boot.user_data_file).
func RoleUserData(example []byte, s Site, roleClass string) ([]byte, error) {
	if !validClass(roleClass) {
		return nil, fmt.Errorf("role class %q is not a Puppet class name", roleClass)
	}
	for _, v := range []string{s.RepoSource, s.GossipKey, s.SitePackage} {
		if v == "" || strings.ContainsAny(v, "\"\\\n") {
			return nil, fmt.Errorf("site value %q is empty or has a quote, backslash or newline", v)
		}
	}
	join, err := json.Marshal(s.ConsulServers)
	if err != nil || len(s.ConsulServers) == 0 {
		return nil, fmt.Errorf("consul servers %v: %v", s.ConsulServers, err)
	}
	out := string(example)
	for _, r := range [][2]string{
		{placeholders.source, `      source: "` + s.RepoSource + `"` + "\n"},
		{placeholders.key, indentBlock(s.RepoKey, 8)},
		{placeholders.join, `"retry_join": ` + string(join) + `,`},
		{placeholders.encrypt, `"encrypt": "` + s.GossipKey + `",`},
		{placeholders.ca, indentBlock(s.CAPEM, 6)},
		{placeholders.pkg, "  - " + s.SitePackage + "\n"},
		{placeholders.role, "include " + roleClass},
	} {
		if strings.Count(out, r[0]) != 1 {
			return nil, fmt.Errorf("examples/user-data.yaml has %d of the placeholder %q, want exactly one", strings.Count(out, r[0]), strings.TrimSpace(r[0]))
		}
		out = strings.Replace(out, r[0], r[1], 1)
	}
	for _, l := range strings.Split(out, "\n") {
		if t := strings.TrimSpace(l); !strings.HasPrefix(t, "#") && (strings.Contains(t, "change-me") || strings.Contains(t, "change_me")) {
			return nil, fmt.Errorf("a change-me value the lab does not fill: %q", t)
		}
	}
	return []byte(out), nil
}

// validClass: a Puppet class name (lower-case words joined by ::).
func validClass(c string) bool {
	if c == "" {
		return false
	}
	for _, w := range strings.Split(c, "::") {
		if w == "" || w[0] < 'a' || w[0] > 'z' {
			return false
		}
		for _, r := range w {
			if !(r >= 'a' && r <= 'z' || r >= '0' && r <= '9' || r == '_') {
				return false
			}
		}
	}
	return true
}

// indentBlock is text's lines, each indented by n spaces, ending in a
// newline: a YAML block scalar's content.
func indentBlock(text string, n int) string {
	var b bytes.Buffer
	pad := strings.Repeat(" ", n)
	for _, l := range strings.Split(strings.TrimRight(text, "\n"), "\n") {
		b.WriteString(pad + l + "\n")
	}
	return b.String()
}
