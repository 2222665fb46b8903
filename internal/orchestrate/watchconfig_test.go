package orchestrate

import (
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/consul/api"

	"github.com/jiocloud/orchestrate/internal/consultest"
	"github.com/jiocloud/orchestrate/internal/testutil"
	"github.com/jiocloud/orchestrate/watch"
)

func TestWatchConfigStanza(t *testing.T) {
	deps := filepath.Join(t.TempDir(), "deps.yaml")
	if err := os.WriteFile(deps, []byte("mysql: {functional: 2}\nkeystone: {addressable: 1}\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	hsArgs := []string{"/opt/bin/hiera-services", "--out", "/var/lib/hiera/services.yaml",
		"--dependencies", deps, "--exec", "puppet agent --onetime --no-daemonize",
		"--token-file", "/etc/consul.d/hiera.token", "--service-regex=^os-", "--log-format=json"}
	tests := []struct {
		name string
		args []string
		want []watch.Watch
	}{
		// A bare watch-config runs the binaries where the package installs
		// them and writes the file the package's hiera level reads.
		{name: "defaults", want: []watch.Watch{{Type: "services", Args: []string{
			"/usr/bin/hiera-services", "--out", "/var/lib/orchestrate/hiera/services.yaml"}},
			{Type: "key", Key: "orchestrate/current_version", Args: []string{"/usr/bin/orchestrate", "pending-update", "--handler"}}}},
		{name: "converge", args: []string{"--prefix", "cloud1", "--puppet-cmd", "puppet apply --detailed-exitcodes /etc/puppet/site.pp",
			"--converge-arg=--validate-dir=/usr/lib/jiocloud/tests", "--handler-token-file", "/etc/orchestrate/node.token"},
			want: []watch.Watch{{Type: "services", Args: []string{
				"/usr/bin/hiera-services", "--out", "/var/lib/orchestrate/hiera/services.yaml", "--token-file", "/etc/orchestrate/node.token"}},
				{Type: "key", Key: "cloud1/current_version", Args: []string{"/usr/bin/orchestrate", "converge", "--handler",
					"--puppet-cmd", "puppet apply --detailed-exitcodes /etc/puppet/site.pp",
					"--hiera-data", "/var/lib/orchestrate/hiera/services.yaml", "--prefix", "cloud1",
					"--token-file", "/etc/orchestrate/node.token", "--validate-dir=/usr/lib/jiocloud/tests"}}}},
		{name: "two steps", args: []string{"--consistent-cmd", "puppet apply /etc/puppet/consistent.pp", "--eventual-cmd", "puppet apply '/etc/puppet/eventual.pp'",
			"--handler-token-file", "/etc/orchestrate/node.token", "--converge-arg=--validate-dir=/usr/lib/jiocloud/tests"},
			// hiera-services runs the eventual step alone, as one shell
			// command line whose words are quoted.
			want: []watch.Watch{{Type: "services", Args: []string{
				"/usr/bin/hiera-services", "--out", "/var/lib/orchestrate/hiera/services.yaml", "--exec",
				`'/usr/bin/orchestrate' 'converge' '--handler' '--eventual-only' '--consistent-cmd' 'puppet apply /etc/puppet/consistent.pp' ` +
					`'--eventual-cmd' 'puppet apply '\''/etc/puppet/eventual.pp'\''' '--hiera-data' '/var/lib/orchestrate/hiera/services.yaml' '--token-file' '/etc/orchestrate/node.token' '--validate-dir=/usr/lib/jiocloud/tests'`,
				"--token-file", "/etc/orchestrate/node.token"}},
				{Type: "key", Key: "orchestrate/current_version", Args: []string{"/usr/bin/orchestrate", "converge", "--handler",
					"--consistent-cmd", "puppet apply /etc/puppet/consistent.pp", "--eventual-cmd", "puppet apply '/etc/puppet/eventual.pp'",
					"--hiera-data", "/var/lib/orchestrate/hiera/services.yaml", "--token-file", "/etc/orchestrate/node.token", "--validate-dir=/usr/lib/jiocloud/tests"}}}},
		{name: "role", args: []string{"--consistent-cmd", "puppet apply /etc/puppet/consistent.pp", "--role", "compute"},
			// The role's rollout watch runs converge for a host waiting
			// for a slot only (--slot-wake), and so does its doorbell's.
			want: []watch.Watch{{Type: "services", Args: []string{
				"/usr/bin/hiera-services", "--out", "/var/lib/orchestrate/hiera/services.yaml"}},
				{Type: "key", Key: "orchestrate/current_version", Args: []string{"/usr/bin/orchestrate", "converge", "--handler",
					"--consistent-cmd", "puppet apply /etc/puppet/consistent.pp", "--role", "compute", "--hiera-data", "/var/lib/orchestrate/hiera/services.yaml"}},
				{Type: "keyprefix", Prefix: "orchestrate/rollout/compute/", Args: []string{"/usr/bin/orchestrate", "converge", "--handler", "--slot-wake",
					"--consistent-cmd", "puppet apply /etc/puppet/consistent.pp", "--role", "compute", "--hiera-data", "/var/lib/orchestrate/hiera/services.yaml"}},
				// The doorbell a host of a role compute follows rings: the
				// same handler.
				{Type: "key", Key: "orchestrate/wake/compute", Args: []string{"/usr/bin/orchestrate", "converge", "--handler", "--slot-wake",
					"--consistent-cmd", "puppet apply /etc/puppet/consistent.pp", "--role", "compute", "--hiera-data", "/var/lib/orchestrate/hiera/services.yaml"}}}},
		{name: "everything", args: []string{"--hiera-services", "/opt/bin/hiera-services", "--out", "/var/lib/hiera/services.yaml",
			"--dependencies", deps, "--exec", "puppet agent --onetime --no-daemonize", "--watch-service", "glance", "--watch-service", "mysql",
			"--handler-token-file", "/etc/consul.d/hiera.token", "--hiera-arg=--service-regex=^os-", "--hiera-arg", "--log-format=json"},
			// One service watch per dependency, sorted, then per
			// --watch-service, each service once.
			want: []watch.Watch{{Type: "services", Args: hsArgs},
				{Type: "service", Service: "keystone", Args: hsArgs},
				{Type: "service", Service: "mysql", Args: hsArgs},
				{Type: "service", Service: "glance", Args: hsArgs},
				{Type: "key", Key: "orchestrate/current_version", Args: []string{"/usr/bin/orchestrate", "pending-update", "--handler",
					"--token-file", "/etc/consul.d/hiera.token"}}}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			r := watchConfig(t, append(tc.args, "--host", "web1")...)
			mustCode(t, r, 0, "watch-config")
			// Every node answers the reaper's heartbeat, last, with the
			// handlers' prefix and token file.
			beat := watch.Watch{Type: "key", Key: "orchestrate/reaper/heartbeat", Args: []string{"/usr/bin/orchestrate", "heartbeat", "--handler", "--host", "web1"}}
			for i, a := range tc.args {
				switch {
				case a == "--prefix":
					beat.Key = tc.args[i+1] + "/reaper/heartbeat"
					beat.Args = append(beat.Args, "--prefix", tc.args[i+1])
				case a == "--handler-token-file":
					beat.Args = append(beat.Args, "--token-file", tc.args[i+1])
				}
			}
			tc.want = append(tc.want, beat)
			var got struct {
				Watches []watch.Watch `json:"watches"`
			}
			dec := json.NewDecoder(strings.NewReader(r.stdout))
			dec.DisallowUnknownFields()
			if err := dec.Decode(&got); err != nil {
				t.Fatalf("output is not the watches JSON: %v\n%s", err, r.stdout)
			}
			if !reflect.DeepEqual(got.Watches, tc.want) {
				t.Fatalf("watches = %+v, want %+v", got.Watches, tc.want)
			}
		})
	}
}

func TestWatchConfigBadFlags(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--out", "services.yaml"}, "--out \"services.yaml\": want an absolute path"},
		{[]string{"--hiera-services", "bin/hiera-services"}, "--hiera-services"},
		{[]string{"--hiera-arg=--token=s3cret"}, "use --handler-token-file"},
		{[]string{"--hiera-arg", "--watch"}, "--watch"},
		{[]string{"extra"}, "got 1 arguments"},
		{[]string{"--converge-arg=--force"}, "needs --consistent-cmd or --puppet-cmd"},
		{[]string{"--puppet-cmd", "true", "--consistent-cmd", "true"}, "exclude each other"},
		{[]string{"--eventual-cmd", "true"}, "--eventual-cmd needs --consistent-cmd"},
		{[]string{"--consistent-cmd", "true", "--eventual-cmd", "true", "--exec", "x"}, "--eventual-cmd and --exec exclude each other"},
		{[]string{"--consistent-cmd", "true", "--eventual-cmd", "puppet apply --token s3cret"}, "--eventual-cmd holds a Consul token"},
		{[]string{"--puppet-cmd", "true", "--converge-arg=--token=s3cret"}, "use --handler-token-file"},
		{[]string{"--orchestrate", "orchestrate"}, "--orchestrate"},
		{[]string{"--dependencies", "/nonexistent/deps.yaml"}, "dependencies file /nonexistent/deps.yaml"},
		{[]string{"--watch-service", "a.b"}, "--watch-service"},
		{[]string{"--role", "compute"}, "--role needs --consistent-cmd or --puppet-cmd"},
		{[]string{"--puppet-cmd", "true", "--role", "a/b"}, "--role \"a/b\" contains a slash"},
		// converge must read the file hiera-services writes, and
		// hiera-services render the dependencies the watches follow.
		{[]string{"--puppet-cmd", "true", "--converge-arg=--hiera-data=/etc/puppet/hiera/data/services.yaml"}, `--converge-arg --hiera-data "/etc/puppet/hiera/data/services.yaml": watch-config gives the handlers its own --out ("/var/lib/orchestrate/hiera/services.yaml")`},
		{[]string{"--puppet-cmd", "true", "--converge-arg", "--hiera-data", "--converge-arg", "/x.yaml"}, `--converge-arg --hiera-data "/x.yaml"`},
		{[]string{"--hiera-arg=--out=/x.yaml"}, `--hiera-arg --out "/x.yaml"`},
		{[]string{"--hiera-arg=-o/x.yaml"}, `--hiera-arg --out "/x.yaml"`},
		{[]string{"--hiera-arg", "-o", "--hiera-arg", "/x.yaml"}, `--hiera-arg --out "/x.yaml"`},
		{[]string{"--hiera-arg=--dependencies=/x.yaml"}, `--hiera-arg --dependencies "/x.yaml": watch-config gives the handlers its own --dependencies ("")`},
	} {
		r := watchConfig(t, tc.args...)
		mustCode(t, r, 2, strings.Join(tc.args, " "))
		if !strings.Contains(r.stderr, tc.want) {
			t.Errorf("%v: stderr %q does not contain %q", tc.args, r.stderr, tc.want)
		}
		if strings.Contains(r.stderr, "s3cret") {
			t.Errorf("token echoed: %s", r.stderr)
		}
		if r.stdout != "" {
			t.Errorf("%v: printed %q", tc.args, r.stdout)
		}
	}
	// The same value again changes nothing.
	mustCode(t, watchConfig(t, "--out", "/x.yaml", "--puppet-cmd", "true", "--converge-arg=--hiera-data=/x.yaml", "--hiera-arg=--out=/x.yaml"), 0, "the same file twice")
}

// TestWatchConfigRunsHieraServices loads the generated stanza into a real
// agent and checks the agent runs the real hiera-services binary on a
// catalog change, which writes the new service into the file.
func TestWatchConfigRunsHieraServices(t *testing.T) {
	consultest.RequireBinary(t)
	dir := t.TempDir()
	bin := filepath.Join(dir, "hiera-services")
	build := exec.Command("go", "build", "-o", bin, "github.com/jiocloud/orchestrate/cmd/hiera-services")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("go build hiera-services: %v\n%s", err, out)
	}
	// The agent's HTTP port is known only once it runs, so the watch runs a
	// wrapper that the test fills in afterwards with --consul-addr.
	wrapper := filepath.Join(dir, "hiera-services-wrapper")
	if err := os.WriteFile(wrapper, []byte("#!/bin/sh\nexit 0\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	out := filepath.Join(dir, "hiera", "services.yaml")
	r := watchConfig(t, "--hiera-services", wrapper, "--out", out)
	mustCode(t, r, 0, "watch-config")

	a := consultest.Start(t, consultest.Options{HCL: r.stdout})
	script := "#!/bin/sh\nexec " + bin + " --consul-addr " + a.HTTPAddr + " \"$@\"\n"
	if err := os.WriteFile(wrapper+".new", []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(wrapper+".new", wrapper); err != nil {
		t.Fatal(err)
	}
	_, err := a.Client.Catalog().Register(&api.CatalogRegistration{Node: "db1", Address: "10.0.0.5",
		Service: &api.AgentService{ID: "mysql", Service: "mysql", Port: 3306}}, nil)
	if err != nil {
		t.Fatal(err)
	}
	testutil.Eventually(t, 30*time.Second, "the agent's watch rendering mysql into "+out, func() bool {
		data, _ := os.ReadFile(out)
		return strings.Contains(string(data), `"services::mysql::address": ["10.0.0.5"]`)
	}, func() string {
		data, _ := os.ReadFile(out)
		log, _ := os.ReadFile(a.LogPath)
		return "file:\n" + string(data) + "\nagent log:\n" + string(log)
	})
}

// TestWatchConfigConvergesOnNewVersion loads the generated stanza into a
// real agent: a new current_version makes the agent run the real
// orchestrate converge, which brings the node to that version.
func TestWatchConfigConvergesOnNewVersion(t *testing.T) {
	consultest.RequireBinary(t)
	dir := t.TempDir()
	bin := filepath.Join(dir, "orchestrate")
	build := exec.Command("go", "build", "-o", bin, "github.com/jiocloud/orchestrate/cmd/orchestrate")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("go build orchestrate: %v\n%s", err, out)
	}
	noop := filepath.Join(dir, "noop")
	wrapper := filepath.Join(dir, "orchestrate-wrapper")
	for _, f := range []string{noop, wrapper} {
		if err := os.WriteFile(f, []byte("#!/bin/sh\nexit 0\n"), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	ran := filepath.Join(dir, "puppet-ran")
	r := watchConfig(t, "--hiera-services", noop, "--orchestrate", wrapper,
		"--puppet-cmd", "echo $ORCHESTRATE_VERSION >> "+ran,
		"--converge-arg=--log-dir="+filepath.Join(dir, "log"), "--converge-arg=--lock-file="+filepath.Join(dir, "converge.lock"),
		"--out", filepath.Join(dir, "services.yaml"))
	mustCode(t, r, 0, "watch-config")
	a := consultest.Start(t, consultest.Options{NodeName: "node7", HCL: r.stdout})
	script := "#!/bin/sh\nexec " + bin + " \"$@\" --consul-addr " + a.HTTPAddr + "\n"
	if err := os.WriteFile(wrapper+".new", []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(wrapper+".new", wrapper); err != nil {
		t.Fatal(err)
	}
	mustCode(t, cli(t, a, "", "trigger-update", "v2"), 0, "trigger-update")
	testutil.Eventually(t, 30*time.Second, "the agent's current_version watch converging node7 to v2", func() bool {
		return cli(t, a, "", "verify-hosts", "v2", "node7").code == 0
	}, func() string { log, _ := os.ReadFile(a.LogPath); return "agent log:\n" + string(log) })
	if data, err := os.ReadFile(ran); err != nil || !strings.Contains(string(data), "v2") {
		t.Fatalf("puppet stand-in did not run for v2: %q %v", data, err)
	}
}

// TestWatchConfigRefusesTokenInCommands: a token written into a command
// string (--exec, --puppet-cmd) or inside a --hiera-arg/--converge-arg value
// would land in the generated watch's arguments, in every process listing
// and in the agent's config file. watch-config refuses it, exit 2, naming
// the flag without echoing the token.
func TestWatchConfigRefusesTokenInCommands(t *testing.T) {
	for _, tc := range []struct {
		args []string
		flag string
	}{
		{[]string{"--exec", "orchestrate converge --force --token s3cret"}, "--exec"},
		{[]string{"--exec", "orchestrate converge --token=s3cret --force"}, "--exec"},
		{[]string{"--exec", "CONSUL_HTTP_TOKEN=s3cret orchestrate converge --force"}, "--exec"},
		{[]string{"--puppet-cmd", "CONSUL_HTTP_TOKEN=s3cret puppet apply /etc/puppet/site.pp"}, "--puppet-cmd"},
		{[]string{"--hiera-arg=--exec=orchestrate converge --force --token=s3cret"}, "--hiera-arg"},
		{[]string{"--puppet-cmd", "true", "--converge-arg=--validate-cmd=consul members -token=s3cret"}, "--converge-arg"},
		{[]string{"--puppet-cmd", "true", "--converge-arg=--validate-cmd=curl -H 'X-Consul-Token: s3cret' http://127.0.0.1:8500/v1/agent/self"}, "--converge-arg"},
	} {
		r := watchConfig(t, tc.args...)
		mustCode(t, r, 2, strings.Join(tc.args, " "))
		if !strings.Contains(r.stderr, tc.flag) || !strings.Contains(r.stderr, "--handler-token-file") {
			t.Errorf("%v: stderr %q does not name %s and --handler-token-file", tc.args, r.stderr, tc.flag)
		}
		if strings.Contains(r.stderr+r.stdout, "s3cret") {
			t.Errorf("%v: token echoed or printed: %s%s", tc.args, r.stdout, r.stderr)
		}
	}
	// A token file is fine, in any spelling.
	r := watchConfig(t, "--exec", "orchestrate converge --force --token-file /etc/consul.d/node.token",
		"--puppet-cmd", "CONSUL_HTTP_TOKEN_FILE=/etc/consul.d/node.token puppet apply /etc/puppet/site.pp",
		"--converge-arg=--validate-cmd=consul members -token-file=/etc/consul.d/node.token")
	mustCode(t, r, 0, "token files")
}

// TestWatchConfigTwoSteps: the generated watches, loaded into a real agent,
// run the two steps of converge with the real binaries: a new version runs
// the consistent step once and the eventual one, which is pending while
// keystone (a dependency) has no instance; keystone registering makes the
// agent's watch run hiera-services, which runs the eventual step alone, and
// the host converges, the consistent step still run once.
func TestWatchConfigTwoSteps(t *testing.T) {
	dir := t.TempDir()
	stepDir := filepath.Join(dir, "steps")
	if err := os.MkdirAll(stepDir, 0o755); err != nil {
		t.Fatal(err)
	}
	step, _ := filepath.Abs("testdata/converge/step.sh")
	deps := filepath.Join(dir, "deps.yaml")
	out := filepath.Join(dir, "services.yaml")
	if err := os.WriteFile(deps, []byte("keystone: {addressable: 1}\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	// The eventual stand-in fails (as Puppet code needing keystone would)
	// until the rendered data holds an address for it.
	eventual := filepath.Join(dir, "eventual.sh")
	script := "#!/bin/sh\n" + step + " eventual\ngrep -q '\"services::keystone::address\": \\[\"' " + out + " || exit 6\n"
	if err := os.WriteFile(eventual, []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	r := watchConfig(t, "--hiera-services", builtBinary(t, "hiera-services"), "--orchestrate", builtBinary(t, "orchestrate"),
		"--out", out, "--dependencies", deps,
		"--consistent-cmd", step+" consistent", "--eventual-cmd", eventual,
		"--converge-arg=--log-dir="+filepath.Join(dir, "log"), "--converge-arg=--lock-file="+filepath.Join(dir, "converge.lock"),
		"--converge-arg=--hiera-data="+out, "--converge-arg=--no-checks")
	mustCode(t, r, 0, "watch-config")
	a := consultest.Start(t, consultest.Options{NodeName: "node8", HCL: r.stdout, HandlerEnv: true, Env: []string{"STEP_DIR=" + stepDir}})
	count := func(name string) int {
		data, _ := os.ReadFile(filepath.Join(stepDir, "ran"))
		return strings.Count(string(data), name+" ")
	}
	agentLog := func() string { log, _ := os.ReadFile(a.LogPath); return string(log) }
	mustCode(t, cli(t, a, "", "trigger-update", "v2"), 0, "trigger-update")
	testutil.Eventually(t, 30*time.Second, "the eventual step pending on keystone", func() bool {
		snap, err := mustStore(t, a).Snapshot(context.Background())
		return err == nil && snap.Hosts["node8"] != nil && snap.Hosts["node8"].Status["eventual"].State == "pending"
	}, agentLog)
	if _, err := a.Client.Catalog().Register(&api.CatalogRegistration{Node: "ks1", Address: "10.0.0.9",
		Service: &api.AgentService{ID: "keystone", Service: "keystone", Port: 5000}}, nil); err != nil {
		t.Fatal(err)
	}
	testutil.Eventually(t, 30*time.Second, "node8 converged to v2 through the data-change watch", func() bool {
		return cli(t, a, "", "verify-hosts", "v2", "node8").code == 0
	}, agentLog)
	if c := count("consistent"); c != 1 {
		t.Fatalf("the consistent step ran %d times, want 1", c)
	}
	if ev := count("eventual"); ev < 2 {
		t.Fatalf("the eventual step ran %d times, want at least 2 (pending, then converged)", ev)
	}
}

// TestWatchConfigReads: --reads reaches the hiera-services handlers as
// one --reads= argument holding it and every --watch-service, sorted;
// given empty, as --reads= (the node reads only its dependencies);
// without it, the handlers carry none and keep the whole-file trigger.
func TestWatchConfigReads(t *testing.T) {
	hsArgsOf := func(args ...string) []string {
		t.Helper()
		ws := generatedWatches(t, args...)
		if ws[0].Type != "services" {
			t.Fatalf("first watch %+v", ws[0])
		}
		var watched []string
		for _, w := range ws {
			if w.Type == "service" {
				watched = append(watched, w.Service)
			}
		}
		// Each service read gets a watch of its own, as a dependency.
		for _, a := range ws[0].Args {
			if list, ok := strings.CutPrefix(a, "--reads="); ok && list != "" {
				for _, s := range strings.Split(list, ",") {
					if !slices.Contains(watched, s) {
						t.Errorf("%s is read but has no service watch: %v", s, watched)
					}
				}
			}
		}
		return ws[0].Args
	}
	base := []string{"--hiera-services", "/opt/hiera-services", "--orchestrate", "/opt/orchestrate", "--consistent-cmd", "true", "--eventual-cmd", "true"}
	for _, tc := range []struct {
		name string
		args []string
		want string // the --reads argument; "" none
	}{
		{"none", nil, ""},
		{"empty", []string{"--reads="}, "--reads="},
		{"list and watched services", []string{"--reads", "memcached,keystone", "--reads", "glance", "--watch-service", "rabbitmq", "--watch-service", "glance"}, "--reads=glance,keystone,memcached,rabbitmq"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			args := hsArgsOf(append(slices.Clone(base), tc.args...)...)
			var got []string
			for _, a := range args {
				if strings.HasPrefix(a, "--reads") {
					got = append(got, a)
				}
			}
			if (tc.want == "" && len(got) != 0) || (tc.want != "" && !reflect.DeepEqual(got, []string{tc.want})) {
				t.Fatalf("hiera-services arguments %q, want the one --reads argument %q", args, tc.want)
			}
		})
	}
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--reads", "a b", "--exec", "true"}, "--reads: service name \"a b\""},
		{[]string{"--reads", "a,,b", "--exec", "true"}, "--reads: service name is empty"},
		{[]string{"--reads", `%{lookup('x')}`, "--exec", "true"}, "--reads"},
		{[]string{"--reads", "mysql"}, "--reads needs --exec or --eventual-cmd"},
		{[]string{"--reads="}, "--reads needs --exec or --eventual-cmd"},
	} {
		r := watchConfig(t, tc.args...)
		mustCode(t, r, 2, strings.Join(tc.args, " "))
		if !strings.Contains(r.stderr, tc.want) || r.stdout != "" {
			t.Errorf("%v: stderr %q (want %q), stdout %q", tc.args, r.stderr, tc.want, r.stdout)
		}
	}
}
