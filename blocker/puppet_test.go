package blocker

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/jiocloud/orchestrate/internal/consultest"
	"github.com/jiocloud/orchestrate/internal/testutil"
)

// puppetApply starts `puppet apply` of manifest with puppet/ as the
// module path, with every Puppet directory under a temporary one.
func puppetApply(t *testing.T, puppet, manifest string) (*exec.Cmd, *bytes.Buffer) {
	t.Helper()
	modules, err := filepath.Abs(filepath.Join("..", "puppet"))
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	path := filepath.Join(dir, "site.pp")
	if err := os.WriteFile(path, []byte(manifest), 0o644); err != nil {
		t.Fatal(err)
	}
	args := []string{"apply", "--modulepath", modules, "--detailed-exitcodes", "--color=false"}
	for _, d := range []string{"confdir", "vardir", "codedir", "logdir", "rundir"} {
		args = append(args, "--"+d, filepath.Join(dir, d))
	}
	cmd := exec.Command(puppet, append(args, path)...)
	out := new(bytes.Buffer)
	cmd.Stdout, cmd.Stderr = out, out
	if err := cmd.Start(); err != nil {
		t.Fatalf("puppet apply: %v", err)
	}
	return cmd, out
}

func puppetWait(t *testing.T, cmd *exec.Cmd, out *bytes.Buffer) (int, string) {
	t.Helper()
	err := cmd.Wait()
	code := 0
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		code = ee.ExitCode()
	} else if err != nil {
		t.Fatalf("puppet apply: %v", err)
	}
	// Facter in a container complains about /proc/1/environ; that is noise.
	var lines []string
	for _, l := range strings.Split(out.String(), "\n") {
		if !strings.Contains(l, "Facter: Permission denied") {
			lines = append(lines, l)
		}
	}
	text := strings.Join(lines, "\n")
	t.Logf("puppet apply exit %d:\n%s", code, text)
	return code, text
}

// waitRunning waits until a process whose command line holds every one of
// parts is running (the blocker the exec started).
func waitRunning(t *testing.T, parts ...string) {
	t.Helper()
	deadline := time.Now().Add(60 * time.Second)
	for time.Now().Before(deadline) {
		procs, _ := filepath.Glob("/proc/[0-9]*/cmdline")
		for _, p := range procs {
			data, err := os.ReadFile(p)
			if err != nil {
				continue
			}
			cmdline := strings.ReplaceAll(string(data), "\x00", " ")
			all := true
			for _, part := range parts {
				all = all && strings.Contains(cmdline, part)
			}
			if all {
				return
			}
		}
		time.Sleep(50 * time.Millisecond)
	}
	t.Fatalf("no process running %q", parts)
}

const blockerManifest = `
orchestrate::service_blocker { 'web':
  count         => %d,
  binary        => '%s',
  dns           => '%s',
  consul_addr   => '%s',
  timeout       => %d,
  interval      => '200ms',
  max_interval  => '1s',
  check_timeout => 1,
}
-> notify { 'web is ready': }
`

// A real `puppet apply` of the module's defined type: the dependent notify runs
// only after the service reached its count while the blocker waited, and
// when it never does the run fails with the blocker's message and skips
// the notify.
func TestPuppetApply(t *testing.T) {
	puppet := testutil.RequirePuppet(t)
	bin := binary(t)
	for _, f := range []string{"orchestrate/manifests/service_blocker.pp", "orchestrate/examples/service_blocker.pp"} {
		out, err := exec.Command(puppet, "parser", "validate", filepath.Join("..", "puppet", f)).CombinedOutput()
		if err != nil || len(out) > 0 {
			t.Fatalf("puppet parser validate %s: %v\n%s", f, err, out)
		}
	}
	a := consultest.Start(t, consultest.Options{})
	register(t, a, service{id: "web-1", name: "web", port: 8081})
	waitCatalog(t, a, "web", "", 1)

	t.Run("waits for the second instance", func(t *testing.T) {
		cmd, out := puppetApply(t, puppet, fmt.Sprintf(blockerManifest, 2, bin, a.DNSAddr, a.HTTPAddr, 60))
		// The unless check (1s) found 1/2, so the exec now waits.
		waitRunning(t, bin, "--timeout 60s", "web:2")
		// Its first answer (1/2) comes before the registration: Puppet
		// shows the exec's output only when it ends, so nothing tells when.
		time.Sleep(500 * time.Millisecond)
		register(t, a, service{id: "web-2", name: "web", port: 8082})
		code, text := puppetWait(t, cmd, out)
		if code != 2 { // --detailed-exitcodes: changes, no failures
			t.Fatalf("puppet apply exit %d, want 2", code)
		}
		waiting := strings.Index(text, "web: 1/2 addressable (127.0.0.1:8081)")
		met := strings.Index(text, "web: 2/2 addressable (127.0.0.1:8081, 127.0.0.1:8082)")
		notified := strings.Index(text, "Notice: web is ready")
		if waiting < 0 || met < waiting || notified < met {
			t.Fatalf("want the blocker waiting at 1/2, then 2/2, then the notify; got positions %d, %d, %d", waiting, met, notified)
		}
	})

	t.Run("already met: no change from the blocker", func(t *testing.T) {
		waitCatalog(t, a, "web", "", 2)
		cmd, out := puppetApply(t, puppet, fmt.Sprintf(blockerManifest, 2, bin, a.DNSAddr, a.HTTPAddr, 60))
		code, text := puppetWait(t, cmd, out)
		if code != 2 || !strings.Contains(text, "Notice: web is ready") {
			t.Fatalf("puppet apply exit %d, want 2 with the notify", code)
		}
		if strings.Contains(text, "Exec[service-blocker web]") {
			t.Fatalf("the exec ran although its unless check should have found 2/2")
		}
	})

	t.Run("never enough: the run fails with the blocker's message", func(t *testing.T) {
		cmd, out := puppetApply(t, puppet, fmt.Sprintf(blockerManifest, 3, bin, a.DNSAddr, a.HTTPAddr, 2))
		code, text := puppetWait(t, cmd, out)
		if code != 4 && code != 6 { // --detailed-exitcodes: failures
			t.Fatalf("puppet apply exit %d, want 4 or 6 (failures)", code)
		}
		for _, want := range []string{
			"service-blocker: timed out: web: 2/3 after 2s",
			"returned 1 instead of one of [0]",
			"Notify[web is ready]: Skipping because of failed dependencies",
		} {
			if !strings.Contains(text, want) {
				t.Errorf("puppet output lacks %q", want)
			}
		}
		if strings.Contains(text, "Notice: web is ready") {
			t.Errorf("the notify ran although the blocker failed")
		}
	})
}
