package main

import (
	"errors"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/jiocloud/orchestrate/internal/consultest"
)

// TestBinaryAgainstAgent builds the real binary and runs the foundation
// issue's shell session with it against a real dev agent, checking exit
// codes as a shell sees them.
func TestBinaryAgainstAgent(t *testing.T) {
	a := consultest.Start(t, consultest.Options{})
	bin := filepath.Join(t.TempDir(), "orchestrate")
	if out, err := exec.Command("go", "build", "-o", bin, ".").CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	run := func(want int, args ...string) string {
		t.Helper()
		cmd := exec.Command(bin, args...)
		cmd.Env = a.Env()
		out, err := cmd.CombinedOutput()
		code := 0
		var ee *exec.ExitError
		if errors.As(err, &ee) {
			code = ee.ExitCode()
		} else if err != nil {
			t.Fatal(err)
		}
		if code != want {
			t.Fatalf("orchestrate %s: exit %d, want %d\n%s", strings.Join(args, " "), code, want, out)
		}
		return string(out)
	}
	run(0, "trigger-update", "v2")
	run(0, "report-version", "v1", "--host", "h1")
	run(0, "report-version", "v2", "--host", "h1")
	run(0, "verify-hosts", "v2", "h1")
	if out := run(1, "verify-hosts", "v2", "h1", "h2"); !strings.Contains(out, "h2") {
		t.Fatalf("verify-hosts did not name h2: %s", out)
	}
	run(0, "update-status", "puppet", "failed", "--host", "h1")
	run(1, "get-failures")
	run(0, "update-status", "puppet", "success", "--host", "h1")
	ks, _, err := a.Client.KV().Keys("orchestrate/hosts/h1/status/", "", nil)
	if err != nil || len(ks) != 1 || ks[0] != "orchestrate/hosts/h1/status/puppet" {
		t.Fatalf("h1's status keys = %v (%v), want exactly its puppet record", ks, err)
	}
	run(0, "get-failures")
	run(2, "update-status", "puppet", "nope", "--host", "h1")
	run(0, "--help")
}
