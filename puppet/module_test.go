// Package puppet_test checks the orchestrate Puppet module with Debian's
// real puppet and puppet-lint: parsed, linted, and applied against a
// temporary root (every path a parameter) with the real binaries.
package puppet_test

import (
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"sort"
	"strings"
	"testing"

	"gopkg.in/yaml.v3"

	"github.com/jiocloud/orchestrate/internal/testutil"
	"github.com/jiocloud/orchestrate/reaper/daemon"
)

// manifests lists the module's .pp files.
func manifests(t *testing.T) []string {
	t.Helper()
	var files []string
	for _, glob := range []string{"orchestrate/manifests/*.pp", "orchestrate/types/*.pp", "orchestrate/examples/*.pp"} {
		m, err := filepath.Glob(glob)
		if err != nil {
			t.Fatal(err)
		}
		files = append(files, m...)
	}
	if len(files) < 6 {
		t.Fatalf("only %d manifests: %v", len(files), files)
	}
	return files
}

// puppet parser validate and puppet-lint find nothing; metadata.json is
// what the Forge and `puppet module` read.
func TestModuleValidates(t *testing.T) {
	puppet := testutil.RequirePuppet(t)
	lint := testutil.RequireTool(t, "puppet-lint", "puppet-lint")
	files := manifests(t)
	if out, err := exec.Command(puppet, append([]string{"parser", "validate"}, files...)...).CombinedOutput(); err != nil {
		t.Errorf("puppet parser validate: %v\n%s", err, out)
	}
	if out, err := exec.Command(lint, append([]string{"--fail-on-warnings"}, files...)...).CombinedOutput(); err != nil {
		t.Errorf("puppet-lint: %v\n%s", err, out)
	}
	b, err := os.ReadFile("orchestrate/metadata.json")
	if err != nil {
		t.Fatal(err)
	}
	var meta struct {
		Name, Version, Summary, Source string
		Dependencies                   []any
	}
	if err := json.Unmarshal(b, &meta); err != nil {
		t.Fatalf("metadata.json: %v", err)
	}
	if !strings.HasSuffix(meta.Name, "-orchestrate") || meta.Version == "" || meta.Summary == "" || meta.Dependencies == nil {
		t.Errorf("metadata.json: %+v", meta)
	}
}

// both applies class orchestrate and class orchestrate::reaper as the
// bootstrap node has them, every path under the root.
const both = `
class { 'orchestrate':
  manage_package     => false,
  config_dir         => '%[1]s/etc/orchestrate',
  hiera_data_file    => '%[1]s/var/lib/orchestrate/hiera/services.yaml',
  watch_config_file  => '%[1]s/etc/consul.d/orchestrate-watches.json',
  token_file         => '%[1]s/etc/orchestrate/node.token',
  consul_token       => Sensitive('node-secret-4b1f'),
  token_owner        => 'root',
  token_group        => 'root',
  consul_reload      => 'echo reloaded >> %[1]s/consul-reloads',
  orchestrate_bin    => '%[2]s/orchestrate',
  hiera_services_bin => '%[2]s/hiera-services',
  dependencies       => {
    'mysql'    => { 'addressable' => 1, 'functional' => 2 },
    'keystone' => { 'functional' => 1 },
  },
  watch_args         => ['--consistent-cmd', 'puppet agent -t --detailed-exitcodes'],
}
class { 'orchestrate::reaper':
  roles          => [{
    'name'        => 'web',
    'desired'     => 3,
    'min_healthy' => 2,
    'on_drain_timeout' => 'delete',
    'boot'        => { 'flavor' => 'm1.small', 'image' => 'debian-12', 'networks' => ['none'] },
  }],
  %[3]s
  settings       => { 'interval' => '45s', 'max_in_flight' => 2 },
  consul_token   => Sensitive('reaper-secret-9c2e'),
  clouds         => Sensitive({ 'orchestrate' => { 'auth' => {
    'auth_url' => 'http://127.0.0.1:5000/v3', 'username' => 'reaper', 'password' => 'cloud-secret-77aa',
    'project_name' => 'admin', 'user_domain_name' => 'Default', 'project_domain_name' => 'Default' } } }),
  config_file    => '%[1]s/etc/orchestrate/reaper.yaml',
  env_file       => '%[1]s/etc/orchestrate/reaper.env',
  token_file     => '%[1]s/etc/orchestrate/reaper.token',
  clouds_file    => '%[1]s/etc/orchestrate/clouds.yaml',
  owner          => 'root',
  group          => 'root',
  reaper_bin     => '%[2]s/reaper',
  manage_service => false,
}
`

func manifest(reaperExtra string) string {
	return strings.Replace(both, "%[3]s", reaperExtra, 1)
}

// Both classes applied to a temporary root write every file as the
// binaries read it, secrets mode 0600 and never in the output; a second
// apply changes nothing.
func TestApplyBothClasses(t *testing.T) {
	w := newWorld(t)
	code, out := w.apply(t, manifest(""))
	if code != 2 {
		t.Fatalf("first apply: exit %d, want 2 (changes):\n%s", code, out)
	}
	for _, secret := range []string{"node-secret-4b1f", "reaper-secret-9c2e", "cloud-secret-77aa"} {
		if strings.Contains(out, secret) {
			t.Errorf("a secret in puppet's output:\n%s", out)
		}
	}

	// The dependencies file, as hiera-services and watch-config read it.
	_, deps := w.file(t, "etc/orchestrate/dependencies.yaml")
	var gotDeps map[string]map[string]int
	if err := yaml.Unmarshal([]byte(deps), &gotDeps); err != nil {
		t.Fatalf("dependencies.yaml: %v\n%s", err, deps)
	}
	if want := map[string]map[string]int{"mysql": {"addressable": 1, "functional": 2}, "keystone": {"functional": 1}}; !reflect.DeepEqual(gotDeps, want) {
		t.Errorf("dependencies.yaml = %v, want %v", gotDeps, want)
	}

	// The watches: exactly what orchestrate watch-config prints for them.
	_, watches := w.file(t, "etc/consul.d/orchestrate-watches.json")
	want, err := exec.Command(filepath.Join(w.bin, "orchestrate"), "watch-config",
		"--orchestrate", filepath.Join(w.bin, "orchestrate"), "--hiera-services", filepath.Join(w.bin, "hiera-services"),
		"--out", filepath.Join(w.root, "var/lib/orchestrate/hiera/services.yaml"),
		"--dependencies", filepath.Join(w.root, "etc/orchestrate/dependencies.yaml"),
		"--handler-token-file", filepath.Join(w.root, "etc/orchestrate/node.token"),
		"--consistent-cmd", "puppet agent -t --detailed-exitcodes").Output()
	if err != nil {
		t.Fatal(err)
	}
	if watches != string(want) || !strings.Contains(watches, `"mysql"`) {
		t.Errorf("watch file:\n%s\nwant:\n%s", watches, want)
	}
	if _, reloads := w.file(t, "consul-reloads"); reloads != "reloaded\n" {
		t.Errorf("consul reloads: %q", reloads)
	}

	// reaper.yaml, as the reaper loads it: dry run, every parameter.
	cfg, err := daemon.LoadConfig(filepath.Join(w.root, "etc/orchestrate/reaper.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	if err := daemon.CheckConfig(cfg); err != nil {
		t.Fatal(err)
	}
	if !cfg.IsDryRun() || cfg.Interval.D().String() != "45s" || cfg.MaxInFlight != 2 || len(cfg.Roles) != 1 ||
		cfg.Roles[0].Name != "web" || cfg.Roles[0].Desired != 3 || cfg.Roles[0].MinHealthy != 2 ||
		cfg.Roles[0].OnDrainTimeout != "delete" || cfg.Roles[0].OnDrainFailure != "abort" ||
		cfg.Cloud.Name != "orchestrate" || cfg.Cloud.CloudsFile != filepath.Join(w.root, "etc/orchestrate/clouds.yaml") {
		t.Errorf("reaper.yaml loads as %+v", cfg)
	}

	for rel, want := range map[string]string{
		"etc/orchestrate/node.token":   "node-secret-4b1f\n",
		"etc/orchestrate/reaper.token": "reaper-secret-9c2e\n",
	} {
		if mode, got := w.file(t, rel); mode != 0o600 || got != want {
			t.Errorf("%s: mode %v, %q", rel, mode, got)
		}
	}
	mode, clouds := w.file(t, "etc/orchestrate/clouds.yaml")
	var c struct {
		Clouds map[string]struct {
			Auth map[string]string `yaml:"auth"`
		} `yaml:"clouds"`
	}
	if err := yaml.Unmarshal([]byte(clouds), &c); err != nil || mode != 0o600 || c.Clouds["orchestrate"].Auth["password"] != "cloud-secret-77aa" {
		t.Errorf("clouds.yaml: mode %v, %v, %+v", mode, err, c)
	}
	_, env := w.file(t, "etc/orchestrate/reaper.env")
	for _, line := range []string{"CONSUL_HTTP_TOKEN_FILE=" + filepath.Join(w.root, "etc/orchestrate/reaper.token"), "OS_CLOUD=orchestrate"} {
		if !strings.Contains(env, "\n"+line+"\n") {
			t.Errorf("reaper.env lacks %s:\n%s", line, env)
		}
	}

	// Nothing but files and the watch exec: Puppet never arms the reaper.
	wantRes := []string{
		"exec[orchestrate watch-config]", "exec[orchestrate: consul reload]",
	}
	for _, f := range []string{"etc/orchestrate/dependencies.yaml", "etc/orchestrate/node.token", "etc/orchestrate/reaper.yaml",
		"etc/orchestrate/reaper.env", "etc/orchestrate/reaper.token", "etc/orchestrate/clouds.yaml"} {
		// resources.txt spells titles in lower case.
		wantRes = append(wantRes, strings.ToLower("file["+filepath.Join(w.root, f)+"]"))
	}
	sort.Strings(wantRes)
	if got := w.resources(t); !reflect.DeepEqual(got, wantRes) {
		t.Errorf("resources:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(wantRes, "\n"))
	}

	code, out = w.apply(t, manifest(""))
	if code != 0 {
		t.Errorf("second apply: exit %d, want 0 (no change):\n%s", code, out)
	}

	// dry_run => false, explicitly, lets the reaper act; the watches
	// follow a changed dependencies hash.
	code, out = w.apply(t, strings.Replace(manifest("dry_run => false,"), "'keystone' => { 'functional' => 1 },", "", 1))
	if code != 2 {
		t.Fatalf("apply with dry_run => false: exit %d:\n%s", code, out)
	}
	if cfg, err := daemon.LoadConfig(filepath.Join(w.root, "etc/orchestrate/reaper.yaml")); err != nil || cfg.IsDryRun() {
		t.Errorf("reaper.yaml after dry_run => false: dry run %v, %v", cfg != nil && cfg.IsDryRun(), err)
	}
	if _, watches := w.file(t, "etc/consul.d/orchestrate-watches.json"); strings.Contains(watches, "keystone") {
		t.Errorf("the watches still name keystone:\n%s", watches)
	}
	if _, reloads := w.file(t, "consul-reloads"); reloads != "reloaded\nreloaded\n" {
		t.Errorf("consul reloads: %q", reloads)
	}
}

// Bad parameters fail the catalog with a message naming them, and a
// configuration the reaper refuses never replaces the file.
func TestApplyBadInput(t *testing.T) {
	w := newWorld(t)
	if code, out := w.apply(t, manifest("")); code != 2 {
		t.Fatalf("first apply: exit %d:\n%s", code, out)
	}
	_, before := w.file(t, "etc/orchestrate/reaper.yaml")
	for _, tc := range []struct {
		name, from, to, want string
	}{
		{"negative count", "'desired'     => 3", "'desired'     => -1", "desired"},
		{"dry_run in settings", "'interval' => '45s'", "'interval' => '45s', 'dry_run' => false", "settings may not hold dry_run"},
		{"relative path", "'%[1]s/etc/orchestrate/reaper.token'", "'reaper.token'", "token_file"},
		{"newline in a path", "'%[1]s/etc/orchestrate/reaper.env'", "\"%[1]s/etc/orchestrate/reaper.env\\nX=1\"", "env_file"},
		{"bad dependency count", "'functional' => 2", "'functional' => 'two'", "dependencies"},
		{"a duration the reaper refuses", "'interval' => '45s'", "'interval' => 'soon'", "is not a duration"},
		// The node's token file is the package's unless 'none': one that
		// nothing writes is named, and a token needs a file.
		{"a token file nothing wrote", "token_file         => '%[1]s/etc/orchestrate/node.token',\n  consul_token       => Sensitive('node-secret-4b1f'),",
			"token_file         => '%[1]s/etc/orchestrate/missing.token',", "read token file %[1]s/etc/orchestrate/missing.token: no such file or directory"},
		{"a token without a file", "token_file         => '%[1]s/etc/orchestrate/node.token',", "token_file         => 'none',", "consul_token needs token_file"},
		{"a drain ending Puppet's type refuses", "'on_drain_timeout' => 'delete'", "'on_drain_timeout' => 'retry'", "on_drain_timeout"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			m := manifest("")
			if !strings.Contains(m, tc.from) {
				t.Fatalf("manifest lacks %q", tc.from)
			}
			code, out := w.apply(t, strings.Replace(m, tc.from, tc.to, 1))
			if code != 1 && code != 4 && code != 6 {
				t.Errorf("exit %d, want a failure:\n%s", code, out)
			}
			if want := strings.ReplaceAll(tc.want, "%[1]s", w.root); !strings.Contains(out, want) {
				t.Errorf("output does not name %q:\n%s", want, out)
			}
			if _, after := w.file(t, "etc/orchestrate/reaper.yaml"); after != before {
				t.Errorf("reaper.yaml changed:\n%s", after)
			}
		})
	}
}

// On a cloud without Consul ACLs, token_file => 'none': the handlers read
// no token file.
func TestApplyWithoutACLs(t *testing.T) {
	w := newWorld(t)
	m := strings.Replace(manifest(""), "token_file         => '%[1]s/etc/orchestrate/node.token',\n  consul_token       => Sensitive('node-secret-4b1f'),", "token_file         => 'none',", 1)
	if code, out := w.apply(t, m); code != 2 {
		t.Fatalf("apply: exit %d:\n%s", code, out)
	}
	if _, watches := w.file(t, "etc/consul.d/orchestrate-watches.json"); strings.Contains(watches, "token-file") || !strings.Contains(watches, "hiera-services") {
		t.Errorf("the watches without ACLs:\n%s", watches)
	}
}

// The reads parameter reaches the watches as watch-config --reads: the
// role's list, or [] (the node reads only its dependencies), and undef
// leaves it out (the whole-file trigger); a name that cannot be a service
// fails the catalog naming the parameter.
func TestApplyReads(t *testing.T) {
	w := newWorld(t)
	const node = `
class { 'orchestrate':
  manage_package     => false,
  config_dir         => '%[1]s/etc/orchestrate',
  hiera_data_file    => '%[1]s/var/lib/orchestrate/hiera/services.yaml',
  watch_config_file  => '%[1]s/etc/consul.d/orchestrate-watches.json',
  token_file         => 'none',
  consul_reload      => 'true',
  orchestrate_bin    => '%[2]s/orchestrate',
  hiera_services_bin => '%[2]s/hiera-services',
  dependencies       => { 'mysql' => { 'functional' => 1 } },
  watch_args         => ['--host', 'web1', '--consistent-cmd', 'true', '--eventual-cmd', 'true'],
  READS
}
`
	for _, tc := range []struct {
		reads string
		want  []string // watch-config's --reads arguments
	}{
		{"reads => ['memcached', 'glance'],", []string{"--reads=memcached,glance"}},
		{"reads => [],", []string{"--reads="}},
		{"", nil},
	} {
		if code, out := w.apply(t, strings.Replace(node, "READS", tc.reads, 1)); code != 2 && code != 0 {
			t.Fatalf("%s: exit %d:\n%s", tc.reads, code, out)
		}
		_, watches := w.file(t, "etc/consul.d/orchestrate-watches.json")
		args := append([]string{"watch-config", "--orchestrate", filepath.Join(w.bin, "orchestrate"), "--hiera-services", filepath.Join(w.bin, "hiera-services"),
			"--out", filepath.Join(w.root, "var/lib/orchestrate/hiera/services.yaml"),
			"--dependencies", filepath.Join(w.root, "etc/orchestrate/dependencies.yaml")}, tc.want...)
		args = append(args, "--host", "web1", "--consistent-cmd", "true", "--eventual-cmd", "true")
		want, err := exec.Command(filepath.Join(w.bin, "orchestrate"), args...).Output()
		if err != nil {
			t.Fatal(err)
		}
		if watches != string(want) {
			t.Errorf("%s: watch file:\n%s\nwant:\n%s", tc.reads, watches, want)
		}
		if tc.want == nil && strings.Contains(watches, "--reads") {
			t.Errorf("no reads: the watches carry --reads:\n%s", watches)
		}
	}
	if code, out := w.apply(t, strings.Replace(node, "READS", "reads => ['a b'],", 1)); code != 1 && code != 4 && code != 6 || !strings.Contains(out, "reads") {
		t.Errorf("a bad service name: exit %d, want a failure naming reads:\n%s", code, out)
	}
}
