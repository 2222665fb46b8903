// Package examples_test checks the files an operator starts from, and the
// package's default configuration, with the code and the tools that read
// them: the reaper's config loader, gophercloud's clouds.yaml parser,
// hiera-services's dependencies loader, Consul's own `consul validate`,
// sh -n, and a real `puppet lookup` through the example hiera.yaml of data
// hiera-services rendered from a real agent.
package examples_test

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"mime"
	"mime/multipart"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/gophercloud/gophercloud/v2/openstack/config/clouds"
	"github.com/hashicorp/consul/api"
	"gopkg.in/yaml.v3"

	"github.com/jiocloud/orchestrate/internal/consultest"
	"github.com/jiocloud/orchestrate/internal/hieradata"
	"github.com/jiocloud/orchestrate/internal/nodeid"
	"github.com/jiocloud/orchestrate/internal/paths"
	"github.com/jiocloud/orchestrate/internal/testutil"
	"github.com/jiocloud/orchestrate/reaper/daemon"
)

// abs is the absolute path of a file in this folder.
func abs(t *testing.T, name string) string {
	t.Helper()
	p, err := filepath.Abs(name)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// rewrite copies file into a temporary directory with old replaced by new.
func rewrite(t *testing.T, file, old, new string) string {
	t.Helper()
	b, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Contains(b, []byte(old)) {
		t.Fatalf("%s does not hold %q", file, old)
	}
	out := filepath.Join(t.TempDir(), filepath.Base(file))
	if err := os.WriteFile(out, bytes.ReplaceAll(b, []byte(old), []byte(new)), 0o600); err != nil {
		t.Fatal(err)
	}
	return out
}

// examples/reaper.yaml loads and validates as the reaper does (its user
// data file included), in dry run; the package's default differs only in
// listing no role, which the reaper refuses by name.
func TestReaperYAML(t *testing.T) {
	conf := rewrite(t, "reaper.yaml", "/etc/orchestrate/user-data.yaml", abs(t, "user-data.yaml"))
	cfg, err := daemon.LoadConfig(conf)
	if err != nil {
		t.Fatal(err)
	}
	if err := daemon.CheckConfig(cfg); err != nil {
		t.Fatalf("examples/reaper.yaml: %v", err)
	}
	if !cfg.IsDryRun() || len(cfg.Roles) != 2 || cfg.Cloud.Name != "mycloud" {
		t.Errorf("examples/reaper.yaml loads as %+v", cfg)
	}

	def, err := daemon.LoadConfig("../packaging/etc/reaper.yaml")
	if err != nil {
		t.Fatal(err)
	}
	if !def.IsDryRun() {
		t.Errorf("the package's reaper.yaml is not in dry run")
	}
	if err := daemon.CheckConfig(def); err == nil || !strings.Contains(err.Error(), "roles: at least one role") {
		t.Errorf("the package's reaper.yaml: %v, want only its missing roles refused", err)
	}
}

// examples/clouds.yaml is what gophercloud (and the openstack CLI) read.
func TestCloudsYAML(t *testing.T) {
	ao, eo, _, err := clouds.Parse(clouds.WithCloudName("mycloud"), clouds.WithLocations(abs(t, "clouds.yaml")))
	if err != nil {
		t.Fatal(err)
	}
	if ao.Username != "orchestrate-reaper" || ao.IdentityEndpoint == "" || eo.Region != "RegionOne" {
		t.Errorf("clouds.yaml: auth %+v, endpoint %+v", ao, eo)
	}
}

// Both dependencies files load as hiera-services and watch-config load
// them.
func TestDependenciesYAML(t *testing.T) {
	deps, err := hieradata.LoadDependencies("dependencies.yaml")
	if err != nil || len(deps) != 3 {
		t.Errorf("examples/dependencies.yaml: %v, %v", deps, err)
	}
	deps, err = hieradata.LoadDependencies("../packaging/etc/dependencies.yaml")
	if err != nil || len(deps) != 0 {
		t.Errorf("the package's dependencies.yaml: %v, %v", deps, err)
	}
}

// cloudConfig is the part of cloud-config the tests read.
type cloudConfig struct {
	Packages   []string `yaml:"packages"`
	WriteFiles []struct {
		Path, Content, Permissions string
	} `yaml:"write_files"`
	Runcmd [][]string `yaml:"runcmd"`
}

// The user data is cloud-config, and the reaper can append its token part
// to it; the agent configuration the two write together passes `consul
// validate` of the real Consul, with gossip encryption and TLS on and the
// node's own token as the agent's; every shell command parses.
func TestUserData(t *testing.T) {
	bin := consultest.RequireBinary(t)
	b, err := os.ReadFile("user-data.yaml")
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.HasPrefix(b, []byte("#cloud-config\n")) {
		t.Fatalf("user-data.yaml does not start with #cloud-config")
	}
	var ud cloudConfig
	if err := yaml.Unmarshal(b, &ud); err != nil {
		t.Fatal(err)
	}
	if strings.Join(ud.Packages, " ") != "consul orchestrate puppet change-me-site-puppet-code" {
		t.Errorf("packages %v", ud.Packages)
	}
	files := map[string]string{}
	for _, part := range userDataParts(t, b) {
		var cc cloudConfig
		if err := yaml.Unmarshal([]byte(part), &cc); err != nil {
			t.Fatalf("a part of the user data is not YAML: %v\n%s", err, part)
		}
		for _, f := range cc.WriteFiles {
			files[f.Path] = f.Content
		}
	}
	dir := t.TempDir()
	for _, f := range []string{paths.ConsulConfigDir + "/agent.json", paths.AgentTokenFile} {
		if files[f] == "" {
			t.Fatalf("no %s in %v", f, files)
		}
		if err := os.WriteFile(filepath.Join(dir, filepath.Base(f)), []byte(files[f]), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	if out, err := exec.Command(bin, "validate", dir).CombinedOutput(); err != nil {
		t.Errorf("consul validate of the agent configuration: %v\n%s", err, out)
	}
	for _, want := range []string{`"encrypt_verify_incoming": true`, `"auto_encrypt": {"tls": true}`, `"verify_server_hostname": true`} {
		if !strings.Contains(files[paths.ConsulConfigDir+"/agent.json"], want) {
			t.Errorf("the agent configuration lacks %s", want)
		}
	}
	if tok := files[paths.NodeToken]; strings.TrimSpace(tok) != testToken {
		t.Errorf("node token file %q, want the reaper's token", tok)
	}
	// The agent runs the handlers, converge and Puppet as root.
	if got := files["/etc/systemd/system/consul.service.d/orchestrate.conf"]; got != "[Service]\nUser=root\nGroup=root\n" {
		t.Errorf("consul.service drop-in %q, want the agent as root", got)
	}
	if strings.Contains(string(b), "token\": \"") {
		t.Errorf("the example holds a token of its own: every server would share it")
	}
	for _, cmd := range ud.Runcmd {
		if len(cmd) == 3 && cmd[0] == "sh" && cmd[1] == "-c" {
			if out, err := exec.Command("sh", "-n", "-c", cmd[2]).CombinedOutput(); err != nil {
				t.Errorf("sh -n %q: %v\n%s", cmd[2], err, out)
			}
		}
	}
	// The first-boot script runcmd runs: valid sh, reporting its states
	// with the node's token (lab's TestFirstBootScriptReportsItsState
	// runs it).
	script := files["/usr/local/sbin/orchestrate-first-boot"]
	if len(ud.Runcmd) != 1 || strings.Join(ud.Runcmd[0], " ") != "/usr/local/sbin/orchestrate-first-boot" || !strings.HasPrefix(script, "#!/bin/sh\n") {
		t.Fatalf("runcmd %v, script:\n%s", ud.Runcmd, script)
	}
	if out, err := exec.Command("sh", "-n", "-c", script).CombinedOutput(); err != nil {
		t.Errorf("sh -n of the first-boot script: %v\n%s", err, out)
	}
	for _, want := range []string{"orchestrate update-status --token-file " + paths.NodeToken + " provisioned", "step status report running",
		"report failed --detail \"step $name failed (exit $rc)\"", "report success", "orchestrate logs push"} {
		if !strings.Contains(script, want) {
			t.Errorf("the first-boot script lacks %q", want)
		}
	}
}

// Data hiera-services rendered from a real agent, read back by the real
// `puppet lookup` through the example hiera.yaml's level.
func TestHieraLevel(t *testing.T) {
	puppet := testutil.RequirePuppet(t)
	a := consultest.Start(t, consultest.Options{})
	_, err := a.Client.Catalog().Register(&api.CatalogRegistration{Node: "db1", Address: "10.0.0.5",
		Service: &api.AgentService{ID: "mysql", Service: "mysql", Port: 3306}}, nil)
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	out := filepath.Join(dir, "services.yaml")
	hs := filepath.Join(testutil.BuildCommands(t, "hiera-services"), "hiera-services")
	cmd := exec.Command(hs, "--out", out, "--dependencies", "dependencies.yaml")
	cmd.Env = append(a.Env(), "PATH="+os.Getenv("PATH"))
	if b, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("hiera-services: %v\n%s", err, b)
	}
	hieraYAML := rewrite(t, "hiera.yaml", "/var/lib/orchestrate/hiera/services.yaml", out)
	facts := filepath.Join(dir, "facts.json")
	if err := os.WriteFile(facts, []byte(`{"trusted": {"certname": "keystone1"}}`), 0o644); err != nil {
		t.Fatal(err)
	}
	for key, want := range map[string]string{
		"services::mysql::address":         `["10.0.0.5"]`,
		"orchestrate::dependencies_met":    `false`,
		"orchestrate::unmet_dependencies":  `["memcached", "mysql", "rabbitmq"]`,
		"healthy_services::mysql::address": `["10.0.0.5"]`, // no check: passing
	} {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		b, err := exec.CommandContext(ctx, puppet, "lookup", key, "--hiera_config", hieraYAML, "--facts", facts,
			"--render-as", "json", "--confdir", filepath.Join(dir, "conf"), "--vardir", filepath.Join(dir, "var")).Output()
		cancel()
		if err != nil {
			t.Fatalf("puppet lookup %s: %v\n%s", key, err, b)
		}
		lines := strings.Split(strings.TrimSpace(string(b)), "\n")
		var got, w any
		if err := json.Unmarshal([]byte(lines[len(lines)-1]), &got); err != nil {
			t.Fatalf("puppet lookup %s printed %q", key, b)
		}
		if err := json.Unmarshal([]byte(want), &w); err != nil {
			t.Fatal(err)
		}
		if g, _ := json.Marshal(got); string(g) != mustJSON(t, w) {
			t.Errorf("puppet lookup %s = %s, want %s", key, g, want)
		}
	}
}

func mustJSON(t *testing.T, v any) string {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

const testToken = "0b1c2d3e-aaaa-4bbb-8ccc-111122223333"

// userDataParts composes the example with the reaper's token part, as the
// reaper does under node_identity, and returns each part's body.
func userDataParts(t *testing.T, operator []byte) []string {
	t.Helper()
	ud, err := nodeid.UserData(testToken, operator)
	if err != nil {
		t.Fatalf("the reaper cannot append its part to the example: %v", err)
	}
	head, body, _ := bytes.Cut(ud, []byte("\n\n"))
	_, params, err := mime.ParseMediaType(strings.TrimPrefix(strings.SplitN(string(head), "\n", 2)[0], "Content-Type: "))
	if err != nil {
		t.Fatal(err)
	}
	r := multipart.NewReader(bytes.NewReader(body), params["boundary"])
	var parts []string
	for {
		p, err := r.NextPart()
		if err != nil {
			break
		}
		data, _ := io.ReadAll(p)
		parts = append(parts, string(data))
	}
	if len(parts) != 2 {
		t.Fatalf("%d parts, want the example and the reaper's", len(parts))
	}
	return parts
}
