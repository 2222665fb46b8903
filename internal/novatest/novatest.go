// Package novatest connects tests to the real single-host OpenStack that
// `make nova-up` runs on 127.0.0.1 (scripts/nova): real keystone, placement,
// glance and Nova with its fake virt driver, RabbitMQ and MariaDB, and a
// minimal Neutron stand-in. The fake driver boots nothing: a server goes
// ACTIVE in about a second and that is all.
//
// Start finds the running cloud through the env file that scripts/nova/start.sh
// writes ($NOVA_E2E_ENV, else $NOVA_E2E_DIR/env, else
// /tmp/orchestrate-nova/env). When there is none, or the cloud does not answer,
// a test skips with a message saying to run `make nova-up`, except under
// CI=true, where it fails: CI must never count a skipped Nova test as passing.
//
// Every Cloud is a project of its own: Start creates a keystone project and a
// member user for the test and deletes both, with every server in the
// project, when the test ends. Tests in different packages share one Nova
// when `go test ./...` runs them in parallel; a project each keeps their
// servers and quotas apart. Only quota changes use the cloud's admin.
package novatest

import (
	"bufio"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/gophercloud/gophercloud/v2"
	"github.com/gophercloud/gophercloud/v2/openstack"
	"github.com/gophercloud/gophercloud/v2/openstack/compute/v2/flavors"
	"github.com/gophercloud/gophercloud/v2/openstack/compute/v2/quotasets"
	"github.com/gophercloud/gophercloud/v2/openstack/compute/v2/servers"
	"github.com/gophercloud/gophercloud/v2/openstack/identity/v3/projects"
	"github.com/gophercloud/gophercloud/v2/openstack/identity/v3/roles"
	"github.com/gophercloud/gophercloud/v2/openstack/identity/v3/users"
	"github.com/gophercloud/gophercloud/v2/openstack/image/v2/images"
	"github.com/gophercloud/gophercloud/v2/pagination"
)

// DefaultDir is where scripts/nova keeps the cloud when $NOVA_E2E_DIR is unset.
const DefaultDir = "/tmp/orchestrate-nova"

// Microversion is the compute API microversion of the clients Compute
// returns: 2.37 is the first that takes networks "none" (the cloud has no
// real Neutron), 2.52 the first that takes tags at create. From 2.47 on a
// server's flavor is embedded (original_name, no id).
const Microversion = "2.52"

// Timeouts for the fake driver's cloud: a create is ACTIVE in ~1 s and a
// delete gone in ~0.5 s on an idle machine; these leave room for a machine
// busy compiling.
const (
	activeTimeout = 60 * time.Second
	goneTimeout   = 60 * time.Second
	callTimeout   = 30 * time.Second
)

// Cloud is one test's view of the running cloud: a project and user of its
// own, the flavor and image to boot.
type Cloud struct {
	// Env is what a child process (the reaper) needs to reach the cloud as
	// this test's user, as KEY=value: OS_AUTH_URL, OS_USERNAME, OS_PASSWORD,
	// OS_PROJECT_NAME, OS_USER_DOMAIN_NAME, OS_PROJECT_DOMAIN_NAME,
	// OS_REGION_NAME, OS_INTERFACE, OS_IDENTITY_API_VERSION, plus
	// NOVA_E2E_FLAVOR, NOVA_E2E_FLAVOR_NOHOST and NOVA_E2E_IMAGE. Append it
	// to os.Environ().
	// OS_PASSWORD is a test-only local secret: never log Env.
	Env []string
	// Flavor and Image are the names of a tiny flavor and an active image
	// every project can boot; FlavorID and ImageID their IDs.
	Flavor, Image     string
	FlavorID, ImageID string
	// NoHostFlavor names a flavor no host can take (its disk is beyond the
	// fake driver's): a create with it is accepted, then goes to ERROR with
	// the fault "No valid host was found", as when a real cloud is out of
	// capacity. NoHostFlavorID is its ID. Empty when the env file predates
	// it (rerun `make nova-up`).
	NoHostFlavor, NoHostFlavorID string
	// ProjectID and ProjectName are this test's project; Username its user.
	ProjectID, ProjectName, Username string
	// CloudsYAML is a clouds.yaml (in the test's temp dir) whose cloud
	// CloudName is this test's user, for OS_CLOUD-style configuration.
	CloudsYAML, CloudName string
	// EnvFile is the env file the cloud was found through; Dir the
	// directory holding all the cloud's state (logs in Dir/log, PID files in
	// Dir/run).
	EnvFile, Dir string

	auth     envFile
	admin    *gophercloud.ProviderClient // the cloud's admin, from the env file
	user     *gophercloud.ProviderClient // the test's user
	userID   string
	password string
}

// envFile is the parsed KEY=value env file start.sh writes.
type envFile map[string]string

// requiredKeys are the env file entries Start cannot work without.
var requiredKeys = []string{"OS_AUTH_URL", "OS_USERNAME", "OS_PASSWORD", "OS_PROJECT_NAME",
	"OS_USER_DOMAIN_NAME", "OS_PROJECT_DOMAIN_NAME", "OS_REGION_NAME", "NOVA_E2E_FLAVOR", "NOVA_E2E_IMAGE"}

// EnvPath returns the env file Start reads: $NOVA_E2E_ENV, else
// $NOVA_E2E_DIR/env, else DefaultDir/env.
func EnvPath() string {
	if p := os.Getenv("NOVA_E2E_ENV"); p != "" {
		return p
	}
	dir := os.Getenv("NOVA_E2E_DIR")
	if dir == "" {
		dir = DefaultDir
	}
	return filepath.Join(dir, "env")
}

// parseEnv reads KEY=value lines (blank lines, # comments and a leading
// "export " allowed; values may be single- or double-quoted).
func parseEnv(path string) (envFile, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	env := envFile{}
	sc := bufio.NewScanner(f)
	for n := 1; sc.Scan(); n++ {
		line := strings.TrimSpace(sc.Text())
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		line = strings.TrimPrefix(line, "export ")
		k, v, ok := strings.Cut(line, "=")
		if !ok || !validKey.MatchString(k) {
			return nil, fmt.Errorf("%s line %d: want KEY=value", path, n)
		}
		if len(v) >= 2 && (v[0] == '\'' || v[0] == '"') && v[len(v)-1] == v[0] {
			v = v[1 : len(v)-1]
		}
		env[k] = v
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("read %s: %w", path, err)
	}
	for _, k := range requiredKeys {
		if env[k] == "" {
			return nil, fmt.Errorf("%s: %s missing", path, k)
		}
	}
	return env, nil
}

var validKey = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]*$`)

// unavailable skips the test, or fails it under CI=true.
func unavailable(t testing.TB, format string, args ...any) {
	t.Helper()
	msg := fmt.Sprintf(format, args...)
	if os.Getenv("CI") == "true" {
		t.Fatalf("real Nova unavailable under CI=true: %s", msg)
	}
	t.Skipf("real Nova unavailable (run `make nova-up` first, `make nova-down` after): %s", msg)
}

// Start finds the running cloud and gives the test a project and user of its
// own, removed (servers first) when the test ends. It skips the test when
// there is no cloud (fails under CI=true).
func Start(t testing.TB) *Cloud {
	t.Helper()
	path := EnvPath()
	env, err := parseEnv(path)
	if errors.Is(err, os.ErrNotExist) {
		unavailable(t, "no env file %s", path)
	}
	if err != nil {
		t.Fatalf("novatest: %v", err)
	}
	c := &Cloud{EnvFile: path, Dir: env["NOVA_E2E_DIR"], auth: env, Flavor: env["NOVA_E2E_FLAVOR"], Image: env["NOVA_E2E_IMAGE"],
		NoHostFlavor: env["NOVA_E2E_FLAVOR_NOHOST"]}
	if c.Dir == "" {
		c.Dir = filepath.Dir(path)
	}

	ctx, cancel := withTimeout(t, callTimeout)
	defer cancel()
	c.admin, err = c.authenticate(ctx, env["OS_USERNAME"], env["OS_PASSWORD"], env["OS_PROJECT_NAME"])
	if err != nil {
		unavailable(t, "env file %s: keystone at %s: %v", path, env["OS_AUTH_URL"], err)
	}
	c.newProject(t)
	c.resolveBootables(t)
	return c
}

// authenticate logs a user in, against 127.0.0.1 only.
func (c *Cloud) authenticate(ctx context.Context, user, password, project string) (*gophercloud.ProviderClient, error) {
	opts := gophercloud.AuthOptions{
		IdentityEndpoint: c.auth["OS_AUTH_URL"],
		Username:         user,
		Password:         password,
		DomainName:       c.auth["OS_USER_DOMAIN_NAME"], // the user's domain
		AllowReauth:      true,
		Scope: &gophercloud.AuthScope{
			ProjectName: project,
			DomainName:  c.auth["OS_PROJECT_DOMAIN_NAME"],
		},
	}
	p, err := openstack.AuthenticatedClient(ctx, opts)
	if err != nil {
		return nil, fmt.Errorf("authenticate %s: %w", user, err)
	}
	return p, nil
}

func (c *Cloud) endpoint() gophercloud.EndpointOpts {
	return gophercloud.EndpointOpts{Region: c.auth["OS_REGION_NAME"], Availability: gophercloud.AvailabilityPublic}
}

// newProject creates the test's project and member user and registers
// their removal.
func (c *Cloud) newProject(t testing.TB) {
	t.Helper()
	ctx, cancel := withTimeout(t, callTimeout)
	defer cancel()
	ident, err := openstack.NewIdentityV3(c.admin, c.endpoint())
	if err != nil {
		t.Fatalf("novatest: identity client: %v", err)
	}
	suffix := randomHex(4)
	c.ProjectName = "e2e-" + sanitize(t.Name()) + "-" + suffix
	c.Username = c.ProjectName
	c.password = randomHex(16)

	p, err := projects.Create(ctx, ident, projects.CreateOpts{Name: c.ProjectName, DomainID: "default",
		Description: "orchestrate test " + t.Name()}).Extract()
	if err != nil {
		t.Fatalf("novatest: create project %s: %v", c.ProjectName, err)
	}
	c.ProjectID = p.ID
	t.Cleanup(func() { c.removeProject(t, ident) })
	u, err := users.Create(ctx, ident, users.CreateOpts{Name: c.Username, DomainID: "default",
		Password: c.password, DefaultProjectID: p.ID}).Extract()
	if err != nil {
		t.Fatalf("novatest: create user %s: %v", c.Username, err)
	}
	c.userID = u.ID

	member, err := findRole(ctx, ident, "member")
	if err != nil {
		t.Fatalf("novatest: %v", err)
	}
	if err := roles.Assign(ctx, ident, member, roles.AssignOpts{UserID: u.ID, ProjectID: p.ID}).ExtractErr(); err != nil {
		t.Fatalf("novatest: give %s the member role: %v", c.Username, err)
	}
	c.user, err = c.authenticate(ctx, c.Username, c.password, c.ProjectName)
	if err != nil {
		t.Fatalf("novatest: %v", err)
	}

	c.Env = []string{
		"OS_AUTH_URL=" + c.auth["OS_AUTH_URL"],
		"OS_USERNAME=" + c.Username,
		"OS_PASSWORD=" + c.password,
		"OS_PROJECT_NAME=" + c.ProjectName,
		"OS_USER_DOMAIN_NAME=" + c.auth["OS_USER_DOMAIN_NAME"],
		"OS_PROJECT_DOMAIN_NAME=" + c.auth["OS_PROJECT_DOMAIN_NAME"],
		"OS_REGION_NAME=" + c.auth["OS_REGION_NAME"],
		"OS_INTERFACE=public",
		"OS_IDENTITY_API_VERSION=3",
		"NOVA_E2E_FLAVOR=" + c.Flavor,
		"NOVA_E2E_FLAVOR_NOHOST=" + c.NoHostFlavor,
		"NOVA_E2E_IMAGE=" + c.Image,
	}
	c.CloudName = "nova-e2e"
	c.CloudsYAML = filepath.Join(t.TempDir(), "clouds.yaml")
	yaml := fmt.Sprintf(`clouds:
  %s:
    auth:
      auth_url: %q
      username: %q
      password: %q
      project_name: %q
      user_domain_name: %q
      project_domain_name: %q
    region_name: %q
    interface: public
    identity_api_version: 3
`, c.CloudName, c.auth["OS_AUTH_URL"], c.Username, c.password, c.ProjectName,
		c.auth["OS_USER_DOMAIN_NAME"], c.auth["OS_PROJECT_DOMAIN_NAME"], c.auth["OS_REGION_NAME"])
	if err := os.WriteFile(c.CloudsYAML, []byte(yaml), 0o600); err != nil {
		t.Fatalf("novatest: %v", err)
	}
}

// removeProject deletes the project's servers (waiting until they are gone,
// so no instance outlives its project), its quota overrides, user and
// project. It runs after the test's own cleanups.
func (c *Cloud) removeProject(t testing.TB, ident *gophercloud.ServiceClient) {
	t.Helper()
	if c.user != nil {
		c.DeleteAllServers(t)
		c.deleteServerGroups(t)
	}
	ctx, cancel := withTimeout(t, callTimeout)
	defer cancel()
	if compute, err := openstack.NewComputeV2(c.admin, c.endpoint()); err == nil {
		_ = quotasets.Delete(ctx, compute, c.ProjectID).Err
	}
	if c.userID != "" {
		if err := users.Delete(ctx, ident, c.userID).ExtractErr(); err != nil && !gophercloud.ResponseCodeIs(err, http.StatusNotFound) {
			t.Errorf("novatest: delete user %s: %v", c.Username, err)
		}
	}
	if err := projects.Delete(ctx, ident, c.ProjectID).ExtractErr(); err != nil && !gophercloud.ResponseCodeIs(err, http.StatusNotFound) {
		t.Errorf("novatest: delete project %s: %v", c.ProjectName, err)
	}
}

func findRole(ctx context.Context, ident *gophercloud.ServiceClient, name string) (string, error) {
	pages, err := roles.List(ident, roles.ListOpts{Name: name}).AllPages(ctx)
	if err != nil {
		return "", fmt.Errorf("list roles: %w", err)
	}
	rs, err := roles.ExtractRoles(pages)
	if err != nil {
		return "", fmt.Errorf("list roles: %w", err)
	}
	for _, r := range rs {
		if r.Name == name {
			return r.ID, nil
		}
	}
	return "", fmt.Errorf("keystone has no %q role", name)
}

// resolveBootables finds the IDs of the flavor and image named in the env file.
func (c *Cloud) resolveBootables(t testing.TB) {
	t.Helper()
	ctx, cancel := withTimeout(t, callTimeout)
	defer cancel()
	compute := c.Compute(t)
	err := flavors.ListDetail(compute, nil).EachPage(ctx, func(_ context.Context, page pagination.Page) (bool, error) {
		fs, err := flavors.ExtractFlavors(page)
		for _, f := range fs {
			switch f.Name {
			case c.Flavor:
				c.FlavorID = f.ID
			case c.NoHostFlavor:
				c.NoHostFlavorID = f.ID
			}
		}
		return true, err
	})
	if err != nil || c.FlavorID == "" {
		t.Fatalf("novatest: flavor %q not found (err %v): rerun `make nova-up`", c.Flavor, err)
	}
	if c.NoHostFlavor != "" && c.NoHostFlavorID == "" {
		t.Fatalf("novatest: flavor %q not found: rerun `make nova-up`", c.NoHostFlavor)
	}
	img, err := openstack.NewImageV2(c.user, c.endpoint())
	if err != nil {
		t.Fatalf("novatest: image client: %v", err)
	}
	pages, err := images.List(img, images.ListOpts{Name: c.Image, Status: images.ImageStatusActive}).AllPages(ctx)
	if err != nil {
		t.Fatalf("novatest: list images: %v", err)
	}
	is, err := images.ExtractImages(pages)
	if err != nil || len(is) == 0 {
		t.Fatalf("novatest: no active image %q (err %v): rerun `make nova-up`", c.Image, err)
	}
	c.ImageID = is[0].ID
}

// Compute returns a compute client acting as the test's user, at
// Microversion.
func (c *Cloud) Compute(t testing.TB) *gophercloud.ServiceClient {
	t.Helper()
	sc, err := openstack.NewComputeV2(c.user, c.endpoint())
	if err != nil {
		t.Fatalf("novatest: compute client: %v", err)
	}
	sc.Microversion = Microversion
	return sc
}

// SetInstanceQuota sets the test project's instance quota to n (the cloud's
// admin does it, through the quota-sets API). The project's quotas go with
// it when the test ends. Nova counts only servers already in its cell
// database: for a deterministic over-quota error wait for the servers that
// fill the quota to be ACTIVE first.
func (c *Cloud) SetInstanceQuota(t testing.TB, n int) {
	t.Helper()
	ctx, cancel := withTimeout(t, callTimeout)
	defer cancel()
	admin := c.AdminCompute(t)
	qs, err := quotasets.Update(ctx, admin, c.ProjectID, quotasets.UpdateOpts{Instances: &n}).Extract()
	if err != nil {
		t.Fatalf("novatest: set instance quota of %s to %d: %v", c.ProjectName, n, err)
	}
	if qs.Instances != n {
		t.Fatalf("novatest: instance quota of %s is %d after setting it to %d", c.ProjectName, qs.Instances, n)
	}
}

// AdminCompute is a compute client with the cloud admin's credentials
// (the lab hypervisor reads every server's user_data, which only an admin
// sees). Never log what it carries.
func (c *Cloud) AdminCompute(t testing.TB) *gophercloud.ServiceClient {
	t.Helper()
	admin, err := openstack.NewComputeV2(c.admin, c.endpoint())
	if err != nil {
		t.Fatalf("novatest: admin compute client: %v", err)
	}
	return admin
}

// SetServerError puts one of the project's servers into ERROR (the cloud's
// admin resets its state), as when a hypervisor loses it: a server the
// reaper must treat as broken although Consul may still list its node.
func (c *Cloud) SetServerError(t testing.TB, id string) {
	t.Helper()
	ctx, cancel := withTimeout(t, callTimeout)
	defer cancel()
	admin := c.AdminCompute(t)
	if err := servers.ResetState(ctx, admin, id, servers.StateError).ExtractErr(); err != nil {
		t.Fatalf("novatest: reset server %s to error: %v", id, err)
	}
}

// DeleteAllServers deletes every server in the test's project and waits
// until the list is empty.
func (c *Cloud) DeleteAllServers(t testing.TB) {
	t.Helper()
	ctx, cancel := withTimeout(t, goneTimeout)
	defer cancel()
	compute := c.Compute(t)
	deleted := map[string]bool{}
	for {
		all, err := c.ListServers(ctx, compute)
		if err != nil {
			t.Fatalf("novatest: list servers: %v", err)
		}
		if len(all) == 0 {
			return
		}
		for _, s := range all {
			if deleted[s.ID] && s.Status != "ERROR" {
				continue
			}
			err := servers.Delete(ctx, compute, s.ID).ExtractErr()
			if err != nil && !gophercloud.ResponseCodeIs(err, http.StatusNotFound) {
				t.Fatalf("novatest: delete server %s: %v", s.ID, err)
			}
			deleted[s.ID] = true
		}
		select {
		case <-ctx.Done():
			t.Fatalf("novatest: %d servers still in %s after %s: %s", len(all), c.ProjectName, goneTimeout, describe(all))
		case <-time.After(200 * time.Millisecond):
		}
	}
}

// ListServers lists the project's servers, every page.
func (c *Cloud) ListServers(ctx context.Context, compute *gophercloud.ServiceClient) ([]servers.Server, error) {
	pages, err := servers.List(compute, servers.ListOpts{}).AllPages(ctx)
	if err != nil {
		return nil, err
	}
	return servers.ExtractServers(pages)
}

// CreateServer boots a server of the cloud's flavor and image with networks
// "none" and the given metadata, and waits for it to be ACTIVE. Its deletion
// is up to the test (or the project's cleanup).
func (c *Cloud) CreateServer(t testing.TB, name string, metadata map[string]string) *servers.Server {
	t.Helper()
	ctx, cancel := withTimeout(t, callTimeout)
	defer cancel()
	compute := c.Compute(t)
	s, err := servers.Create(ctx, compute, c.CreateOpts(name, metadata), nil).Extract()
	if err != nil {
		t.Fatalf("novatest: create server %s: %v", name, err)
	}
	return c.WaitForStatus(t, s.ID, "ACTIVE")
}

// CreateOpts are the options CreateServer boots with.
func (c *Cloud) CreateOpts(name string, metadata map[string]string) servers.CreateOpts {
	return servers.CreateOpts{Name: name, FlavorRef: c.FlavorID, ImageRef: c.ImageID, Networks: "none", Metadata: metadata}
}

// WaitForStatus polls a server until its status is want, and fails the test
// when it goes to ERROR instead (with Nova's fault) or takes over a minute.
// Want "ERROR" to wait for a create that must fail.
func (c *Cloud) WaitForStatus(t testing.TB, id, want string) *servers.Server {
	t.Helper()
	ctx, cancel := withTimeout(t, activeTimeout)
	defer cancel()
	compute := c.Compute(t)
	for {
		s, err := servers.Get(ctx, compute, id).Extract()
		switch {
		case err != nil && ctx.Err() == nil:
			t.Fatalf("novatest: get server %s: %v", id, err)
		case err == nil && s.Status == want:
			return s
		case err == nil && s.Status == "ERROR":
			t.Fatalf("novatest: server %s (%s) went to ERROR waiting for %s: %s", s.Name, id, want, s.Fault.Message)
		}
		select {
		case <-ctx.Done():
			t.Fatalf("novatest: server %s not %s after %s", id, want, activeTimeout)
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// WaitForFault waits for server id, in ERROR, to carry Nova's fault and
// returns its message. Nova saves an instance's ERROR state before it
// writes the fault (nova.scheduler.utils.set_vm_state_and_notify), so a
// read between the two shows ERROR with no fault.
func (c *Cloud) WaitForFault(t testing.TB, id string) string {
	t.Helper()
	ctx, cancel := withTimeout(t, activeTimeout)
	defer cancel()
	compute := c.Compute(t)
	for {
		s, err := servers.Get(ctx, compute, id).Extract()
		switch {
		case err != nil && ctx.Err() == nil:
			t.Fatalf("novatest: get server %s: %v", id, err)
		case err == nil && s.Status != "ERROR":
			t.Fatalf("novatest: server %s is %s, want ERROR with a fault", id, s.Status)
		case err == nil && s.Fault.Message != "":
			return s.Fault.Message
		}
		select {
		case <-ctx.Done():
			t.Fatalf("novatest: server %s has no fault after %s", id, activeTimeout)
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// WaitGone polls a server until Nova answers 404 for it.
func (c *Cloud) WaitGone(t testing.TB, id string) {
	t.Helper()
	ctx, cancel := withTimeout(t, goneTimeout)
	defer cancel()
	compute := c.Compute(t)
	for {
		_, err := servers.Get(ctx, compute, id).Extract()
		if gophercloud.ResponseCodeIs(err, http.StatusNotFound) {
			return
		}
		if err != nil && ctx.Err() == nil {
			t.Fatalf("novatest: get server %s: %v", id, err)
		}
		select {
		case <-ctx.Done():
			t.Fatalf("novatest: server %s still there after %s", id, goneTimeout)
		case <-time.After(100 * time.Millisecond):
		}
	}
}

func describe(ss []servers.Server) string {
	var b strings.Builder
	for i, s := range ss {
		if i > 0 {
			b.WriteString(", ")
		}
		fmt.Fprintf(&b, "%s (%s, %s)", s.Name, s.ID, s.Status)
	}
	return b.String()
}

// sanitize turns a test name into something keystone and Nova take as part
// of a name: letters, digits and dashes, at most 40 characters.
func sanitize(name string) string {
	b := []byte(name)
	for i, ch := range b {
		if !(ch >= 'a' && ch <= 'z' || ch >= 'A' && ch <= 'Z' || ch >= '0' && ch <= '9') {
			b[i] = '-'
		}
	}
	if len(b) > 40 {
		b = b[:40]
	}
	return string(b)
}

func randomHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b) // crypto/rand.Read never fails (Go 1.24+)
	return hex.EncodeToString(b)
}

// withTimeout bounds one helper's calls: under the test's context while the
// test runs, under a fresh one in a Cleanup (where t.Context is done), so
// the helpers work from both.
func withTimeout(t testing.TB, d time.Duration) (context.Context, context.CancelFunc) {
	base := t.Context()
	if base.Err() != nil {
		base = context.Background()
	}
	return context.WithTimeout(base, d)
}
