package cli

import (
	"bytes"
	"context"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
)

func TestWantsVersion(t *testing.T) {
	for _, tc := range []struct {
		name string
		args []string
		want bool
	}{
		{"alone", []string{"--version"}, true},
		{"first, more after", []string{"--version", "--config", "x"}, true},
		{"none", nil, false},
		{"a value of another flag", []string{"--exec", "--version"}, false},
		{"single dash", []string{"-version"}, false},
		{"subcommand", []string{"version"}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := WantsVersion(tc.args); got != tc.want {
				t.Fatalf("WantsVersion(%q) = %v, want %v", tc.args, got, tc.want)
			}
		})
	}
}

// --version answers before the binary's own Run sees the arguments, so it
// needs no flag, configuration or Consul; anything else reaches Run.
func TestRunMainVersion(t *testing.T) {
	called := false
	run := func(ctx context.Context, args []string, stdio IO) int { called = true; return 7 }
	var out bytes.Buffer
	if code := runMain("reaper", run, []string{"--version"}, IO{Stdout: &out}); code != 0 || called {
		t.Fatalf("--version: exit %d, run called %v", code, called)
	}
	want := "reaper dev (commit unknown, " + runtime.Version() + " " + runtime.GOOS + "/" + runtime.GOARCH + ")\n"
	if out.String() != want {
		t.Fatalf("--version printed %q, want %q", out.String(), want)
	}
	if code := runMain("reaper", run, []string{"--config", "x"}, IO{Stdout: &out}); code != 7 || !called {
		t.Fatalf("other arguments: exit %d, run called %v", code, called)
	}
}

// The Makefile's -ldflags reach the variables: a binary built as `make
// build` builds it prints the stamped version and commit.
func TestStampedVersion(t *testing.T) {
	if testing.Short() {
		t.Skip("builds a binary")
	}
	bin := filepath.Join(t.TempDir(), "orchestrate")
	ld := "-X github.com/jiocloud/orchestrate/internal/cli.version=v1.2.3-4-gabcdef0-dirty -X github.com/jiocloud/orchestrate/internal/cli.commit=abcdef0123"
	if out, err := exec.Command("go", "build", "-ldflags", ld, "-o", bin, "github.com/jiocloud/orchestrate/cmd/orchestrate").CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	out, err := exec.Command(bin, "--version").Output()
	if err != nil {
		t.Fatalf("orchestrate --version: %v", err)
	}
	if want := "orchestrate v1.2.3-4-gabcdef0-dirty (commit abcdef0123, " + runtime.Version(); !strings.HasPrefix(string(out), want) {
		t.Fatalf("orchestrate --version = %q, want it to start %q", out, want)
	}
}
