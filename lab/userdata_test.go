package lab

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"gopkg.in/yaml.v3"

	"github.com/jiocloud/orchestrate/internal/consultest"
	"github.com/jiocloud/orchestrate/internal/store"
	"github.com/jiocloud/orchestrate/internal/testutil"
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

// firstBootScript is the first-boot script of user data ud.
func firstBootScript(t *testing.T, ud []byte) string {
	t.Helper()
	var cc struct {
		WriteFiles []struct{ Path, Content string } `yaml:"write_files"`
	}
	if err := yaml.Unmarshal(ud, &cc); err != nil {
		t.Fatal(err)
	}
	for _, f := range cc.WriteFiles {
		if f.Path == "/usr/local/sbin/orchestrate-first-boot" {
			return f.Content
		}
	}
	t.Fatal("the user data writes no /usr/local/sbin/orchestrate-first-boot")
	return ""
}

// The shipped first-boot script reports the machine's provisioning in its
// own status record: running once its agent joined, then success, or
// failed naming the step. It runs here as cloud-init runs it (sh), with
// the real orchestrate, consul (a real agent) and Debian's puppet; only
// what needs the machine it boots (chown to the user consul, systemctl)
// is a stand-in, and the paths under /etc and /var/log are the test's.
func TestFirstBootScriptReportsItsState(t *testing.T) {
	puppet := testutil.RequirePuppet(t)
	agent := consultest.Start(t, consultest.Options{})
	bin := testutil.BuildCommands(t, "orchestrate")
	consul, err := consultest.Binary()
	if err != nil {
		t.Fatal(err)
	}
	example, err := os.ReadFile("../examples/user-data.yaml")
	if err != nil {
		t.Fatal(err)
	}
	st, err := store.New(agent.Client, "orchestrate")
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name, class string
		systemctl   int // the stand-in's exit code
		want        string
		detail      string
	}{
		{name: "the role applies", class: "settings", want: store.StateSuccess},
		{name: "the role's class does not exist", class: "no_such_role", want: store.StateFailed, detail: "step puppet failed (exit 1)"},
		{name: "the agent does not start", class: "settings", systemctl: 1, want: store.StateFailed, detail: "step consul failed (exit 1)"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			ud, err := RoleUserData(example, testSite, tc.class)
			if err != nil {
				t.Fatal(err)
			}
			script := strings.NewReplacer("/var/log/orchestrate", dir+"/log", "/etc/orchestrate/node.token", dir+"/node.token").Replace(firstBootScript(t, ud))
			seen := dir + "/seen-by-puppet"
			stand := map[string]string{
				"chown":     "exit 0",
				"systemctl": fmt.Sprintf("exit %d", tc.systemctl),
				// Debian's puppet, in directories of the test's; it first
				// notes the record the machine stands in while it applies.
				"puppet": fmt.Sprintf("%s kv get orchestrate/hosts/%s/status/provisioned > %s\nexec %s \"$@\" --confdir %s/p --vardir %s/p/var --codedir %s/p/code --logdir %s/p/log --rundir %s/p/run",
					consul, agent.NodeName, seen, puppet, dir, dir, dir, dir, dir),
				"orchestrate": "exec " + bin + "/orchestrate \"$@\"",
				"consul":      "exec " + consul + " \"$@\"",
			}
			for name, body := range stand {
				if err := os.WriteFile(filepath.Join(dir, name), []byte("#!/bin/sh\n"+body+"\n"), 0o755); err != nil {
					t.Fatal(err)
				}
			}
			if err := os.WriteFile(dir+"/node.token", []byte("00000000-0000-0000-0000-000000000001\n"), 0o600); err != nil {
				t.Fatal(err)
			}
			cmd := exec.Command("sh", "-c", script)
			cmd.Env = append(agent.Env(), "PATH="+dir+":/usr/bin:/bin", "HOME="+dir)
			out, err := cmd.CombinedOutput()
			log, _ := os.ReadFile(dir + "/log/first-boot.log")
			if (err == nil) != (tc.want == store.StateSuccess) {
				t.Fatalf("script: %v, want success %v\n%s\nlog:\n%s", err, tc.want == store.StateSuccess, out, log)
			}
			got, err := st.HostStatus(context.Background(), agent.NodeName)
			if err != nil {
				t.Fatal(err)
			}
			if p := got[store.CategoryProvisioned]; p.State != tc.want || p.Detail != tc.detail {
				t.Fatalf("provisioned = %+v, want %s %q\nlog:\n%s", p, tc.want, tc.detail, log)
			}
			if tc.systemctl == 0 {
				if b, _ := os.ReadFile(seen); !strings.Contains(string(b), `"state":"running"`) {
					t.Errorf("the record while Puppet ran: %q, want running", b)
				}
			}
			if !strings.Contains(string(log), "step puppet") && tc.systemctl == 0 {
				t.Errorf("the log does not name the puppet step:\n%s", log)
			}
		})
	}
}
