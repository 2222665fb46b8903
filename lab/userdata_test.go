package lab

import (
	"os"
	"strings"
	"testing"

	"gopkg.in/yaml.v3"
)

var testSite = Site{
	RepoSource:    "deb [signed-by=$KEY_FILE] http://198.18.0.1:8480/ ./",
	RepoKey:       "-----BEGIN PGP PUBLIC KEY BLOCK-----\n\nmQINBGc\n-----END PGP PUBLIC KEY BLOCK-----\n",
	ConsulServers: []string{"198.18.0.11", "198.18.0.12", "198.18.0.13"},
	GossipKey:     "pUqJrVyVRj5jsiYEkM/tFQYfWyJIv4s3XkvDwy7Cu5s=",
	CAPEM:         "-----BEGIN CERTIFICATE-----\nMIIC\n-----END CERTIFICATE-----\n",
	SitePackage:   "orchestrate-lab-roles",
}

// The lab's user data of a role is the shipped example with only its
// change-me values filled in: every other line is the example's, and the
// result is still cloud-config cloud-init reads.
func TestRoleUserDataIsTheExample(t *testing.T) {
	example, err := os.ReadFile("../examples/user-data.yaml")
	if err != nil {
		t.Fatal(err)
	}
	ud, err := RoleUserData(example, testSite, "labroles::db")
	if err != nil {
		t.Fatal(err)
	}
	a, b := strings.Split(string(example), "\n"), strings.Split(string(ud), "\n")
	// Lines only change where a placeholder was; the key and CA blocks
	// may grow.
	var changed []string
	i, j := 0, 0
	for i < len(a) && j < len(b) {
		if a[i] == b[j] {
			i, j = i+1, j+1
			continue
		}
		changed = append(changed, a[i])
		i++
		for j < len(b) && (i >= len(a) || b[j] != a[i]) {
			j++
		}
	}
	if len(changed) != 7 {
		t.Errorf("%d example lines changed, want the 7 placeholders: %q", len(changed), changed)
	}
	for _, c := range changed {
		if !strings.Contains(c, "change") && !strings.Contains(c, "example.net") && !strings.Contains(c, "Y2hhbmdl") {
			t.Errorf("a line that is no placeholder changed: %q", c)
		}
	}
	var cc struct {
		Packages []string `yaml:"packages"`
		Runcmd   [][]string
	}
	if err := yaml.Unmarshal(ud, &cc); err != nil {
		t.Fatalf("the user data is not YAML: %v", err)
	}
	if strings.Join(cc.Packages, " ") != "consul orchestrate puppet orchestrate-lab-roles" {
		t.Errorf("packages %v", cc.Packages)
	}
	if !strings.Contains(string(ud), "include labroles::db") || !strings.Contains(string(ud), `"retry_join": ["198.18.0.11","198.18.0.12","198.18.0.13"]`) {
		t.Errorf("user data:\n%s", ud)
	}
	for _, bad := range []struct {
		class string
		site  func(*Site)
	}{
		{"labroles::db; exec", nil},
		{"Labroles", nil},
		{"labroles::db", func(s *Site) { s.GossipKey = `k", "x": "y` }},
		{"labroles::db", func(s *Site) { s.ConsulServers = nil }},
	} {
		s := testSite
		if bad.site != nil {
			bad.site(&s)
		}
		if _, err := RoleUserData(example, s, bad.class); err == nil {
			t.Errorf("class %q, site %+v: accepted", bad.class, s)
		}
	}
	if _, err := RoleUserData([]byte("#cloud-config\n"), testSite, "labroles::db"); err == nil || !strings.Contains(err.Error(), "placeholder") {
		t.Errorf("an example without its placeholders: %v", err)
	}
}
