package main

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
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
	args := []string{"build", "-o", bin + "/"}
	for _, b := range binaries {
		args = append(args, "../"+b)
	}
	build := exec.Command("go", args...)
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

// TestCheckBin: the demo refuses a --bin directory that lacks a program it
// runs, naming it, before it starts anything.
func TestCheckBin(t *testing.T) {
	dir := t.TempDir()
	if err := checkBin(dir); err == nil || !strings.Contains(err.Error(), "no program consul") {
		t.Fatalf("empty dir: %v, want it to name consul", err)
	}
	for _, name := range append([]string{"consul"}, binaries...) {
		if err := os.WriteFile(filepath.Join(dir, name), []byte("#!/bin/sh\n"), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	if err := checkBin(dir); err != nil {
		t.Fatalf("complete dir: %v", err)
	}
	if err := os.Remove(filepath.Join(dir, "reaper")); err != nil {
		t.Fatal(err)
	}
	if err := os.Mkdir(filepath.Join(dir, "reaper"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := checkBin(dir); err == nil || !strings.Contains(err.Error(), "no program reaper") {
		t.Fatalf("reaper a directory: %v, want it to name reaper", err)
	}
}
