package packaging_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hashicorp/consul/api"

	"github.com/jiocloud/orchestrate/internal/consultest"
	"github.com/jiocloud/orchestrate/internal/store"
	"github.com/jiocloud/orchestrate/internal/testutil"
)

// mgmtToken is the ACL agent's management token: it only sets the scene
// (policies, tokens, registrations); every binary runs with a token made
// from a shipped policy.
const mgmtToken = "3f1d2c4b-5a69-4e7f-8a1b-2c3d4e5f6a7b"

// aclWorld is an ACL-enabled agent (default deny, as production runs) with
// a web service on two nodes.
type aclWorld struct {
	agent *consultest.Agent
	admin *api.Client
	bin   string
}

// newACLWorld is an aclWorld on a default agent.
func newACLWorld(t *testing.T) *aclWorld {
	t.Helper()
	return newACLWorldWith(t, consultest.Options{})
}

// newACLWorldWith is newACLWorld on an agent shaped by opts (ACLs added).
func newACLWorldWith(t *testing.T, opts consultest.Options) *aclWorld {
	t.Helper()
	opts.ACLToken = mgmtToken
	a := consultest.Start(t, opts)
	w := &aclWorld{agent: a, admin: a.Client, bin: testutil.BuildCommands(t, "orchestrate", "hiera-services", "service-blocker")}
	for i, node := range []string{"web1", "web2"} {
		_, err := w.admin.Catalog().Register(&api.CatalogRegistration{
			Node: node, Address: fmt.Sprintf("10.0.0.%d", i+1),
			Service: &api.AgentService{ID: "web", Service: "web", Port: 80},
			Check:   &api.AgentCheck{CheckID: "web", Name: "web", Status: api.HealthPassing, ServiceID: "web"},
		}, nil)
		if err != nil {
			t.Fatal(err)
		}
	}
	// Consul DNS answers with the agent's DNS token, not the caller's
	// (docs/acl.md, "The agent's own tokens"): read of the catalog, as Consul's
	// builtin/dns templated policy grants.
	dns := w.token(t, "node_prefix \"\" { policy = \"read\" }\nservice_prefix \"\" { policy = \"read\" }\n")
	secret, err := os.ReadFile(dns)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := w.admin.Agent().UpdateDNSToken(strings.TrimSpace(string(secret)), nil); err != nil {
		t.Fatal(err)
	}
	return w
}

// policyText is the shipped policy file name, with the rule whose first
// line is drop removed ("" keeps every rule).
func policyText(t *testing.T, name, drop string) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("acl", name))
	if err != nil {
		t.Fatal(err)
	}
	return dropRule(t, string(b), drop)
}

// dropRule is the policy text with the rule whose first line is drop
// removed ("" keeps every rule).
func dropRule(t *testing.T, text, drop string) string {
	t.Helper()
	if drop == "" {
		return text
	}
	// A rule is its first line up to the closing "}" (or the one line of
	// an "x = y" rule).
	re := regexp.MustCompile(`(?ms)^` + regexp.QuoteMeta(drop) + `(\s*\{.*?^\}|\s*$)`)
	if !re.MatchString(text) {
		t.Fatalf("the policy has no rule %q:\n%s", drop, text)
	}
	return re.ReplaceAllString(text, "")
}

// token makes a policy from rules and a token holding exactly it, and
// writes the token to a file only the owner reads.
func (w *aclWorld) token(t *testing.T, rules string) string {
	t.Helper()
	pol, _, err := w.admin.ACL().PolicyCreate(&api.ACLPolicy{Name: fmt.Sprintf("p%d", time.Now().UnixNano()), Rules: rules}, nil)
	if err != nil {
		t.Fatalf("policy create: %v\n%s", err, rules)
	}
	tok, _, err := w.admin.ACL().TokenCreate(&api.ACLToken{Policies: []*api.ACLTokenPolicyLink{{ID: pol.ID}}}, nil)
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), "token")
	if err := os.WriteFile(path, []byte(tok.SecretID+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

// result is one run of a binary.
type result struct {
	code           int
	stdout, stderr string
}

// run runs a binary with the token in tokenFile and nothing else: no
// management token in its environment.
func (w *aclWorld) run(t *testing.T, tokenFile, name string, args ...string) result {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, filepath.Join(w.bin, name), args...)
	// The agent's address and nothing of the management token.
	for _, kv := range w.agent.Env() {
		if !strings.HasPrefix(kv, "CONSUL_HTTP_TOKEN=") && !strings.HasPrefix(kv, "ORCHESTRATE_") {
			cmd.Env = append(cmd.Env, kv)
		}
	}
	cmd.Env = append(cmd.Env, "CONSUL_HTTP_TOKEN_FILE="+tokenFile)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	r := result{stdout: stdout.String(), stderr: stderr.String()}
	var ee *exec.ExitError
	switch {
	case errors.As(err, &ee):
		r.code = ee.ExitCode()
	case err != nil:
		t.Fatalf("%s: %v", name, err)
	}
	return r
}

// must checks r's exit code and, for a refusal, that stderr names what was
// refused; the token itself never shows.
func must(t *testing.T, what string, r result, code int, refused string) {
	t.Helper()
	if r.code != code {
		t.Errorf("%s: exit %d, want %d\nstdout: %s\nstderr: %s", what, r.code, code, r.stdout, r.stderr)
		return
	}
	if refused != "" && !strings.Contains(r.stderr, refused) {
		t.Errorf("%s: stderr does not name %q:\n%s", what, refused, r.stderr)
	}
}

// sharedRole is the name of the role every node's token holds: the
// shipped node.hcl (read the prefix and the catalog, ring doorbells).
const sharedRole = "orchestrate-node"

// tokenOpts shapes a node's token for a test: drop takes the rule whose
// first line it is out of node.hcl, hostDrop out of the host's policy;
// noIdentity leaves out the node identity (which alone grants read of
// every service, and write on the node itself).
type tokenOpts struct {
	drop, hostDrop string
	noIdentity     bool
}

// hostToken makes host's token as a node gets it: its node identity, the
// shared role of node.hcl and its own policy as store.HostPolicyRules
// renders it, shaped by o; it returns the token's file.
func (w *aclWorld) hostToken(t *testing.T, host, role string, o tokenOpts) string {
	t.Helper()
	acl := w.admin.ACL()
	suffix := fmt.Sprintf("-%d", time.Now().UnixNano())
	shared, _, err := acl.PolicyCreate(&api.ACLPolicy{Name: "orchestrate-node-shared" + suffix, Rules: policyText(t, "node.hcl", o.drop)}, nil)
	if err != nil {
		t.Fatal(err)
	}
	rn, _, err := acl.RoleCreate(&api.ACLRole{Name: sharedRole + suffix, Policies: []*api.ACLRolePolicyLink{{ID: shared.ID}}}, nil)
	if err != nil {
		t.Fatal(err)
	}
	rules, err := store.HostPolicyRules("orchestrate", host, role)
	if err != nil {
		t.Fatal(err)
	}
	own, _, err := acl.PolicyCreate(&api.ACLPolicy{Name: "orchestrate-host-" + host + suffix, Rules: dropRule(t, rules, o.hostDrop)}, nil)
	if err != nil {
		t.Fatalf("the rendered host policy: %v\n%s", err, rules)
	}
	tok := &api.ACLToken{Roles: []*api.ACLTokenRoleLink{{ID: rn.ID}}, Policies: []*api.ACLTokenPolicyLink{{ID: own.ID}}}
	if !o.noIdentity {
		tok.NodeIdentities = []*api.ACLNodeIdentity{{NodeName: host, Datacenter: w.agent.Datacenter}}
	}
	tok, _, err = acl.TokenCreate(tok, nil)
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), host+".token")
	if err := os.WriteFile(path, []byte(tok.SecretID+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

// clientOf is a Consul client acting with the token in file.
func (w *aclWorld) clientOf(t *testing.T, file string) *api.Client {
	t.Helper()
	b, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	c, err := api.NewClient(&api.Config{Address: w.agent.HTTPAddr, Token: strings.TrimSpace(string(b))})
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// kvDump is every key under the prefix with its value, read with the
// management token.
func (w *aclWorld) kvDump(t *testing.T) map[string]string {
	t.Helper()
	pairs, _, err := w.admin.KV().List("orchestrate/", nil)
	if err != nil {
		t.Fatal(err)
	}
	out := make(map[string]string, len(pairs))
	for _, p := range pairs {
		out[p.Key] = string(p.Value)
	}
	return out
}

// sameKV fails the test when the prefix changed since before.
func (w *aclWorld) sameKV(t *testing.T, what string, before map[string]string) {
	t.Helper()
	after := w.kvDump(t)
	for k, v := range after {
		if b, ok := before[k]; !ok || b != v {
			t.Errorf("%s: %s is now %s (was %q)", what, k, v, b)
		}
	}
	for k := range before {
		if _, ok := after[k]; !ok {
			t.Errorf("%s: %s was deleted", what, k)
		}
	}
}

// builtPackage is a .deb `make package` built, with the version it was
// built as.
type builtPackage struct {
	path       string // dist/orchestrate_<deb version>_amd64.deb
	version    string // what --version prints (git describe)
	debVersion string
}

var (
	buildOnce sync.Once
	// built: the tree's own version (make package as a user runs it), and a
	// later one to upgrade to.
	built, upgrade builtPackage
	buildErr       error
)

// packages builds the package twice, once per test binary: as `make
// package` builds it from this tree, and as version v99.0.0 for the upgrade.
func packages(t *testing.T) (builtPackage, builtPackage) {
	t.Helper()
	testutil.RequireTool(t, "make", "make")
	buildOnce.Do(func() {
		dir, err := os.MkdirTemp("", "orchestrate-package-")
		if err != nil {
			buildErr = err
			return
		}
		// The packages stay until the process ends: every test uses them.
		if built, buildErr = makePackage(filepath.Join(dir, "cur")); buildErr != nil {
			return
		}
		upgrade, buildErr = makePackage(filepath.Join(dir, "next"), "VERSION=v99.0.0")
	})
	if buildErr != nil {
		t.Fatal(buildErr)
	}
	return built, upgrade
}

// makePackage runs `make package` at the repository root with DIST=dist and
// the given make variables.
func makePackage(dist string, vars ...string) (builtPackage, error) {
	args := append([]string{"-C", "..", "--no-print-directory", "package", "DIST=" + dist}, vars...)
	out, err := exec.Command("make", args...).CombinedOutput()
	if err != nil {
		return builtPackage{}, fmt.Errorf("make %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	lines := strings.Split(strings.TrimSpace(string(out)), "\n")
	path := lines[len(lines)-1]
	m := regexp.MustCompile(`/orchestrate_([^_]+)_amd64\.deb$`).FindStringSubmatch(path)
	if m == nil {
		return builtPackage{}, fmt.Errorf("make package printed %q last, want the .deb's path", path)
	}
	version := ""
	for _, v := range vars {
		if s, ok := strings.CutPrefix(v, "VERSION="); ok {
			version = s
		}
	}
	if version == "" {
		v, err := exec.Command("../scripts/version.sh").Output()
		if err != nil {
			return builtPackage{}, fmt.Errorf("scripts/version.sh: %v", err)
		}
		version = strings.TrimSpace(string(v))
	}
	return builtPackage{path: path, version: version, debVersion: m[1]}, nil
}

// run runs a command and returns its combined output; a failure is fatal.
func run(t *testing.T, name string, args ...string) string {
	t.Helper()
	out, err := exec.Command(name, args...).CombinedOutput()
	if err != nil {
		t.Fatalf("%s %s: %v\n%s", name, strings.Join(args, " "), err, out)
	}
	return string(out)
}

// extract unpacks the package's files (no scripts run) into a new directory.
func extract(t *testing.T, deb string) string {
	t.Helper()
	dir := t.TempDir()
	run(t, "dpkg-deb", "-x", deb, dir)
	return dir
}

// moduleSource is the Puppet module in the source tree, from this
// package's directory.
const moduleSource = "../puppet/orchestrate"

// moduleFiles lists the Puppet module's files relative to it: what the
// package ships under paths.PuppetModuleDir.
func moduleFiles(t *testing.T) []string {
	t.Helper()
	var files []string
	err := filepath.WalkDir(moduleSource, func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		rel, err := filepath.Rel(moduleSource, p)
		files = append(files, rel)
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	sort.Strings(files)
	for _, must := range []string{"metadata.json", "README.md", "manifests/init.pp", "manifests/reaper.pp", "manifests/service_blocker.pp", "templates/yaml.erb", "types/dependency.pp"} {
		if i := sort.SearchStrings(files, must); i == len(files) || files[i] != must {
			t.Fatalf("the module in %s has no %s: %v", moduleSource, must, files)
		}
	}
	return files
}
