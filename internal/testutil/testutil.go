// Package testutil holds small helpers shared by tests that run real tools.
package testutil

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"
)

// RequirePuppet returns the path of Debian's puppet. When it is missing the
// test is skipped with a message saying how to install it, except under
// CI=true, where it fails: CI must never count a skipped Puppet test as
// passing.
func RequirePuppet(t testing.TB) string {
	t.Helper()
	return RequireTool(t, "puppet", "puppet")
}

// RequireTool returns the path of the command name, which the Debian package
// pkg provides and scripts/install-test-deps.sh installs. When it is missing
// the test is skipped with a message saying how to install it, except under
// CI=true, where it fails.
func RequireTool(t testing.TB, name, pkg string) string {
	t.Helper()
	p, err := exec.LookPath(name)
	if err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatalf("CI=true and no %s binary (make test-deps installs Debian's %s): %v", name, pkg, err)
		}
		t.Skipf("skipping: no %s binary (make test-deps, or apt-get install %s): %v", name, pkg, err)
	}
	return p
}

// RequireRoot skips a test that needs root (to install a package, to make a
// mount namespace), except under CI=true, where it fails: `make test` runs
// as root, as installing its Debian packages does.
func RequireRoot(t testing.TB, why string) {
	t.Helper()
	if os.Geteuid() == 0 {
		return
	}
	if os.Getenv("CI") == "true" {
		t.Fatalf("CI=true and not root: %s needs root", why)
	}
	t.Skipf("skipping: %s needs root", why)
}

// SyncBuffer is a bytes.Buffer that a writer (a logger, a command) and a
// reader may use at the same time.
type SyncBuffer struct {
	mu sync.Mutex // guards b
	b  bytes.Buffer
}

// Write appends p.
func (s *SyncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

// String returns what was written so far.
func (s *SyncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// Eventually polls cond every 20 ms until it holds, and returns how long
// that took. When it does not hold within limit, the test fails naming
// what it waited for, with detail's text (the file, the agent log...) when
// given.
func Eventually(t testing.TB, limit time.Duration, what string, cond func() bool, detail ...func() string) time.Duration {
	t.Helper()
	start := time.Now()
	for !cond() {
		if time.Since(start) > limit {
			msg := fmt.Sprintf("timed out after %s waiting for %s", limit, what)
			for _, d := range detail {
				msg += "\n" + d()
			}
			t.Fatal(msg)
		}
		time.Sleep(20 * time.Millisecond)
	}
	return time.Since(start)
}

// builds caches BuildCommands: one directory of binaries per list of
// commands, built once per test process.
var builds = struct {
	sync.Mutex
	dirs map[string]string
}{dirs: map[string]string{}}

// BuildCommands builds the project's commands named (orchestrate,
// hiera-services, ...) with go build into one directory, once per test
// process, and returns the directory. The directory stays until the
// process ends: tests running later in the process use the binaries.
func BuildCommands(t testing.TB, names ...string) string {
	t.Helper()
	key := fmt.Sprint(names)
	builds.Lock()
	defer builds.Unlock()
	if dir, ok := builds.dirs[key]; ok {
		return dir
	}
	dir, err := os.MkdirTemp("", "orchestrate-bin-")
	if err != nil {
		t.Fatal(err)
	}
	args := []string{"build", "-o", dir + "/"}
	for _, n := range names {
		args = append(args, "github.com/jiocloud/orchestrate/cmd/"+n)
	}
	if out, err := exec.Command("go", args...).CombinedOutput(); err != nil {
		t.Fatalf("go %v: %v\n%s", args, err, out)
	}
	builds.dirs[key] = dir
	return dir
}

// PuppetApply runs Debian's puppet apply with args (--detailed-exitcodes
// and --color=false added, and puppet's own directories in a new
// temporary one) and returns its exit code (0 no change, 2 changes, 1, 4
// or 6 a failure) and its output without Facter's complaints about the
// host (/proc/1/environ), which are not the catalog's.
func PuppetApply(t testing.TB, args ...string) (int, string) {
	t.Helper()
	return PuppetApplyIn(t, t.TempDir(), nil, args...)
}

// PuppetApplyIn is PuppetApply with puppet's directories under dir, kept
// from one run to the next (its catalog summary, say), and env added to
// the environment.
func PuppetApplyIn(t testing.TB, dir string, env []string, args ...string) (int, string) {
	t.Helper()
	puppet := RequirePuppet(t)
	all := []string{"apply", "--detailed-exitcodes", "--color=false"}
	for _, d := range []string{"confdir", "vardir", "codedir", "logdir", "rundir"} {
		all = append(all, "--"+d, filepath.Join(dir, d))
	}
	cmd := exec.Command(puppet, append(all, args...)...)
	cmd.Env = append(os.Environ(), env...)
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	err := cmd.Run()
	code := 0
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		code = ee.ExitCode()
	} else if err != nil {
		t.Fatal(err)
	}
	var lines []string
	for _, l := range strings.Split(out.String(), "\n") {
		if !strings.Contains(l, "Facter: ") {
			lines = append(lines, l)
		}
	}
	return code, strings.Join(lines, "\n")
}

// RepoRoot walks up from the working directory to orchestrate's go.mod: a
// test's way to the repository's scripts and binaries.
func RepoRoot() (string, error) {
	dir, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for {
		data, err := os.ReadFile(filepath.Join(dir, "go.mod"))
		if err == nil && bytes.HasPrefix(bytes.TrimSpace(data), []byte("module github.com/jiocloud/orchestrate\n")) {
			return dir, nil
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", errors.New("not inside the orchestrate module")
		}
		dir = parent
	}
}
