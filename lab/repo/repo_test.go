package repo_test

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"testing"

	"github.com/jiocloud/orchestrate/internal/testutil"
	"github.com/jiocloud/orchestrate/lab/repo"
)

// makeDeb builds a small package with dpkg-deb: one file, the given
// control fields besides Package and Version.
func makeDeb(t *testing.T, name, version, extra string) string {
	t.Helper()
	testutil.RequireTool(t, "dpkg-deb", "dpkg")
	dir := t.TempDir()
	for _, d := range []string{"DEBIAN", "usr/share/" + name} {
		if err := os.MkdirAll(filepath.Join(dir, "pkg", d), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	control := fmt.Sprintf("Package: %s\nVersion: %s\nArchitecture: all\nMaintainer: lab <lab@orchestrate.invalid>\n%sDescription: lab repository test package\n multi-line description\n", name, version, extra)
	if err := os.WriteFile(filepath.Join(dir, "pkg/DEBIAN/control"), []byte(control), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "pkg/usr/share", name, "version"), []byte(version+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	out := filepath.Join(dir, name+".deb")
	if b, err := exec.Command("dpkg-deb", "--nocheck", "--root-owner-group", "--build", filepath.Join(dir, "pkg"), out).CombinedOutput(); err != nil {
		t.Fatalf("dpkg-deb --build: %v\n%s", err, b)
	}
	return out
}

// aptRoot is a private apt: its own configuration (APT_CONFIG, no host
// configuration or source), lists, cache and the host's dpkg status, with
// the repository as its only source, signed-by a keyring made from the
// armoured key as cloud-init makes $KEY_FILE (gpg --dearmor).
type aptRoot struct {
	dir, conf string
}

func newAptRoot(t *testing.T, url, armoured string) *aptRoot {
	t.Helper()
	testutil.RequireTool(t, "apt-get", "apt")
	gpgBin := testutil.RequireTool(t, "gpg", "gnupg")
	a := &aptRoot{dir: t.TempDir()}
	for _, d := range []string{"etc/apt/apt.conf.d", "etc/apt/sources.list.d", "etc/apt/preferences.d", "etc/apt/trusted.gpg.d",
		"var/lib/apt/lists/partial", "var/cache/apt/archives/partial", "var/lib/dpkg", "keys"} {
		if err := os.MkdirAll(filepath.Join(a.dir, d), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	keyring := filepath.Join(a.dir, "keys/orchestrate-lab.gpg")
	cmd := exec.Command(gpgBin, "--batch", "--yes", "--dearmor", "--output", keyring)
	cmd.Stdin = strings.NewReader(armoured)
	if b, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("gpg --dearmor: %v\n%s", err, b)
	}
	status, err := os.ReadFile("/var/lib/dpkg/status")
	if err != nil {
		t.Fatal(err)
	}
	files := map[string]string{
		"var/lib/dpkg/status":           string(status),
		"etc/apt/sources.list":          fmt.Sprintf("deb [signed-by=%s] %s ./\n", keyring, url),
		"etc/apt/sources.list.d/.empty": "",
	}
	for name, text := range files {
		if err := os.WriteFile(filepath.Join(a.dir, name), []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	a.conf = filepath.Join(a.dir, "apt.conf")
	conf := fmt.Sprintf(`Dir "%s/";
Dir::State::status "%s/var/lib/dpkg/status";
APT::Sandbox::User "root";
Acquire::Languages "none";
Acquire::Retries "0";
Debug::NoLocking "true";
`, a.dir, a.dir)
	if err := os.WriteFile(a.conf, []byte(conf), 0o644); err != nil {
		t.Fatal(err)
	}
	return a
}

// run runs apt-get with the private configuration and returns its exit
// code and output.
func (a *aptRoot) run(t *testing.T, args ...string) (int, string) {
	t.Helper()
	cmd := exec.Command("apt-get", args...)
	cmd.Env = append(os.Environ(), "APT_CONFIG="+a.conf, "DEBIAN_FRONTEND=noninteractive")
	b, err := cmd.CombinedOutput()
	if ee, ok := err.(*exec.ExitError); ok {
		return ee.ExitCode(), string(b)
	} else if err != nil {
		t.Fatal(err)
	}
	return 0, string(b)
}

// archives lists the .deb files apt downloaded.
func (a *aptRoot) archives(t *testing.T) []string {
	t.Helper()
	m, err := filepath.Glob(filepath.Join(a.dir, "var/cache/apt/archives/*.deb"))
	if err != nil {
		t.Fatal(err)
	}
	for i := range m {
		m[i] = filepath.Base(m[i])
	}
	sort.Strings(m)
	return m
}

// labDir points LAB_DIR, where the signing key lives, at a new temporary
// directory.
func labDir(t *testing.T) string {
	t.Helper()
	d := t.TempDir()
	t.Setenv("LAB_DIR", d)
	return d
}

// Real apt accepts the repository: apt-get update verifies InRelease with
// the returned key given as signed-by, and apt-get install --download-only
// resolves a package's dependency within the repository and fetches both,
// their hashes checked against the signed index.
func TestAptInstallsFromTheRepository(t *testing.T) {
	testutil.RequireTool(t, "gpg", "gnupg")
	lab := labDir(t)
	dir := filepath.Join(lab, "repo")
	// Fields of the index in a package's own control file are not the
	// index's: Build writes them.
	a1 := makeDeb(t, "lab-test-a", "1.0", "Filename: ../../etc/passwd\nSHA256: 00\n")
	b1 := makeDeb(t, "lab-test-b", "1:2.0~rc1", "Depends: lab-test-a (>= 1.0)\n")
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	pub, err := repo.Build(ctx, dir, []string{a1, b1})
	if err != nil {
		t.Fatal(err)
	}
	index, err := os.ReadFile(filepath.Join(dir, "Packages"))
	if err != nil {
		t.Fatal(err)
	}
	if strings.Count(string(index), "Filename: ") != 2 || strings.Contains(string(index), "passwd") || strings.Contains(string(index), "SHA256: 00\n") {
		t.Errorf("Packages kept a package's own index fields:\n%s", index)
	}
	srv, err := repo.Serve(ctx, "127.0.0.1:0", dir)
	if err != nil {
		t.Fatal(err)
	}
	apt := newAptRoot(t, srv.URL, pub)
	if code, out := apt.run(t, "update"); code != 0 || strings.Contains(out, "W: ") || strings.Contains(out, "E: ") {
		t.Fatalf("apt-get update: exit %d\n%s", code, out)
	}
	code, out := apt.run(t, "install", "--download-only", "--yes", "--no-install-recommends", "lab-test-b")
	if code != 0 {
		t.Fatalf("apt-get install --download-only lab-test-b: exit %d\n%s", code, out)
	}
	// apt names the file with the epoch, escaped.
	if got, want := strings.Join(apt.archives(t), " "), "lab-test-a_1.0_all.deb lab-test-b_1%3a2.0~rc1_all.deb"; got != want {
		t.Errorf("apt downloaded %s, want %s\n%s", got, want, out)
	}

	// A second Build with a newer lab-test-a and without lab-test-b: the
	// same key (made once), the old packages gone from the directory, and
	// apt sees only the new one.
	a2 := makeDeb(t, "lab-test-a", "1.1", "")
	first, err := os.Stat(filepath.Join(dir, "InRelease"))
	if err != nil {
		t.Fatal(err)
	}
	pub2, err := repo.Build(ctx, dir, []string{a2})
	if err != nil {
		t.Fatal(err)
	}
	// As if rebuilt within the second apt fetched the first index: the
	// same modification times (HTTP's Last-Modified has whole seconds).
	for _, f := range []string{"InRelease", "Release", "Release.gpg", "Packages", "Packages.gz"} {
		if err := os.Chtimes(filepath.Join(dir, f), first.ModTime(), first.ModTime()); err != nil {
			t.Fatal(err)
		}
	}
	if pub2 != pub {
		t.Errorf("the second Build signed with another key")
	}
	debs, _ := filepath.Glob(filepath.Join(dir, "*.deb"))
	if len(debs) != 1 || filepath.Base(debs[0]) != "lab-test-a_1.1_all.deb" {
		t.Errorf("repository holds %v, want only lab-test-a_1.1_all.deb", debs)
	}
	if code, out := apt.run(t, "update"); code != 0 {
		t.Fatalf("apt-get update after the rebuild: exit %d\n%s", code, out)
	}
	if code, out := apt.run(t, "install", "--download-only", "--yes", "lab-test-a"); code != 0 || !strings.Contains(strings.Join(apt.archives(t), " "), "lab-test-a_1.1_all.deb") {
		t.Errorf("apt-get install --download-only lab-test-a after the rebuild: exit %d, archives %v\n%s", code, apt.archives(t), out)
	}
	if code, out := apt.run(t, "install", "--download-only", "--yes", "lab-test-b"); code == 0 {
		t.Errorf("apt-get still installs lab-test-b, which the rebuild left out:\n%s", out)
	}
}

// apt refuses the repository when the signature is not the given key's,
// and a package whose bytes differ from the signed index.
func TestAptRefusesWhatTheKeyDidNotSign(t *testing.T) {
	testutil.RequireTool(t, "gpg", "gnupg")
	deb := makeDeb(t, "lab-test-a", "1.0", "")
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	dir := filepath.Join(labDir(t), "repo")
	pub, err := repo.Build(ctx, dir, []string{deb})
	if err != nil {
		t.Fatal(err)
	}
	// Another lab's key: a new LAB_DIR makes a new one.
	other, err := repo.Build(ctx, filepath.Join(labDir(t), "repo"), []string{deb})
	if err != nil {
		t.Fatal(err)
	}
	if other == pub {
		t.Fatal("two lab directories made the same key")
	}
	srv, err := repo.Serve(ctx, "127.0.0.1:0", dir)
	if err != nil {
		t.Fatal(err)
	}
	wrong := newAptRoot(t, srv.URL, other)
	if code, out := wrong.run(t, "update"); code == 0 || !strings.Contains(out, "NO_PUBKEY") {
		t.Errorf("apt-get update with another key: exit %d, want a refusal naming NO_PUBKEY\n%s", code, out)
	}

	apt := newAptRoot(t, srv.URL, pub)
	if code, out := apt.run(t, "update"); code != 0 {
		t.Fatalf("apt-get update: exit %d\n%s", code, out)
	}
	// The package changes after it was signed for (same size).
	served := filepath.Join(dir, "lab-test-a_1.0_all.deb")
	b, err := os.ReadFile(served)
	if err != nil {
		t.Fatal(err)
	}
	b[len(b)-1] ^= 0xff
	if err := os.WriteFile(served, b, 0o644); err != nil {
		t.Fatal(err)
	}
	if code, out := apt.run(t, "install", "--download-only", "--yes", "lab-test-a"); code == 0 || !strings.Contains(out, "Hash Sum mismatch") {
		t.Errorf("apt-get install of a changed package: exit %d, want a hash mismatch\n%s", code, out)
	}
}

// Bad input is refused with its name, before the repository changes; the
// signing key is never under the served directory.
func TestBuildRefusesBadInput(t *testing.T) {
	testutil.RequireTool(t, "gpg", "gnupg")
	lab := labDir(t)
	ctx := context.Background()
	dir := filepath.Join(lab, "repo")
	good := makeDeb(t, "lab-test-a", "1.0", "")
	if _, err := repo.Build(ctx, dir, []string{good}); err != nil {
		t.Fatal(err)
	}
	before := listing(t, dir)
	notDeb := filepath.Join(t.TempDir(), "x.deb")
	if err := os.WriteFile(notDeb, []byte("!<arch>\nnot a package"), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name string
		dir  string
		debs []string
		want string
	}{
		{"no package", dir, nil, "no package given"},
		{"missing file", dir, []string{good, "/nonexistent/x.deb"}, "/nonexistent/x.deb is not a Debian package"},
		{"not a package", dir, []string{notDeb}, notDeb + " is not a Debian package"},
		{"twice the same", dir, []string{good, makeDeb(t, "lab-test-a", "1.0", "")}, "are both lab-test-a 1.0 (all)"},
		{"bad package name", dir, []string{makeDeb(t, "Lab_Test", "1.0", "")}, `Package "Lab_Test" is not a Debian package name`},
		{"the lab directory", lab, []string{good}, "would serve it"},
		{"inside the key's directory", filepath.Join(lab, "gnupg", "repo"), []string{good}, "would serve it"},
		{"relative", "repo", []string{good}, "not an absolute path"},
		{"a comma", dir + ",x", []string{good}, `has the character ','`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := repo.Build(ctx, tc.dir, tc.debs)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("Build: %v, want an error with %q", err, tc.want)
			}
			if after := listing(t, dir); after != before {
				t.Errorf("the repository changed:\n%s\nwas:\n%s", after, before)
			}
		})
	}
}

// listing is every file in dir with its content's size and hash.
func listing(t *testing.T, dir string) string {
	t.Helper()
	out, err := exec.Command("sh", "-c", "cd "+dir+" && sha256sum * | sort").CombinedOutput()
	if err != nil {
		t.Fatalf("%v: %s", err, out)
	}
	return string(out)
}

// The server answers GET of the repository's files, refuses other methods
// and never serves a dot file (Build's temporary files), and stops when
// its context ends.
func TestServe(t *testing.T) {
	dir := t.TempDir()
	for name, text := range map[string]string{"Release": "Origin: x\n", ".build-1": "secret"} {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	ctx, cancel := context.WithCancel(context.Background())
	srv, err := repo.Serve(ctx, "127.0.0.1:0", dir)
	if err != nil {
		t.Fatal(err)
	}
	get := func(method, path string) (int, string) {
		req, _ := http.NewRequest(method, srv.URL+path, nil)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	if code, body := get("GET", "Release"); code != 200 || body != "Origin: x\n" {
		t.Errorf("GET Release: %d %q", code, body)
	}
	for _, p := range []string{".build-1", "./.build-1", "x/../.build-1"} {
		if code, body := get("GET", p); code != 404 || strings.Contains(body, "secret") {
			t.Errorf("GET %s: %d %q, want 404", p, code, body)
		}
	}
	if code, _ := get("GET", "./Release"); code != 200 {
		t.Errorf("GET ./Release (how apt asks a flat repository): %d", code)
	}
	if code, _ := get("POST", "Release"); code != http.StatusMethodNotAllowed {
		t.Errorf("POST Release: %d, want 405", code)
	}
	if _, err := repo.Serve(ctx, strings.TrimPrefix(strings.TrimSuffix(srv.URL, "/"), "http://"), dir); err == nil {
		t.Errorf("a second server on the same address started")
	}
	cancel()
	if err := srv.Wait(); err != nil {
		t.Errorf("Wait: %v", err)
	}
	if _, err := http.Get(srv.URL + "Release"); err == nil {
		t.Errorf("the server still answers after its context ended")
	}
}
