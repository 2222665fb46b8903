package paths_test

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"testing"

	"gopkg.in/yaml.v3"

	"github.com/jiocloud/orchestrate/internal/orchestrate"
	"github.com/jiocloud/orchestrate/internal/paths"
	"github.com/jiocloud/orchestrate/internal/store/schema"
	"github.com/jiocloud/orchestrate/watch"
)

// root is the repository root, from this package's directory.
const root = "../.."

func read(t *testing.T, rel string) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(root, rel))
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// paramLine is one parameter of a Puppet class or define: TYPE $NAME =
// DEFAULT, (the default and the comma optional).
var paramLine = regexp.MustCompile(`^\s*\S.*?\s+\$([a-z_]+)\s*(?:=\s*(.*?))?\s*,?\s*$`)

// puppetParams parses the parameter defaults of `class NAME (` or
// `define NAME (` in a manifest: single-quoted strings as they are,
// double-quoted ones with ${param} interpolated from earlier parameters,
// anything else (numbers, undef, [], booleans) as written.
func puppetParams(t *testing.T, rel, decl string) map[string]string {
	t.Helper()
	src := read(t, rel)
	start := strings.Index(src, decl+" (\n")
	if start < 0 {
		t.Fatalf("%s: no %q", rel, decl)
	}
	block, _, ok := strings.Cut(src[start+len(decl)+3:], "\n) {")
	if !ok {
		t.Fatalf("%s: %s: no end of the parameter list", rel, decl)
	}
	params := map[string]string{}
	interp := regexp.MustCompile(`\$\{([a-z_]+)\}`)
	for _, line := range strings.Split(block, "\n") {
		m := paramLine.FindStringSubmatch(line)
		if m == nil {
			t.Fatalf("%s: %s: cannot parse parameter line %q", rel, decl, line)
		}
		v := strings.TrimSuffix(m[2], ",")
		switch {
		case strings.HasPrefix(v, "'"):
			v = strings.Trim(v, "'")
		case strings.HasPrefix(v, `"`):
			v = interp.ReplaceAllStringFunc(strings.Trim(v, `"`), func(s string) string {
				name := interp.FindStringSubmatch(s)[1]
				got, ok := params[name]
				if !ok {
					t.Fatalf("%s: %s: %q interpolates %s, not an earlier parameter", rel, decl, line, name)
				}
				return got
			})
		}
		params[m[1]] = v
	}
	return params
}

// Every default of the Puppet module that names a path, a binary, a user
// or an address of the package is the owner's.
func TestModuleDefaults(t *testing.T) {
	for _, tc := range []struct {
		file, decl string
		want       map[string]string
	}{
		{"puppet/orchestrate/manifests/init.pp", "class orchestrate", map[string]string{
			"config_dir":         paths.ConfigDir,
			"dependencies_file":  paths.Dependencies,
			"hiera_data_file":    paths.HieraData,
			"watch_config_file":  paths.WatchConfig,
			"token_file":         paths.NodeToken,
			"orchestrate_bin":    paths.Orchestrate,
			"hiera_services_bin": paths.HieraServices,
		}},
		{"puppet/orchestrate/manifests/reaper.pp", "class orchestrate::reaper", map[string]string{
			"config_file":  paths.ReaperConfig,
			"env_file":     paths.ReaperEnv,
			"token_file":   paths.ReaperToken,
			"clouds_file":  paths.Clouds,
			"reaper_bin":   paths.Reaper,
			"owner":        paths.User,
			"group":        paths.User,
			"service_name": strings.TrimSuffix(paths.ReaperUnit, ".service"),
			"consul_addr":  paths.ConsulHTTPAddr,
		}},
		{"puppet/orchestrate/manifests/service_blocker.pp", "define orchestrate::service_blocker", map[string]string{
			"binary": paths.ServiceBlocker,
			"dns":    paths.ConsulDNSAddr,
		}},
	} {
		got := puppetParams(t, tc.file, tc.decl)
		for name, want := range tc.want {
			if got[name] != want {
				t.Errorf("%s: $%s defaults to %q, want %q (internal/paths)", tc.decl, name, got[name], want)
			}
		}
		// A parameter added later with a path default is checked too.
		for name, v := range got {
			if _, listed := tc.want[name]; strings.HasPrefix(v, "/") && !listed {
				t.Errorf("%s: $%s defaults to the path %q, which this test does not compare with internal/paths: add it", tc.decl, name, v)
			}
		}
	}
}

// unitDirectives reads a systemd unit's Key=Value lines.
func unitDirectives(t *testing.T, rel string) map[string][]string {
	t.Helper()
	out := map[string][]string{}
	sc := bufio.NewScanner(strings.NewReader(read(t, rel)))
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		if k, v, ok := strings.Cut(line, "="); ok && !strings.HasPrefix(line, "#") {
			out[k] = append(out[k], v)
		}
	}
	return out
}

// flagAfter is the word after flag in a command line's words.
func flagAfter(words []string, flag string) string {
	for i, w := range words {
		if w == flag && i+1 < len(words) {
			return words[i+1]
		}
	}
	return ""
}

// The units run the installed binaries on the owner's files.
func TestUnits(t *testing.T) {
	hs := unitDirectives(t, "packaging/systemd/"+paths.HieraServicesUnit)
	exec := strings.Fields(strings.Join(hs["ExecStart"], ""))
	if len(exec) == 0 || exec[0] != paths.HieraServices || flagAfter(exec, "--out") != paths.HieraData || flagAfter(exec, "--dependencies") != paths.Dependencies {
		t.Errorf("%s ExecStart %q: want %s --out %s --dependencies %s", paths.HieraServicesUnit, exec, paths.HieraServices, paths.HieraData, paths.Dependencies)
	}
	if got := strings.Join(hs["EnvironmentFile"], " "); got != "-"+paths.HieraServicesEnv {
		t.Errorf("%s EnvironmentFile=%s, want -%s", paths.HieraServicesUnit, got, paths.HieraServicesEnv)
	}
	// StateDirectory= names directories under /var/lib.
	var state []string
	for _, d := range strings.Fields(strings.Join(hs["StateDirectory"], " ")) {
		state = append(state, filepath.Join("/var/lib", d))
	}
	if strings.Join(state, " ") != paths.StateDir+" "+paths.HieraDir {
		t.Errorf("%s StateDirectory makes %v, want %s and %s", paths.HieraServicesUnit, state, paths.StateDir, paths.HieraDir)
	}

	r := unitDirectives(t, "packaging/systemd/"+paths.ReaperUnit)
	exec = strings.Fields(strings.Join(r["ExecStart"], ""))
	if len(exec) == 0 || exec[0] != paths.Reaper || flagAfter(exec, "--config") != paths.ReaperConfig {
		t.Errorf("%s ExecStart %q: want %s --config %s", paths.ReaperUnit, exec, paths.Reaper, paths.ReaperConfig)
	}
	if got := strings.Join(r["EnvironmentFile"], " "); got != "-"+paths.ReaperEnv {
		t.Errorf("%s EnvironmentFile=%s, want -%s", paths.ReaperUnit, got, paths.ReaperEnv)
	}
	hp := unitDirectives(t, "packaging/systemd/"+paths.HieraPublisherUnit)
	exec = strings.Fields(strings.Join(hp["ExecStart"], ""))
	if len(exec) < 2 || exec[0] != paths.HieraServices || exec[1] != "--publish" {
		t.Errorf("%s ExecStart %q: want %s --publish", paths.HieraPublisherUnit, exec, paths.HieraServices)
	}
	if got := strings.Join(hp["EnvironmentFile"], " "); got != "-"+paths.HieraPublisherEnv {
		t.Errorf("%s EnvironmentFile=%s, want -%s", paths.HieraPublisherUnit, got, paths.HieraPublisherEnv)
	}
	// One connection per service: far more descriptors than systemd's
	// default soft limit of 1,024 (docs/hiera-services.md raises the
	// agent's limit to 8,192 for a catalog of about 8,000 services).
	if n, err := strconv.Atoi(strings.Join(hp["LimitNOFILE"], "")); err != nil || n < 16384 {
		t.Errorf("%s LimitNOFILE=%v, want at least 16384 (one connection per service)", paths.HieraPublisherUnit, hp["LimitNOFILE"])
	}
	// It writes no file: no state directory to own.
	if d := hp["StateDirectory"]; len(d) > 0 {
		t.Errorf("%s StateDirectory=%v, want none (the publisher writes no file)", paths.HieraPublisherUnit, d)
	}
	for unit, d := range map[string]map[string][]string{paths.HieraServicesUnit: hs, paths.ReaperUnit: r, paths.HieraPublisherUnit: hp} {
		if strings.Join(d["User"], " ") != paths.User || strings.Join(d["Group"], " ") != paths.User {
			t.Errorf("%s runs as %v:%v, want %s", unit, d["User"], d["Group"], paths.User)
		}
	}
	// The user's home is the state directory.
	for _, line := range strings.Split(read(t, "packaging/sysusers.conf"), "\n") {
		if f := strings.Fields(line); len(f) > 0 && f[0] == "u" {
			if len(f) < 7 || f[1] != paths.User || f[len(f)-2] != paths.StateDir {
				t.Errorf("sysusers.conf: %q, want user %s with home %s", line, paths.User, paths.StateDir)
			}
		}
	}
}

// nfpm.yaml puts every file where the owner says.
func TestPackageDestinations(t *testing.T) {
	var cfg struct {
		Contents []struct {
			Src, Dst, Type string
		} `yaml:"contents"`
	}
	if err := yaml.Unmarshal([]byte(read(t, "packaging/nfpm.yaml")), &cfg); err != nil {
		t.Fatalf("nfpm.yaml: %v", err)
	}
	want := map[string]string{
		"build/package/bin/hiera-services":              paths.HieraServices,
		"build/package/bin/orchestrate":                 paths.Orchestrate,
		"build/package/bin/reaper":                      paths.Reaper,
		"build/package/bin/service-blocker":             paths.ServiceBlocker,
		"packaging/systemd/" + paths.HieraServicesUnit:  paths.UnitDir + "/" + paths.HieraServicesUnit,
		"packaging/systemd/" + paths.ReaperUnit:         paths.UnitDir + "/" + paths.ReaperUnit,
		"packaging/systemd/" + paths.HieraPublisherUnit: paths.UnitDir + "/" + paths.HieraPublisherUnit,
		"packaging/etc/hiera-publisher.env":             paths.HieraPublisherEnv,
		"packaging/acl/hiera-publisher.hcl":             paths.ACLDir + "/hiera-publisher.hcl",
		"packaging/etc/dependencies.yaml":               paths.Dependencies,
		"packaging/etc/reaper.yaml":                     paths.ReaperConfig,
		"packaging/etc/reaper.env":                      paths.ReaperEnv,
		"packaging/etc/hiera-services.env":              paths.HieraServicesEnv,
		"packaging/acl/node.hcl":                        paths.ACLDir + "/node.hcl",
		"packaging/acl/reaper.hcl":                      paths.ACLDir + "/reaper.hcl",
		"packaging/acl/operator.hcl":                    paths.ACLDir + "/operator.hcl",
		"packaging/acl/hook-handler.hcl":                paths.ACLDir + "/hook-handler.hcl",
		"packaging/prometheus/orchestrate-alerts.yml":   paths.AlertRules,
		"packaging/grafana/orchestrate-reaper.json":     paths.Dashboard,
		"build/package/doc/":                            paths.DocDir + "/",
		"build/package/puppet/orchestrate/":             paths.PuppetModuleDir + "/",
		"packaging/sysusers.conf":                       "/usr/lib/sysusers.d/" + paths.User + ".conf",
		"packaging/lintian/orchestrate":                 "/usr/share/lintian/overrides/orchestrate",
		"build/package/man/*.1.gz":                      "/usr/share/man/man1/",
		"build/package/completion/bash/*":               paths.BashCompletionDir + "/",
		"build/package/completion/zsh/*":                paths.ZshCompletionDir + "/",
		"build/package/completion/fish/*":               paths.FishCompletionDir + "/",
	}
	seen := map[string]bool{}
	for _, c := range cfg.Contents {
		w, ok := want[c.Src]
		switch {
		case !ok:
			t.Errorf("nfpm.yaml installs %s as %s, which this test does not compare with internal/paths: add it", c.Src, c.Dst)
		case c.Dst != w:
			t.Errorf("nfpm.yaml installs %s as %s, want %s (internal/paths)", c.Src, c.Dst, w)
		}
		if strings.HasPrefix(c.Dst, paths.ConfigDir+"/") && c.Type != "config" {
			t.Errorf("nfpm.yaml: %s is not a conffile (type: config)", c.Dst)
		}
		seen[c.Src] = true
	}
	for src := range want {
		if !seen[src] {
			t.Errorf("nfpm.yaml does not install %s", src)
		}
	}
}

// envValues reads VAR=value lines of an environment file, commented out
// or not.
func envValues(t *testing.T, rel string) map[string]string {
	t.Helper()
	out := map[string]string{}
	re := regexp.MustCompile(`^#?([A-Z_]+)=(\S*)$`)
	for _, line := range strings.Split(read(t, rel), "\n") {
		if m := re.FindStringSubmatch(line); m != nil {
			out[m[1]] = m[2]
		}
	}
	return out
}

// The package's configuration files suggest the owner's values, and the
// ACL policies are written for the owner's prefix.
func TestPackagedConfiguration(t *testing.T) {
	for _, tc := range []struct {
		file string
		want map[string]string
	}{
		{"packaging/etc/hiera-services.env", map[string]string{"CONSUL_HTTP_ADDR": paths.ConsulHTTPAddr, "CONSUL_HTTP_TOKEN_FILE": paths.NodeToken}},
		{"packaging/etc/hiera-publisher.env", map[string]string{"CONSUL_HTTP_ADDR": paths.ConsulHTTPAddr, "CONSUL_HTTP_TOKEN_FILE": paths.HieraPublisherToken}},
		{"packaging/etc/reaper.env", map[string]string{"CONSUL_HTTP_ADDR": paths.ConsulHTTPAddr, "CONSUL_HTTP_TOKEN_FILE": paths.ReaperToken, "OS_CLIENT_CONFIG_FILE": paths.Clouds}},
	} {
		got := envValues(t, tc.file)
		for k, v := range tc.want {
			if got[k] != v {
				t.Errorf("%s: %s=%q, want %q", tc.file, k, got[k], v)
			}
		}
	}
	if !strings.Contains(read(t, "packaging/etc/reaper.yaml"), "\n#prefix: "+schema.DefaultPrefix+"\n") {
		t.Errorf("packaging/etc/reaper.yaml does not show the default prefix %s", schema.DefaultPrefix)
	}
	keyPrefix := regexp.MustCompile(`key_prefix "([^"]*)"`)
	for _, f := range []string{"node", "reaper", "operator", "hook-handler", "hiera-publisher"} {
		ms := keyPrefix.FindAllStringSubmatch(read(t, "packaging/acl/"+f+".hcl"), -1)
		if len(ms) == 0 {
			t.Errorf("%s.hcl: no key_prefix rule", f)
		}
		for _, m := range ms {
			if !strings.HasPrefix(m[1], schema.DefaultPrefix+"/") {
				t.Errorf("%s.hcl: key_prefix %q is not under the default prefix %s/", f, m[1], schema.DefaultPrefix)
			}
		}
	}
}

// The examples read and write the owner's files.
func TestExamples(t *testing.T) {
	var hiera struct {
		Hierarchy []struct{ Name, Path string } `yaml:"hierarchy"`
	}
	if err := yaml.Unmarshal([]byte(read(t, "examples/hiera.yaml")), &hiera); err != nil {
		t.Fatal(err)
	}
	found := false
	for _, l := range hiera.Hierarchy {
		if strings.Contains(l.Name, "hiera-services") {
			found = true
			if l.Path != paths.HieraData {
				t.Errorf("examples/hiera.yaml: level %q reads %s, want %s", l.Name, l.Path, paths.HieraData)
			}
		}
	}
	if !found {
		t.Errorf("examples/hiera.yaml has no level for hiera-services' data")
	}

	var ud struct {
		WriteFiles []struct{ Path, Content string } `yaml:"write_files"`
		Runcmd     [][]string                       `yaml:"runcmd"`
	}
	if err := yaml.Unmarshal([]byte(read(t, "examples/user-data.yaml")), &ud); err != nil {
		t.Fatal(err)
	}
	// The node token and the agent's token file come from the reaper's
	// part of the user data (internal/nodeid writes paths.NodeToken and
	// paths.AgentTokenFile); the example hands them on and reads them, in
	// runcmd or in the first-boot script runcmd runs.
	runcmd, _ := json.Marshal(ud.Runcmd)
	commands := string(runcmd)
	for _, f := range ud.WriteFiles {
		if strings.Contains(commands, f.Path) {
			commands += "\n" + f.Content
		}
	}
	for _, p := range []string{"--token-file " + paths.NodeToken, paths.AgentTokenFile} {
		if !strings.Contains(commands, p) {
			t.Errorf("examples/user-data.yaml: no command uses %s: %s", p, commands)
		}
	}

	var reaperYAML struct {
		Cloud struct {
			CloudsFile string `yaml:"clouds_file"`
		} `yaml:"cloud"`
	}
	if err := yaml.Unmarshal([]byte(read(t, "examples/reaper.yaml")), &reaperYAML); err != nil {
		t.Fatal(err)
	}
	if reaperYAML.Cloud.CloudsFile != paths.Clouds {
		t.Errorf("examples/reaper.yaml: clouds_file %s, want %s", reaperYAML.Cloud.CloudsFile, paths.Clouds)
	}
}

// A bare watch-config generates handlers that run the installed binaries,
// and converge reads the very file hiera-services writes.
func TestGeneratedWatches(t *testing.T) {
	var out, errb bytes.Buffer
	code := orchestrate.Run(context.Background(), []string{"watch-config", "--host", "node1",
		"--consistent-cmd", "puppet agent -t", "--eventual-cmd", "puppet apply eventual.pp"},
		orchestrate.IO{Stdin: strings.NewReader(""), Stdout: &out, Stderr: &errb})
	if code != 0 {
		t.Fatalf("watch-config: exit %d: %s", code, errb.String())
	}
	var cfg struct{ Watches []watch.Watch }
	if err := json.Unmarshal(out.Bytes(), &cfg); err != nil {
		t.Fatal(err)
	}
	for _, w := range cfg.Watches {
		switch w.Args[0] {
		case paths.HieraServices:
			if flagAfter(w.Args, "--out") != paths.HieraData {
				t.Errorf("%s watch: hiera-services writes %s, want %s", w.Type, flagAfter(w.Args, "--out"), paths.HieraData)
			}
			exec := flagAfter(w.Args, "--exec")
			if !strings.HasPrefix(exec, watch.ShellQuote(paths.Orchestrate)+" ") || !strings.Contains(exec, "'--hiera-data' "+watch.ShellQuote(paths.HieraData)) {
				t.Errorf("%s watch: --exec %s: want %s converge reading %s", w.Type, exec, paths.Orchestrate, paths.HieraData)
			}
		case paths.Orchestrate:
			if w.Args[1] == "heartbeat" {
				continue // reads no hiera data
			}
			if flagAfter(w.Args, "--hiera-data") != paths.HieraData {
				t.Errorf("%s watch: converge reads %q, want %s", w.Type, flagAfter(w.Args, "--hiera-data"), paths.HieraData)
			}
		default:
			t.Errorf("%s watch runs %s, not an installed binary", w.Type, w.Args[0])
		}
	}
}

// namespacePath finds absolute paths in the package's namespaces and the
// old spellings that must not come back.
var namespacePath = regexp.MustCompile(`(/usr/share/puppet/modules/orchestrate|/etc/orchestrate|/var/lib/orchestrate|/var/log/orchestrate|/run/lock/|/var/lock/|/usr/local/bin/|/etc/puppet/hiera|/etc/consul\.d|/usr/bin/(?:orchestrate|hiera-services|reaper|service-blocker)\b)[A-Za-z0-9_./-]*`)

// changedOn marks a paragraph of the documents' change notes ("*Changed on
// 2026-11-25:*"), which name the old paths on purpose.
var changedOn = regexp.MustCompile(`(?i)changed\s+on\s+\d{4}-\d{2}-\d{2}`)

// examplePaths are paths the documents and examples name that no part of
// orchestrate uses by default: files an operator writes.
var examplePaths = []string{
	paths.ConfigDir + "/user-data.yaml",      // examples/reaper.yaml boot.user_data_file
	paths.ConfigDir + "/web-user-data",       // the packaged reaper.yaml's commented role
	paths.ConfigDir + "/prometheus.password", // reaper/README.md web_config_file
	paths.ConfigDir + "/prometheus-ca.pem",
	paths.ConfigDir + "/swift-temp-url.key",        // reaper/README.md logs.temp_url_key_file
	paths.ConsulConfigDir + "/agent.json",          // examples/user-data.yaml
	paths.ConsulConfigDir + "/consul-agent-ca.pem", // examples/user-data.yaml
	paths.LogDir + "/first-boot.log",               // examples/user-data.yaml's first-boot script
}

// Every path of the package's namespaces that the documents, the module,
// the packaging and the Go code spell is one the owner knows: no stale
// /usr/local/bin, /etc/puppet/hiera/data or token under /etc/consul.d.
func TestNoOtherSpelling(t *testing.T) {
	known := map[string]bool{}
	for _, p := range append([]string{
		paths.Orchestrate, paths.HieraServices, paths.Reaper, paths.ServiceBlocker,
		paths.ConfigDir, paths.Dependencies, paths.NodeToken, paths.HieraServicesEnv,
		paths.HieraPublisherEnv, paths.HieraPublisherToken,
		paths.ReaperConfig, paths.ReaperEnv, paths.ReaperToken, paths.Clouds,
		paths.StateDir, paths.HieraDir, paths.HieraData, paths.LogDir,
		paths.ConvergeLock, paths.DrainLock, paths.ConsulConfigDir, paths.WatchConfig,
		paths.NodeIdentityKey, paths.AgentTokenFile, paths.NodePolicy, paths.PuppetModuleDir,
		paths.LogGrant, paths.LogSpool,
	}, examplePaths...) {
		known[p] = true
	}
	var files []string
	for _, glob := range []string{"*.md", "*/*.md", "puppet/orchestrate/*.md", "puppet/orchestrate/*/*.pp", "puppet/orchestrate/templates/*",
		"packaging/*/*", "packaging/nfpm.yaml", "packaging/sysusers.conf", "packaging/*.sh", "examples/*.yaml", "Makefile", "scripts/*"} {
		m, err := filepath.Glob(filepath.Join(root, glob))
		if err != nil {
			t.Fatal(err)
		}
		files = append(files, m...)
	}
	err := filepath.WalkDir(root, func(p string, d os.DirEntry, err error) error {
		switch {
		case err != nil:
			return err
		case d.IsDir() && (d.Name() == ".git" || d.Name() == "consul" && strings.HasSuffix(filepath.Dir(p), "consultest")):
			return filepath.SkipDir
		case !d.IsDir() && strings.HasSuffix(p, ".go") && !strings.HasSuffix(p, "_test.go") && filepath.Base(p) != "paths.go":
			files = append(files, p)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	bad := map[string][]string{}
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			continue // a directory matched by a glob
		}
		// A paragraph that says what changed may name the old path.
		for _, para := range strings.Split(string(b), "\n\n") {
			if changedOn.MatchString(para) {
				continue
			}
			for _, m := range namespacePath.FindAllString(para, -1) {
				p := strings.TrimRight(m, "./")
				if p == "" || known[p] || strings.HasPrefix(p, paths.DocDir) || strings.HasPrefix(p, paths.PuppetModuleDir+"/") {
					continue
				}
				rel, _ := filepath.Rel(root, f)
				bad[p] = append(bad[p], rel)
			}
		}
	}
	var msgs []string
	for p, where := range bad {
		sort.Strings(where)
		msgs = append(msgs, p+" in "+strings.Join(where, ", "))
	}
	sort.Strings(msgs)
	for _, m := range msgs {
		t.Errorf("a path internal/paths does not know: %s", m)
	}
}
