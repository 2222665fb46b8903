// Command labimage builds what the lab's servers are made of and prints
// how long each part took and how big it is (`make lab-image`):
//
//   - the base image, $LAB_DIR/cache/rootfs-KEY.tar (image.Ensure; cached);
//   - the packages, in $LAB_DIR/debs: orchestrate (make package), consul
//     (bin/consul in HashiCorp's layout) and orchestrate-lab-roles;
//   - the signed apt repository of those packages, $LAB_DIR/repo
//     (repo.Build), and its public key, $LAB_DIR/repo-key.asc.
//
// It needs root (mmdebstrap --mode=root) and the machine's apt sources.
package main

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"path/filepath"
	"syscall"
	"time"

	"github.com/jiocloud/orchestrate/lab/debs"
	"github.com/jiocloud/orchestrate/lab/image"
	"github.com/jiocloud/orchestrate/lab/internal/labenv"
	"github.com/jiocloud/orchestrate/lab/repo"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if len(os.Args) > 1 {
		fmt.Fprintln(os.Stderr, "usage: labimage (no arguments; LAB_DIR, CONSUL_BIN and NFPM from the environment)")
		os.Exit(2)
	}
	if err := run(ctx, os.Stdout); err != nil {
		slog.Error("labimage", "err", err)
		os.Exit(1)
	}
}

// run builds the image, the packages and the repository, printing a line
// for each.
func run(ctx context.Context, w io.Writer) error {
	dir, err := labenv.Dir()
	if err != nil {
		return err
	}
	root, err := labenv.RepoRoot()
	if err != nil {
		return err
	}
	start := time.Now()
	tar, err := image.Ensure(ctx, dir)
	if err != nil {
		return err
	}
	report(w, "image", tar, start)

	out := filepath.Join(dir, "debs")
	if err := os.RemoveAll(out); err != nil {
		return err
	}
	var pkgs []string
	for _, build := range []struct {
		name string
		make func() (string, error)
	}{
		{"orchestrate", func() (string, error) { return debs.Orchestrate(ctx, root, out) }},
		{"consul", func() (string, error) { return debs.Consul(ctx, labenv.ConsulBin(root), out) }},
		{"orchestrate-lab-roles", func() (string, error) { return debs.Roles(ctx, root, out, "") }},
	} {
		start := time.Now()
		deb, err := build.make()
		if err != nil {
			return err
		}
		report(w, build.name, deb, start)
		pkgs = append(pkgs, deb)
	}

	start = time.Now()
	repoDir := filepath.Join(dir, "repo")
	pub, err := repo.Build(ctx, repoDir, pkgs)
	if err != nil {
		return err
	}
	key := filepath.Join(dir, "repo-key.asc")
	if err := os.WriteFile(key+".tmp", []byte(pub), 0o644); err != nil {
		return err
	}
	if err := os.Rename(key+".tmp", key); err != nil {
		return err
	}
	report(w, "repository", repoDir, start)
	fmt.Fprintf(w, "%-22s %s\n", "repository key", key)
	return nil
}

// report prints what was built, where, in how long and its size on disk.
func report(w io.Writer, what, path string, start time.Time) {
	fmt.Fprintf(w, "%-22s %-70s %7.1f s %6d MiB\n", what, path, time.Since(start).Seconds(), size(path)>>20)
}

// size is the bytes of a file, or of every file under a directory.
func size(path string) int64 {
	var n int64
	filepath.Walk(path, func(_ string, fi os.FileInfo, err error) error { //nolint:errcheck
		if err == nil && fi.Mode().IsRegular() {
			n += fi.Size()
		}
		return nil
	})
	return n
}
