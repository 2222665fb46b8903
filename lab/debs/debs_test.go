package debs_test

import (
	"bytes"
	"context"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"testing"

	"github.com/jiocloud/orchestrate/internal/testutil"
	"github.com/jiocloud/orchestrate/lab/debs"
	"github.com/jiocloud/orchestrate/lab/internal/labenv"
)

// contents is dpkg-deb --contents of a package: path -> "mode owner".
func contents(t *testing.T, deb string) map[string]string {
	t.Helper()
	out, err := exec.Command("dpkg-deb", "--contents", deb).Output()
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]string{}
	for _, l := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		f := strings.Fields(l)
		got[strings.TrimSuffix(strings.TrimPrefix(f[len(f)-1], "."), "/")] = f[0] + " " + f[1]
	}
	return got
}

func field(t *testing.T, deb, name string) string {
	t.Helper()
	out, err := exec.Command("dpkg-deb", "--field", deb, name).Output()
	if err != nil {
		t.Fatal(err)
	}
	return strings.TrimSpace(string(out))
}

// The consul package has HashiCorp's layout: the binary, the unit, the
// configuration as conffiles, the data directory, a preinst making the
// user consul; systemd-analyze finds nothing to say about the unit. A
// binary that does not say its Consul version is refused.
func TestConsulPackage(t *testing.T) {
	testutil.RequireTool(t, "dpkg-deb", "dpkg")
	sa := testutil.RequireTool(t, "systemd-analyze", "systemd")
	root, err := labenv.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	consul := labenv.ConsulBin(root)
	ctx := context.Background()
	out := t.TempDir()
	deb, err := debs.Consul(ctx, consul, out)
	if err != nil {
		t.Fatal(err)
	}
	v, _ := exec.Command(consul, "version").Output()
	want := regexp.MustCompile(`^Consul v(\S+)`).FindSubmatch(v)
	if want == nil || filepath.Base(deb) != "consul_"+string(want[1])+"-1_amd64.deb" {
		t.Fatalf("package %s for %q", deb, v)
	}
	got := contents(t, deb)
	for path, mode := range map[string]string{
		"/usr/bin/consul":                        "-rwxr-xr-x root/root",
		"/usr/lib/systemd/system/consul.service": "-rw-r--r-- root/root",
		"/etc/consul.d/consul.hcl":               "-rw-r--r-- root/root",
		"/etc/consul.d/consul.env":               "-rw-r--r-- root/root",
		"/opt/consul":                            "drwxr-xr-x root/root",
	} {
		if got[path] != mode {
			t.Errorf("%s: %q, want %q", path, got[path], mode)
		}
	}
	for path := range got {
		if !regexp.MustCompile(`^(/usr(/bin|/lib(/systemd(/system)?)?)?|/etc(/consul\.d)?|/opt(/consul)?|)$|^/usr/bin/consul$|^/usr/lib/systemd/system/consul\.service$|^/etc/consul\.d/consul\.(hcl|env)$`).MatchString(path) {
			t.Errorf("unexpected file %s", path)
		}
	}
	ctl := t.TempDir()
	if b, err := exec.Command("dpkg-deb", "--control", deb, ctl).CombinedOutput(); err != nil {
		t.Fatalf("%v %s", err, b)
	}
	if b, _ := os.ReadFile(filepath.Join(ctl, "conffiles")); string(b) != "/etc/consul.d/consul.env\n/etc/consul.d/consul.hcl\n" {
		t.Errorf("conffiles %q", b)
	}
	if b, _ := os.ReadFile(filepath.Join(ctl, "preinst")); !strings.Contains(string(b), "useradd --system --user-group --shell /bin/false consul") {
		t.Errorf("preinst does not make the user consul:\n%s", b)
	}

	// systemd-analyze verify, in a root of the package and the host's units.
	x := t.TempDir()
	if b, err := exec.Command("dpkg-deb", "-x", deb, x).CombinedOutput(); err != nil {
		t.Fatalf("%v %s", err, b)
	}
	if b, err := exec.Command("cp", "-rn", "/lib/systemd/system/.", filepath.Join(x, "usr/lib/systemd/system")).CombinedOutput(); err != nil {
		t.Fatalf("%v %s", err, b)
	}
	// ExecReload's /bin/kill is util-linux's, on every Debian system.
	if err := os.MkdirAll(filepath.Join(x, "bin"), 0o755); err != nil {
		t.Fatal(err)
	}
	if b, err := exec.Command("cp", "/bin/kill", filepath.Join(x, "bin/kill")).CombinedOutput(); err != nil {
		t.Fatalf("%v %s", err, b)
	}
	if b, err := exec.Command(sa, "verify", "--root="+x, "/usr/lib/systemd/system/consul.service").CombinedOutput(); err != nil || len(b) > 0 {
		t.Errorf("systemd-analyze verify consul.service: %v\n%s", err, b)
	}

	// A binary that is not Consul.
	fake := filepath.Join(t.TempDir(), "consul")
	if err := os.WriteFile(fake, []byte("#!/bin/sh\necho 'Nomad v1.0.0'\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	if _, err := debs.Consul(ctx, fake, out); err == nil || !strings.Contains(err.Error(), `printed "Nomad v1.0.0"`) {
		t.Errorf("Consul of a binary that is not Consul: %v", err)
	}
	if _, err := debs.Consul(ctx, filepath.Join(t.TempDir(), "missing"), out); err == nil {
		t.Errorf("Consul of a missing binary: no error")
	}
}

// orchestrate-lab-roles installs the labroles module as it is in the
// source tree and examples/hiera.yaml as the production environment's
// hiera.yaml (a conffile), depends on what the roles run, and compiles
// `include labroles::controller` from the extracted package with Debian's
// puppet. A version that is not Debian's is refused.
func TestRolesPackage(t *testing.T) {
	testutil.RequireTool(t, "dpkg-deb", "dpkg")
	testutil.RequirePuppet(t)
	root, err := labenv.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	deb, err := debs.Roles(ctx, root, t.TempDir(), "1.2.3+lab1")
	if err != nil {
		t.Fatal(err)
	}
	if filepath.Base(deb) != "orchestrate-lab-roles_1.2.3+lab1_all.deb" {
		t.Errorf("package %s", deb)
	}
	if got := field(t, deb, "Depends"); got != "orchestrate, consul, puppet, python3" {
		t.Errorf("Depends: %q", got)
	}
	x := t.TempDir()
	if b, err := exec.Command("dpkg-deb", "-x", deb, x).CombinedOutput(); err != nil {
		t.Fatalf("%v %s", err, b)
	}
	got := contents(t, deb)
	src := filepath.Join(root, "lab/puppet/modules/labroles")
	var want []string
	err = filepath.WalkDir(src, func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		rel, _ := filepath.Rel(src, p)
		dst := "/usr/share/puppet/modules/labroles/" + rel
		want = append(want, dst)
		if got[dst] != "-rw-r--r-- root/root" {
			t.Errorf("%s: %q, want -rw-r--r-- root/root", dst, got[dst])
		}
		a, _ := os.ReadFile(p)
		b, _ := os.ReadFile(filepath.Join(x, dst))
		if !bytes.Equal(a, b) {
			t.Errorf("%s differs from %s", dst, p)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	hiera := "/etc/puppet/code/environments/production/hiera.yaml"
	a, _ := os.ReadFile(filepath.Join(root, "examples/hiera.yaml"))
	if b, err := os.ReadFile(filepath.Join(x, hiera)); err != nil || !bytes.Equal(a, b) {
		t.Errorf("%s is not examples/hiera.yaml (%v)", hiera, err)
	}
	var files []string
	for p, mode := range got {
		if !strings.HasPrefix(mode, "d") {
			files = append(files, p)
		}
	}
	sort.Strings(files)
	sort.Strings(want)
	if strings.Join(files, " ") != strings.Join(append(want, hiera), " ") && strings.Join(files, " ") != strings.Join(append([]string{hiera}, want...), " ") {
		t.Errorf("the package holds %v, want %v and %s", files, want, hiera)
	}

	// The packaged module compiles beside the orchestrate module.
	modules := filepath.Join(t.TempDir(), "modules")
	if err := os.MkdirAll(modules, 0o755); err != nil {
		t.Fatal(err)
	}
	for name, dir := range map[string]string{"labroles": filepath.Join(x, "usr/share/puppet/modules/labroles"), "orchestrate": filepath.Join(root, "puppet/orchestrate")} {
		if err := os.Symlink(dir, filepath.Join(modules, name)); err != nil {
			t.Fatal(err)
		}
	}
	code, out := testutil.PuppetApply(t, "--noop", "--modulepath", modules, "--hiera_config", filepath.Join(x, hiera), "--execute", "include labroles::controller")
	if (code != 0 && code != 2) || !strings.Contains(out, "Service[lab-controller]") {
		t.Errorf("puppet apply --noop include labroles::controller from the package: exit %d\n%s", code, out)
	}

	if _, err := debs.Roles(ctx, root, t.TempDir(), "1.0; rm -rf /"); err == nil || !strings.Contains(err.Error(), "is not a Debian version") {
		t.Errorf("Roles with a bad version: %v", err)
	}
}
