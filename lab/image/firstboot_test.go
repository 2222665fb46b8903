package image_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"gopkg.in/yaml.v3"

	"github.com/jiocloud/orchestrate/internal/testutil"
	"github.com/jiocloud/orchestrate/lab/debs"
	"github.com/jiocloud/orchestrate/lab/internal/labenv"
	"github.com/jiocloud/orchestrate/lab/repo"
)

// firstBoot is the user data of TestFirstBootFromTheLabRepository: the
// shipped example's apt source and packages (the repository here a
// directory bound into the container, the key the lab's), its consul.service
// drop-in, a one-server Consul of its own instead of the cluster, then the
// role's two steps as converge runs them.
const firstBoot = `#cloud-config
apt:
  sources:
    orchestrate:
      source: "deb [signed-by=$KEY_FILE] file:/srv/lab-repo ./"
      key: |
%s
packages:
  - consul
  - orchestrate
  - puppet
  - orchestrate-lab-roles
write_files:
%s
  - path: /etc/consul.d/lab-test.hcl
    content: |
      server = true
      bootstrap_expect = 1
      bind_addr = "127.0.0.1"
      client_addr = "127.0.0.1"
      retry_join = ["127.0.0.1"]
  # No ACLs here: the handlers run without a token.
  - path: /etc/puppet/code/environments/production/data/common.yaml
    content: |
      orchestrate::token_file: none
runcmd:
  - [systemctl, enable, --now, consul]
  - [sh, -c, "for i in $(seq 60); do consul info 2>/dev/null | grep -q 'leader = true' && break; sleep 1; done"]
  - [sh, -c, "puppet apply --detailed-exitcodes --color=false -e 'include labroles::db' > /var/log/lab-consistent.log 2>&1; echo $? > /var/lib/lab-consistent.exit"]
  - [sh, -c, "puppet apply --detailed-exitcodes --color=false -e 'include labroles::db::config' > /var/log/lab-eventual.log 2>&1; echo $? > /var/lib/lab-eventual.exit"]
`

// A server's first boot as the lab gives it: cloud-init adds the lab's
// signed repository from the user data (gpg turning the armoured key into
// $KEY_FILE), installs orchestrate and orchestrate-lab-roles from it with
// their dependencies (consul found installed), starts Consul (as root),
// and Debian's puppet applies the role from the installed modules with no
// --modulepath: the service answers, is registered with a passing check,
// the watches are in the agent's configuration, and the role validates.
func TestFirstBootFromTheLabRepository(t *testing.T) {
	tar := ensured(t)
	root, err := labenv.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	t.Setenv("LAB_DIR", t.TempDir()) // the repository's key, this test's own
	ctx := context.Background()
	out := t.TempDir()
	var pkgs []string
	for _, build := range []func() (string, error){
		func() (string, error) { return debs.Orchestrate(ctx, root, out) },
		func() (string, error) { return debs.Roles(ctx, root, out, "") },
	} {
		deb, err := build()
		if err != nil {
			t.Fatal(err)
		}
		pkgs = append(pkgs, deb)
	}
	repoDir := filepath.Join(t.TempDir(), "repo")
	pub, err := repo.Build(ctx, repoDir, pkgs)
	if err != nil {
		t.Fatal(err)
	}
	indented := "        " + strings.ReplaceAll(strings.TrimSpace(pub), "\n", "\n        ")
	userData := fmt.Sprintf(firstBoot, indented, exampleDropIn(t, root))
	c := boot(t, tar, userData, repoDir+":/srv/lab-repo")
	took := c.waitBooted(t)
	t.Logf("first boot to cloud-init done: %v", took)

	if got := c.must(t, "systemctl", "show", "consul", "-p", "User", "-p", "ActiveState"); got != "User=root\nActiveState=active\n" {
		t.Errorf("consul.service with the example's drop-in: %q, want root and active", got)
	}
	if got := c.must(t, "dpkg-query", "-W", "-f=${Package} ${Status}\n", "orchestrate", "orchestrate-lab-roles", "consul"); strings.Count(got, "install ok installed") != 3 {
		t.Errorf("packages:\n%s", got)
	}
	if got := c.must(t, "sh", "-c", "cat /etc/apt/sources.list.d/*.list"); !strings.Contains(got, "deb [signed-by=/etc/apt/cloud-init.gpg.d/orchestrate.gpg] file:/srv/lab-repo ./") {
		t.Errorf("apt source written by cloud-init: %q", got)
	}
	for step, want := range map[string]string{"consistent": "2", "eventual": "2"} {
		if got := strings.TrimSpace(c.must(t, "cat", "/var/lib/lab-"+step+".exit")); got != want {
			log, _ := c.exec(t, time.Minute, "cat", "/var/log/lab-"+step+".log")
			t.Errorf("the %s step's puppet apply exited %s, want %s (changes):\n%s", step, got, want, log)
		}
	}
	if got := c.must(t, "python3", "-c", "import urllib.request; print(urllib.request.urlopen('http://127.0.0.1:8001/config.json').read().decode())"); !strings.Contains(got, `"role": "db"`) {
		t.Errorf("db's config.json: %s", got)
	}
	testutil.Eventually(t, 30*time.Second, "db registered with a passing check", func() bool {
		out, _ := c.exec(t, 10*time.Second, "python3", "-c", "import urllib.request; print(urllib.request.urlopen('http://127.0.0.1:8500/v1/health/service/db?passing').read().decode())")
		return strings.Contains(out, `"ServiceName":"db"`) && strings.Contains(out, `"Status":"passing"`)
	})
	if got := c.must(t, "cat", "/etc/consul.d/orchestrate-watches.json"); !strings.Contains(got, "include labroles::db::config") {
		t.Errorf("the watches do not run the role's eventual step:\n%s", got)
	}
	if _, err := c.exec(t, time.Minute, "/var/lib/labroles/validate/db"); err != nil {
		t.Errorf("db's validation check: %v", err)
	}
	t.Logf("a db server after its first boot: %s", c.footprint(t))
}

// exampleDropIn is the write_files entry of examples/user-data.yaml that
// runs the agent as root, as a YAML list item at write_files' indent.
func exampleDropIn(t *testing.T, root string) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(root, "examples/user-data.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	var ud struct {
		WriteFiles []map[string]any `yaml:"write_files"`
	}
	if err := yaml.Unmarshal(b, &ud); err != nil {
		t.Fatal(err)
	}
	for _, f := range ud.WriteFiles {
		if f["path"] == "/etc/systemd/system/consul.service.d/orchestrate.conf" {
			out, err := yaml.Marshal([]map[string]any{f})
			if err != nil {
				t.Fatal(err)
			}
			return "  " + strings.ReplaceAll(strings.TrimSpace(string(out)), "\n", "\n  ")
		}
	}
	t.Fatal("examples/user-data.yaml writes no consul.service drop-in")
	return ""
}
