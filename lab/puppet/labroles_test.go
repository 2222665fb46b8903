// Package labroles_test checks the lab's roles module (modules/labroles)
// with Debian's puppet and puppet-lint, beside the orchestrate module of
// the source tree: every role's classes compile, their eventual step
// writes what the roles read from a real Consul agent's catalog (through
// hiera-services' data and service_blocker), and their validation check
// passes and fails when it should.
package labroles_test

import (
	"encoding/json"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/consul/api"

	"github.com/jiocloud/orchestrate/internal/consultest"
	"github.com/jiocloud/orchestrate/internal/testutil"
)

// roles are the module's four roles and what each needs from others.
var roles = map[string]string{
	"db":         "",
	"lb":         "controller:1",
	"controller": "db:2 lb:1",
	"compute":    "controller:1",
}

// puppetWorld is a modulepath with the source tree's orchestrate and
// labroles modules, a hiera configuration reading the given services.yaml
// and common.yaml, and puppet's own directories.
type puppetWorld struct {
	puppet, dir, modules, hiera, data string
}

func newWorld(t *testing.T) *puppetWorld {
	t.Helper()
	w := &puppetWorld{puppet: testutil.RequirePuppet(t), dir: t.TempDir()}
	w.modules = filepath.Join(w.dir, "modules")
	w.data = filepath.Join(w.dir, "data")
	for _, d := range []string{w.modules, w.data} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	for name, src := range map[string]string{"orchestrate": "../../puppet/orchestrate", "labroles": "modules/labroles"} {
		abs, err := filepath.Abs(src)
		if err != nil {
			t.Fatal(err)
		}
		if err := os.Symlink(abs, filepath.Join(w.modules, name)); err != nil {
			t.Fatal(err)
		}
	}
	// The level for hiera-services' data, as examples/hiera.yaml has it,
	// with the file here.
	w.hiera = filepath.Join(w.dir, "hiera.yaml")
	hiera := fmt.Sprintf("---\nversion: 5\ndefaults:\n  datadir: %s\n  data_hash: yaml_data\nhierarchy:\n"+
		"  - name: \"Consul catalog (orchestrate hiera-services)\"\n    path: \"%s/services.yaml\"\n"+
		"  - name: \"Common\"\n    path: \"common.yaml\"\n", w.data, w.data)
	if err := os.WriteFile(w.hiera, []byte(hiera), 0o644); err != nil {
		t.Fatal(err)
	}
	return w
}

// common writes the hiera data of the common level.
func (w *puppetWorld) common(t *testing.T, yaml string) {
	t.Helper()
	if err := os.WriteFile(filepath.Join(w.data, "common.yaml"), []byte("---\n"+yaml), 0o644); err != nil {
		t.Fatal(err)
	}
}

// apply runs puppet apply of code (with --noop when noop) and returns its
// exit code (--detailed-exitcodes) and output (testutil.PuppetApply).
func (w *puppetWorld) apply(t *testing.T, noop bool, code string) (int, string) {
	t.Helper()
	args := []string{"--modulepath", w.modules, "--hiera_config", w.hiera}
	if noop {
		args = append(args, "--noop")
	}
	return testutil.PuppetApply(t, append(args, "--execute", code)...)
}

// puppet parser validate and puppet-lint find nothing in the module.
func TestModuleValidates(t *testing.T) {
	puppet := testutil.RequirePuppet(t)
	lint := testutil.RequireTool(t, "puppet-lint", "puppet-lint")
	files, err := filepath.Glob("modules/labroles/manifests/*.pp")
	if err != nil {
		t.Fatal(err)
	}
	more, _ := filepath.Glob("modules/labroles/manifests/*/*.pp")
	files = append(files, more...)
	if len(files) != 12 {
		t.Fatalf("%d manifests, want 12 (init, service, node, config, four roles and their config): %v", len(files), files)
	}
	if out, err := exec.Command(puppet, append([]string{"parser", "validate"}, files...)...).CombinedOutput(); err != nil {
		t.Errorf("puppet parser validate: %v\n%s", err, out)
	}
	if out, err := exec.Command(lint, append([]string{"--fail-on-warnings"}, files...)...).CombinedOutput(); err != nil {
		t.Errorf("puppet-lint: %v\n%s", err, out)
	}
}

// Every role's consistent class compiles (puppet apply --noop) with its
// service, its registration and class orchestrate holding the role's
// dependencies and watches that run the role's own classes; every role's
// eventual class compiles once its dependencies are in the data and
// fails, naming what it waits for, while they are not.
func TestRolesCompile(t *testing.T) {
	w := newWorld(t)
	bin := testutil.BuildCommands(t, "service-blocker")
	w.common(t, "labroles::service_blocker_bin: "+filepath.Join(bin, "service-blocker")+"\n")
	for role, needs := range roles {
		t.Run(role, func(t *testing.T) {
			code, out := w.apply(t, true, "include labroles::"+role+"\n"+
				"notice(\"deps=${getvar('orchestrate::dependencies')}\")\n"+
				"notice(\"args=${getvar('orchestrate::watch_args')}\")\n")
			if (code != 0 && code != 2) || strings.Contains(out, "Error:") {
				t.Fatalf("puppet apply --noop include labroles::%s: exit %d\n%s", role, code, out)
			}
			for _, want := range []string{
				"Service[lab-" + role + "]", "File[/etc/consul.d/labroles-" + role + ".json]",
				"File[/etc/systemd/system/lab-" + role + ".service]", "Exec[orchestrate watch-config]",
				"args=[--role, " + role + ", --consistent-cmd, puppet apply --detailed-exitcodes --color=false --execute 'include labroles::" + role + "', " +
					"--eventual-cmd, puppet apply --detailed-exitcodes --color=false --execute 'include labroles::" + role + "::config', " +
					"--converge-arg=--validate-dir=/var/lib/labroles/validate, --converge-arg=--update-cmd=apt-get update",
			} {
				if !strings.Contains(out, want) {
					t.Errorf("include labroles::%s: no %q in\n%s", role, want, out)
				}
			}
			for _, n := range strings.Fields(needs) {
				svc, count, _ := strings.Cut(n, ":")
				if want := fmt.Sprintf("%s => {addressable => %s}", svc, count); !strings.Contains(out, want) {
					t.Errorf("class orchestrate's dependencies lack %q:\n%s", want, out)
				}
			}

			// The eventual step: short of its dependencies, it fails naming
			// them; with them in the data, it compiles.
			data := ""
			for _, n := range strings.Fields(needs) {
				svc, count, _ := strings.Cut(n, ":")
				c, _ := strconv.Atoi(count)
				var addrs []string
				for i := 0; i < c; i++ {
					addrs = append(addrs, fmt.Sprintf("'198.18.1.%d'", 10+i))
				}
				data += fmt.Sprintf("services::%s::address: [%s]\n", svc, strings.Join(addrs, ", "))
			}
			w.services(t, "")
			code, out = w.apply(t, true, "include labroles::"+role+"::config")
			if needs == "" {
				if code != 0 && code != 2 {
					t.Errorf("labroles::db::config: exit %d\n%s", code, out)
				}
			} else if code == 0 || code == 2 || !strings.Contains(out, "labroles::"+role+"::config: waiting for ") {
				t.Errorf("labroles::%s::config without its dependencies: exit %d, want a failure naming them:\n%s", role, code, out)
			}
			w.services(t, data)
			code, out = w.apply(t, true, "include labroles::"+role+"::config")
			if (code != 0 && code != 2) || strings.Contains(out, "Error:") {
				t.Errorf("labroles::%s::config with data %q: exit %d\n%s", role, data, code, out)
			}
		})
	}
}

// services writes the Consul catalog level's data.
func (w *puppetWorld) services(t *testing.T, yaml string) {
	t.Helper()
	if err := os.WriteFile(filepath.Join(w.data, "services.yaml"), []byte("---\n"+yaml), 0o644); err != nil {
		t.Fatal(err)
	}
}

// register adds a service instance to the agent (no check: passing), with
// its own address.
func register(t *testing.T, a *consultest.Agent, name, id, addr string, port int) {
	t.Helper()
	if err := a.Client.Agent().ServiceRegister(&api.AgentServiceRegistration{ID: id, Name: name, Address: addr, Port: port}); err != nil {
		t.Fatal(err)
	}
}

// The controller's eventual step against a real agent, with the data the
// real hiera-services renders from its catalog: pending (the catalog
// fails naming what it waits for, nothing written) while one database is
// registered, then, once the second database and the load balancer are,
// its service_blockers see them in the agent's DNS and config.json lists
// the addresses; the role's validation check passes on what it wrote.
func TestControllerConfigFromTheCatalog(t *testing.T) {
	a := consultest.Start(t, consultest.Options{})
	bin := testutil.BuildCommands(t, "hiera-services", "service-blocker")
	w := newWorld(t)
	base := filepath.Join(w.dir, "lab")
	w.common(t, fmt.Sprintf("labroles::base_dir: %s\nlabroles::validate_dir: %s/validate\nlabroles::blocker_timeout: 20\n"+
		"labroles::service_blocker_bin: %s\nlabroles::consul_dns: %s\n", base, base, filepath.Join(bin, "service-blocker"), a.DNSAddr))
	if err := os.MkdirAll(filepath.Join(base, "controller/www"), 0o755); err != nil {
		t.Fatal(err)
	}
	deps := filepath.Join(w.dir, "dependencies.yaml")
	if err := os.WriteFile(deps, []byte("db: {addressable: 2}\nlb: {addressable: 1}\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	render := func() {
		t.Helper()
		cmd := exec.Command(filepath.Join(bin, "hiera-services"), "--consul-addr", a.HTTPAddr, "--out", filepath.Join(w.data, "services.yaml"), "--dependencies", deps)
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("hiera-services: %v\n%s", err, out)
		}
	}
	config := filepath.Join(base, "controller/www/config.json")

	register(t, a, "db", "db1", "127.0.0.11", 8001)
	render()
	code, out := w.apply(t, false, "include labroles::controller::config")
	if code == 0 || code == 2 || !strings.Contains(out, "labroles::controller::config: waiting for db (1 of 2), lb (0 of 1)") {
		t.Fatalf("with one db: exit %d, want a failure naming db (1 of 2) and lb (0 of 1):\n%s", code, out)
	}
	if _, err := os.Stat(config); !os.IsNotExist(err) {
		t.Fatalf("config.json written while pending: %v", err)
	}

	register(t, a, "db", "db2", "127.0.0.12", 8001)
	register(t, a, "lb", "lb1", "127.0.0.13", 8002)
	render()
	code, out = w.apply(t, false, "include labroles::controller::config")
	if code != 2 || !strings.Contains(out, "Exec[service-blocker db]") && !strings.Contains(out, "File["+config+"]/ensure") {
		t.Fatalf("with two db and an lb: exit %d, want 2 (changes)\n%s", code, out)
	}
	b, err := os.ReadFile(config)
	if err != nil {
		t.Fatal(err)
	}
	var doc struct {
		Role     string
		Services map[string][]string
	}
	if err := json.Unmarshal(b, &doc); err != nil {
		t.Fatalf("config.json: %v\n%s", err, b)
	}
	if doc.Role != "controller" || strings.Join(doc.Services["db"], " ") != "127.0.0.11 127.0.0.12" || strings.Join(doc.Services["lb"], " ") != "127.0.0.13" {
		t.Errorf("config.json: %s", b)
	}
	// A second run changes nothing.
	if code, out := w.apply(t, false, "include labroles::controller::config"); code != 0 {
		t.Errorf("second apply: exit %d, want 0 (no change)\n%s", code, out)
	}

	// The validation check the role installs, on this config.
	validate(t, w, filepath.Join(base, "controller/www"), filepath.Join(w.dir, "fail-validation"))
}

// validate renders the role's validation check (labroles/validate.epp),
// serves www on a free port as the role's service does, and runs the
// check: it passes while the service answers with config.json, fails
// while the fail file exists, and fails when config.json is missing.
func validate(t *testing.T, w *puppetWorld, www, failFile string) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port := ln.Addr().(*net.TCPAddr).Port
	ln.Close()
	script := filepath.Join(w.dir, "validate-controller")
	values := fmt.Sprintf("{service => 'controller', port => %d, fail_file => '%s'}", port, failFile)
	out, err := exec.Command(w.puppet, "epp", "render", "--modulepath", w.modules, "--values", values, "labroles/validate.epp").Output()
	if err != nil {
		t.Fatalf("puppet epp render: %v", err)
	}
	if err := os.WriteFile(script, out, 0o755); err != nil {
		t.Fatal(err)
	}
	srv := exec.Command("python3", "-m", "http.server", fmt.Sprint(port), "--bind", "127.0.0.1", "--directory", www)
	if err := srv.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { srv.Process.Kill(); srv.Wait() }) //nolint:errcheck
	run := func() (string, error) {
		out, err := exec.Command(script).CombinedOutput()
		return string(out), err
	}
	testutil.Eventually(t, 10*time.Second, "the validation check to pass", func() bool { _, err := run(); return err == nil })
	if err := os.WriteFile(failFile, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	if out, err := run(); err == nil || !strings.Contains(out, "failing on purpose while "+failFile+" exists") {
		t.Errorf("with %s: %v %q, want a failure naming it", failFile, err, out)
	}
	os.Remove(failFile)
	if err := os.Rename(filepath.Join(www, "config.json"), filepath.Join(www, "old.json")); err != nil {
		t.Fatal(err)
	}
	if out, err := run(); err == nil || !strings.Contains(out, "config.json: HTTP Error 404") {
		t.Errorf("without config.json: %v %q, want a failure naming it", err, out)
	}
}
