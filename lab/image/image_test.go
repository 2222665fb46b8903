package image_test

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/jiocloud/orchestrate/internal/testutil"
	"github.com/jiocloud/orchestrate/lab/image"
	"github.com/jiocloud/orchestrate/lab/internal/labenv"
)

// tarFile is one file of the image tar.
func tarFile(t *testing.T, tar, path string) string {
	t.Helper()
	out, err := exec.Command("tar", "-xOf", tar, "./"+path).Output()
	if err != nil {
		t.Fatalf("tar -xOf %s ./%s: %v", tar, path, err)
	}
	return string(out)
}

// The image holds what the package comment and image.Packages promise:
// every package installed (consul from its .deb, known to dpkg, its unit
// HashiCorp's), cloud-init reading NoCloud only with no apt source,
// no Puppet agent daemon, no name server; a second Ensure finds it in the
// cache.
func TestImage(t *testing.T) {
	tar := ensured(t)
	t.Logf("image %s: Ensure took %v", tar, ensureTook)
	if fi, err := os.Stat(tar); err == nil {
		t.Logf("image size %d MiB", fi.Size()>>20)
	}
	status := tarFile(t, tar, "var/lib/dpkg/status")
	installed := map[string]string{}
	for _, para := range strings.Split(status, "\n\n") {
		name := regexp.MustCompile(`(?m)^Package: (\S+)$`).FindStringSubmatch(para)
		st := regexp.MustCompile(`(?m)^Status: (.+)$`).FindStringSubmatch(para)
		if name != nil && st != nil {
			installed[name[1]] = st[1]
		}
	}
	for _, p := range append(image.Packages, image.Package{Name: "consul"}) {
		if installed[p.Name] != "install ok installed" {
			t.Errorf("package %s: status %q, want installed", p.Name, installed[p.Name])
		}
	}
	for path, want := range map[string]*regexp.Regexp{
		"etc/cloud/cloud.cfg.d/99_orchestrate-lab.cfg": regexp.MustCompile(`(?m)^datasource_list: \[NoCloud, None\]$(?s:.*)^  preserve_sources_list: true$`),
		"usr/lib/systemd/system/consul.service":        regexp.MustCompile(`(?m)^ExecStart=/usr/bin/consul agent -config-dir=/etc/consul.d/$`),
		"etc/consul.d/consul.hcl":                      regexp.MustCompile(`(?m)^data_dir = "/opt/consul"$`),
		"etc/passwd":                                   regexp.MustCompile(`(?m)^consul:x:\d+:\d+:`),
		"etc/hosts":                                    regexp.MustCompile(`(?m)^127\.0\.0\.1\tlocalhost$`),
		"etc/apt/sources.list":                         regexp.MustCompile(`\A\z`),
		"etc/resolv.conf":                              regexp.MustCompile(`\A\z`),
	} {
		if got := tarFile(t, tar, path); !want.MatchString(got) {
			t.Errorf("%s: %q, want it to match %s", path, got, want)
		}
	}
	list, err := exec.Command("tar", "-tvf", tar).Output()
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{
		`-rwxr-xr-x 0/0 .* \./usr/bin/consul\n`,
		`l\S+ 0/0 .* \./etc/systemd/system/puppet\.service -> /dev/null\n`,
		`l\S+ 0/0 .* \./etc/systemd/system/multi-user\.target\.wants/systemd-networkd\.service -> `,
		`d\S+ \d+/\d+ .* \./opt/consul/\n`,
	} {
		if !regexp.MustCompile(want).Match(list) {
			t.Errorf("the image has no entry matching %s", want)
		}
	}
	for _, unwanted := range []string{`\./etc/apt/sources\.list\.d/.`, `\./etc/systemd/system/consul\.service\.d`, `\./var/lib/apt/lists/[^/]*_Packages`, `\./etc/systemd/system/timers\.target\.wants/apt-daily`} {
		if m := regexp.MustCompile(unwanted + `.*`).Find(list); m != nil {
			t.Errorf("the image holds %s", m)
		}
	}

	start := time.Now()
	again, err := image.Ensure(context.Background(), filepath.Dir(filepath.Dir(tar)))
	if err != nil || again != tar {
		t.Fatalf("second Ensure: %s, %v; want %s", again, err, tar)
	}
	t.Logf("a cached Ensure took %v", time.Since(start))
}

// The key is a hash of the consul binary's content, not its path: a copy
// keys the same image, a changed binary another one.
func TestKey(t *testing.T) {
	testutil.RequireTool(t, "mmdebstrap", "mmdebstrap")
	root, err := labenv.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	consul := labenv.ConsulBin(root)
	if _, err := os.Stat(consul); err != nil {
		t.Fatalf("no Consul binary (make consul): %v", err)
	}
	ctx := context.Background()
	k1, err := image.Key(ctx, consul)
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	same, changed := filepath.Join(dir, "same"), filepath.Join(dir, "changed")
	copyFile(t, consul, same, nil)
	copyFile(t, consul, changed, []byte{0})
	if k, err := image.Key(ctx, same); err != nil || k != k1 {
		t.Errorf("a copy of the binary keys %q (%v), want %q", k, err, k1)
	}
	if k, err := image.Key(ctx, changed); err != nil || k == k1 {
		t.Errorf("a changed binary keys %q (%v), want a key other than %q", k, err, k1)
	}
	if _, err := image.Key(ctx, filepath.Join(dir, "missing")); err == nil || !strings.Contains(err.Error(), "missing") {
		t.Errorf("Key of a missing binary: %v, want an error naming it", err)
	}
}

func copyFile(t *testing.T, src, dst string, extra []byte) {
	t.Helper()
	in, err := os.Open(src)
	if err != nil {
		t.Fatal(err)
	}
	defer in.Close()
	out, err := os.Create(dst)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := io.Copy(out, io.MultiReader(in, bytes.NewReader(extra))); err != nil {
		t.Fatal(err)
	}
	if err := out.Close(); err != nil {
		t.Fatal(err)
	}
}

// Root makes an overlay whose writes stay in the container's own layer;
// Remove unmounts and removes it; both refuse what is not theirs.
func TestRoot(t *testing.T) {
	tar := ensured(t)
	ctx := context.Background()
	base := t.TempDir()
	dest := filepath.Join(base, "c1")
	start := time.Now()
	if err := image.Root(ctx, tar, dest); err != nil {
		t.Fatal(err)
	}
	t.Logf("Root took %v (the first one extracts the lower layer)", time.Since(start))
	t.Cleanup(func() { image.Remove(dest) }) //nolint:errcheck
	if b, err := os.ReadFile(filepath.Join(dest, "etc/os-release")); err != nil || !strings.Contains(string(b), "bookworm") {
		t.Fatalf("root's os-release: %q %v", b, err)
	}
	if err := os.WriteFile(filepath.Join(dest, "etc/lab-written"), []byte("x"), 0o644); err != nil {
		t.Fatal(err)
	}
	lower := strings.TrimSuffix(tar, ".tar")
	if _, err := os.Stat(filepath.Join(lower, "etc/lab-written")); err == nil {
		t.Errorf("a write in the container reached the shared lower layer")
	}
	if _, err := os.Stat(filepath.Join(dest+".lab", "upper/etc/lab-written")); err != nil {
		t.Errorf("a write in the container is not in its upper layer: %v", err)
	}

	// A second root from the now extracted lower layer.
	d2 := filepath.Join(base, "c2")
	start = time.Now()
	if err := image.Root(ctx, tar, d2); err != nil {
		t.Fatal(err)
	}
	t.Logf("a second Root took %v", time.Since(start))
	if err := image.Remove(d2); err != nil {
		t.Fatal(err)
	}
	for _, p := range []string{d2, d2 + ".lab"} {
		if _, err := os.Lstat(p); !os.IsNotExist(err) {
			t.Errorf("after Remove, %s: %v", p, err)
		}
	}

	// A root in use (a file open in it, as a running container's are)
	// is not removed; once free it is.
	f, err := os.Open(filepath.Join(dest, "etc/os-release"))
	if err != nil {
		t.Fatal(err)
	}
	if err := image.Remove(dest); err == nil || !strings.Contains(err.Error(), "busy") {
		t.Errorf("Remove of a root in use: %v, want busy", err)
	}
	if _, err := os.Stat(filepath.Join(dest, "etc/lab-written")); err != nil {
		t.Errorf("a refused Remove removed files: %v", err)
	}
	f.Close()

	// A Root that fails (the tar is no image) leaves nothing behind.
	bad := filepath.Join(base, "rootfs-bad.tar")
	if err := os.WriteFile(bad, []byte("not a tar"), 0o644); err != nil {
		t.Fatal(err)
	}
	d5 := filepath.Join(base, "c5")
	if err := image.Root(ctx, bad, d5); err == nil {
		t.Errorf("Root of a broken tar: no error")
	}
	for _, p := range []string{d5, d5 + ".lab"} {
		if _, err := os.Lstat(p); !os.IsNotExist(err) {
			t.Errorf("a failed Root left %s: %v", p, err)
		}
	}

	plain := filepath.Join(base, "plain")
	if err := os.MkdirAll(filepath.Join(plain, "keep"), 0o755); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name string
		err  error
		want string
	}{
		{"Root on an existing root", image.Root(ctx, tar, dest), "exists"},
		{"Root on a relative path", image.Root(ctx, tar, "c3"), "not an absolute path"},
		{"Root of a file that is no image", image.Root(ctx, filepath.Join(base, "x.tar"), filepath.Join(base, "c4")), "not an image tar"},
		{"Remove of a directory Root did not make", image.Remove(plain), "not a root image.Root made"},
		{"Remove of /", image.Remove("/"), "root directory"},
	} {
		if tc.err == nil || !strings.Contains(tc.err.Error(), tc.want) {
			t.Errorf("%s: %v, want an error with %q", tc.name, tc.err, tc.want)
		}
	}
	if _, err := os.Stat(filepath.Join(plain, "keep")); err != nil {
		t.Errorf("Remove touched a directory it refused: %v", err)
	}
}

// BenchmarkRoot compares the two ways of making a container's root from
// the image: an overlay on the shared extracted image, and a full
// extraction.
func BenchmarkRoot(b *testing.B) {
	tar := ensured(b)
	ctx := context.Background()
	if _, err := image.Lower(ctx, tar); err != nil {
		b.Fatal(err)
	}
	for _, tc := range []struct {
		name string
		make func(context.Context, string, string) error
	}{{"overlay", image.Root}, {"extract", image.Extract}} {
		b.Run(tc.name, func(b *testing.B) {
			base := b.TempDir()
			for i := 0; i < b.N; i++ {
				dest := filepath.Join(base, fmt.Sprint(i))
				if err := tc.make(ctx, tar, dest); err != nil {
					b.Fatal(err)
				}
				b.StopTimer()
				if err := image.Remove(dest); err != nil {
					b.Fatal(err)
				}
				b.StartTimer()
			}
		})
	}
}

// lab/README.md's table of the image's packages is image.Packages (and
// the consul package), each with its reason.
func TestREADMEListsThePackages(t *testing.T) {
	b, err := os.ReadFile("../README.md")
	if err != nil {
		t.Fatal(err)
	}
	// Only the table under the "| package | why |" header: other tables of
	// the README also start their rows with a name in backquotes.
	_, table, ok := strings.Cut(string(b), "\n| package | why |\n|---|---|\n")
	if !ok {
		t.Fatal("lab/README.md has no \"| package | why |\" table")
	}
	table, _, _ = strings.Cut(table, "\n\n")
	rows := regexp.MustCompile("(?m)^\\| `([a-z0-9.+-]+)` \\| (.+) \\|$").FindAllStringSubmatch(table, -1)
	got := map[string]string{}
	var names []string
	for _, r := range rows {
		got[r[1]] = r[2]
		names = append(names, r[1])
	}
	var want []string
	for _, p := range image.Packages {
		want = append(want, p.Name)
		if got[p.Name] != p.Why {
			t.Errorf("lab/README.md says %s is there because %q; image.Packages says %q", p.Name, got[p.Name], p.Why)
		}
	}
	if strings.Join(names, " ") != strings.Join(append(want, "consul"), " ") {
		t.Errorf("lab/README.md lists %v, want image.Packages and consul: %v", names, want)
	}
}
