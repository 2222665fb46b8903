// Package debs builds the Debian packages the lab's servers install: the
// project's own (orchestrate, by `make package`), consul (the Consul
// binary the project builds, in HashiCorp's package layout) and
// orchestrate-lab-roles (the sample roles' Puppet module). Each is built
// with the nfpm the Makefile pins, and the same inputs give the same
// bytes: image.Ensure keys its cache on the consul package's hash.
package debs

import (
	"context"
	"crypto/sha256"
	"embed"
	"encoding/hex"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"strings"

	"github.com/jiocloud/orchestrate/lab/internal/labenv"
)

// files holds the packages' nfpm configurations and the consul package's
// unit, configuration and maintainer scripts.
//
//go:embed consul roles
var files embed.FS

// Epoch is SOURCE_DATE_EPOCH for the consul and roles packages: every
// timestamp in them, so that the same inputs make the same .deb.
const Epoch = "1700000000"

// consulVersion reads "Consul v1.22.6" from `consul version`.
var consulVersion = regexp.MustCompile(`\AConsul v([0-9]+\.[0-9]+\.[0-9]+)\n`)

// debVersion is a Debian version the lab writes into a package.
var debVersion = regexp.MustCompile(`\A[0-9][A-Za-z0-9.+~-]*\z`)

// Consul builds out/consul_<version>-1_amd64.deb from the Consul binary
// consulBin (its version from `consul version`) and returns its path: the
// binary as /usr/bin/consul, the system user consul, /etc/consul.d with
// consul.hcl (data_dir /opt/consul) and consul.env, /opt/consul, and
// consul.service running `consul agent -config-dir=/etc/consul.d/`, as
// HashiCorp's package has them.
func Consul(ctx context.Context, consulBin, out string) (string, error) {
	v, err := labenv.Output(ctx, "", nil, consulBin, "version")
	if err != nil {
		return "", fmt.Errorf("consul package: %w", err)
	}
	m := consulVersion.FindSubmatch(v)
	if m == nil {
		return "", fmt.Errorf("consul package: %s version printed %q, want \"Consul vX.Y.Z\" first", consulBin, firstLine(v))
	}
	version := string(m[1]) + "-1"
	stage, err := stageEmbedded("consul")
	if err != nil {
		return "", err
	}
	defer os.RemoveAll(stage)
	if err := copyFile(consulBin, filepath.Join(stage, "consul"), 0o755); err != nil {
		return "", fmt.Errorf("consul package: %w", err)
	}
	return nfpm(ctx, stage, out, "consul_"+version+"_amd64.deb", "CONSUL_DEB_VERSION="+version)
}

// ConsulKey is a hash of everything Consul's package is made of (the
// binary, this package's consul files, Epoch): the same key, the same
// .deb, so a cache keyed on it need not build the package to know.
func ConsulKey(consulBin string) (string, error) {
	h := sha256.New()
	f, err := os.Open(consulBin)
	if err != nil {
		return "", fmt.Errorf("consul package: %w", err)
	}
	defer f.Close()
	if _, err := io.Copy(h, f); err != nil {
		return "", fmt.Errorf("consul package: %s: %w", consulBin, err)
	}
	err = fs.WalkDir(files, "consul", func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		b, err := files.ReadFile(p)
		fmt.Fprintf(h, "\x00%s\x00%d\x00%s", p, len(b), b)
		return err
	})
	fmt.Fprintf(h, "\x00epoch %s", Epoch)
	return hex.EncodeToString(h.Sum(nil)), err
}

// Roles builds out/orchestrate-lab-roles_<version>_all.deb from the
// repository root's lab/puppet/modules/labroles and examples/hiera.yaml
// and returns its path. version is a Debian version; "" is the tree's own,
// as `make package` gives orchestrate (scripts/version.sh --deb).
func Roles(ctx context.Context, root, out, version string) (string, error) {
	if version == "" {
		v, err := labenv.Output(ctx, root, nil, filepath.Join(root, "scripts/version.sh"), "--deb")
		if err != nil {
			return "", fmt.Errorf("roles package: %w", err)
		}
		version = strings.TrimSpace(string(v))
	}
	if !debVersion.MatchString(version) {
		return "", fmt.Errorf("roles package: version %q is not a Debian version (a digit, then letters, digits and .+~-)", version)
	}
	stage, err := stageEmbedded("roles")
	if err != nil {
		return "", err
	}
	defer os.RemoveAll(stage)
	if err := copyTree(filepath.Join(root, "lab/puppet/modules/labroles"), filepath.Join(stage, "labroles")); err != nil {
		return "", fmt.Errorf("roles package: %w", err)
	}
	if err := copyFile(filepath.Join(root, "examples/hiera.yaml"), filepath.Join(stage, "hiera.yaml"), 0o644); err != nil {
		return "", fmt.Errorf("roles package: %w", err)
	}
	return nfpm(ctx, stage, out, "orchestrate-lab-roles_"+version+"_all.deb", "ROLES_DEB_VERSION="+version)
}

// Orchestrate runs `make package DIST=out` at the repository root and
// returns the path of the package it printed last.
func Orchestrate(ctx context.Context, root, out string) (string, error) {
	b, err := labenv.Output(ctx, root, nil, "make", "--no-print-directory", "package", "DIST="+out)
	if err != nil {
		return "", fmt.Errorf("orchestrate package: %w", err)
	}
	lines := strings.Split(strings.TrimSpace(string(b)), "\n")
	deb := lines[len(lines)-1]
	if !strings.HasSuffix(deb, ".deb") {
		return "", fmt.Errorf("orchestrate package: make package printed %q last, want the .deb's path", deb)
	}
	return deb, nil
}

// nfpm runs nfpm in stage on its nfpm.yaml and moves the package to
// out/name, replacing a package of the same name only once it is whole.
func nfpm(ctx context.Context, stage, out, name string, env ...string) (string, error) {
	if err := os.MkdirAll(out, 0o755); err != nil {
		return "", err
	}
	tmp := filepath.Join(stage, name)
	args := append(labenv.NFPM()[1:], "package", "--config", "nfpm.yaml", "--packager", "deb", "--target", tmp)
	env = append(env, "SOURCE_DATE_EPOCH="+Epoch)
	if err := labenv.Run(ctx, stage, env, labenv.NFPM()[0], args...); err != nil {
		return "", fmt.Errorf("nfpm %s: %w", name, err)
	}
	dst := filepath.Join(out, name)
	if err := copyFile(tmp, dst+".tmp", 0o644); err != nil {
		return "", err
	}
	return dst, os.Rename(dst+".tmp", dst)
}

// stageEmbedded writes the embedded directory dir into a new temporary
// directory, scripts executable, and returns it.
func stageEmbedded(dir string) (string, error) {
	stage, err := os.MkdirTemp("", "orchestrate-lab-deb-")
	if err != nil {
		return "", err
	}
	err = fs.WalkDir(files, dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		b, err := files.ReadFile(p)
		if err != nil {
			return err
		}
		mode := os.FileMode(0o644)
		if strings.HasPrefix(string(b), "#!") {
			mode = 0o755
		}
		return os.WriteFile(filepath.Join(stage, filepath.Base(p)), b, mode)
	})
	if err != nil {
		os.RemoveAll(stage)
		return "", err
	}
	return stage, nil
}

// copyTree copies the regular files under src to dst, each mode 0644 and
// every directory 0755, whatever the checkout's umask made them.
func copyTree(src, dst string) error {
	return filepath.WalkDir(src, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, err := filepath.Rel(src, p)
		if err != nil {
			return err
		}
		switch {
		case d.IsDir():
			return os.MkdirAll(filepath.Join(dst, rel), 0o755)
		case !d.Type().IsRegular():
			return fmt.Errorf("%s is not a regular file", p)
		}
		return copyFile(p, filepath.Join(dst, rel), 0o644)
	})
}

// copyFile copies src to dst with mode.
func copyFile(src, dst string, mode os.FileMode) error {
	in, err := os.Open(src)
	if err != nil {
		return err
	}
	defer in.Close()
	out, err := os.OpenFile(dst, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, mode)
	if err != nil {
		return err
	}
	if _, err := io.Copy(out, in); err != nil {
		out.Close()
		return err
	}
	if err := out.Close(); err != nil {
		return err
	}
	return os.Chmod(dst, mode)
}

// firstLine is b's first line, for an error.
func firstLine(b []byte) string {
	s, _, _ := strings.Cut(string(b), "\n")
	return s
}
