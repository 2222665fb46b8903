package main

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"github.com/jiocloud/orchestrate/internal/consultest"
)

// TestDemo runs the whole demo, as `make demo` does, with freshly built
// binaries: every step checks what it shows, so this is the end-to-end test
// of hiera-services, service-blocker, converge and the reaper together.
func TestDemo(t *testing.T) {
	consul := consultest.RequireBinary(t)
	bin := t.TempDir()
	build := exec.Command("go", "build", "-o", bin+"/", "../../cmd/...")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	if err := os.Symlink(consul, filepath.Join(bin, "consul")); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	keep := t.TempDir()
	if err := run(ctx, []string{"--bin", bin, "--keep", keep, "--acl", "../../packaging/acl"}); err != nil {
		t.Fatalf("demo: %v", err)
	}
}
