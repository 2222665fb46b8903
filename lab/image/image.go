// Package image builds the lab's base image once and makes each
// container's root filesystem from it.
//
// The image is a Debian bookworm root filesystem from mmdebstrap
// (--variant=minbase) holding what an operator's cloud image holds for
// orchestrate: systemd, Debian's cloud-init and puppet, and Consul
// installed from a consul .deb (lab/debs) with dpkg. customize.sh makes it
// a cloud image for this lab (NoCloud only, no apt source). It is cached as $LAB_DIR/cache/rootfs-KEY.tar, KEY a hash of
// everything it is made of, and rebuilt only when one of those changes.
package image

import (
	"context"
	"crypto/sha256"
	_ "embed"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/jiocloud/orchestrate/lab/debs"
	"github.com/jiocloud/orchestrate/lab/internal/labenv"
)

// Suite is the Debian release of the image: the host's (Debian 12), whose
// Nova, puppet and cloud-init the lab runs.
const Suite = "bookworm"

// Package is one package mmdebstrap installs into the image besides
// minbase, with why the image needs it.
type Package struct {
	Name, Why string
}

// Packages are what the image carries besides minbase (Priority:
// required) and Consul. Everything else a server runs arrives the way it
// would on a cloud: through cloud-init and the lab's apt repository.
var Packages = []Package{
	{"systemd", "PID 1: systemd-nspawn --boot runs the image's own init, which starts cloud-init, Consul and the roles' units"},
	{"systemd-sysv", "/sbin/init, and poweroff and halt for a clean power-off"},
	{"dbus", "the system bus: systemctl's and hostnamectl's calls (cloud-init sets the hostname through it)"},
	{"iproute2", "ip, to see and change a container's address and links from inside (the hypervisor, partitions, debugging)"},
	{"cloud-init", "runs the Nova server's user data from the NoCloud seed on first boot"},
	{"puppet", "Debian's puppet: puppet apply of class orchestrate and the role, from the user data and from converge"},
	{"python3", "the roles' services (python3 -m http.server) and their validation checks"},
	{"ca-certificates", "what apt and cloud-init trust for an https source, as an operator's image has it (the lab repository is plain HTTP: its signature is what apt checks)"},
	{"gnupg", "cloud-init's apt module turns the user data's armoured repository key into the keyring $KEY_FILE names with gpg"},
}

//go:embed customize.sh
var customize []byte

// Key is the cache key of the image consulBin makes: a hash of the suite,
// the packages, customize.sh, mmdebstrap's version and the consul
// package's inputs (debs.ConsulKey). The mirror's state is not in it: a
// cached image stays until one of these changes, or is removed.
func Key(ctx context.Context, consulBin string) (string, error) {
	consul, err := debs.ConsulKey(consulBin)
	if err != nil {
		return "", err
	}
	mm, err := labenv.Output(ctx, "", nil, "mmdebstrap", "--version")
	if err != nil {
		return "", err
	}
	h := sha256.New()
	fmt.Fprintf(h, "suite %s\x00mmdebstrap %s\x00consul %s\x00", Suite, strings.TrimSpace(string(mm)), consul)
	for _, p := range Packages {
		fmt.Fprintf(h, "package %s\x00", p.Name)
	}
	fmt.Fprintf(h, "customize %d\x00%s", len(customize), customize)
	return hex.EncodeToString(h.Sum(nil))[:16], nil
}

// Ensure returns the image's tar under dir/cache, building it first when
// the cache has none for the current Key (bin/consul, or $CONSUL_BIN). A
// build writes beside the cache entry and renames it into place when whole;
// two processes building at once take turns, and the second finds the
// first's. A successful build removes older images.
func Ensure(ctx context.Context, dir string) (string, error) {
	if err := labenv.CheckPath(dir); err != nil {
		return "", fmt.Errorf("image: lab directory: %w", err)
	}
	root, err := labenv.RepoRoot()
	if err != nil {
		return "", fmt.Errorf("image: %w", err)
	}
	consulBin := labenv.ConsulBin(root)
	key, err := Key(ctx, consulBin)
	if err != nil {
		return "", fmt.Errorf("image: %w", err)
	}
	cache := filepath.Join(dir, "cache")
	tar := filepath.Join(cache, "rootfs-"+key+".tar")
	if _, err := os.Stat(tar); err == nil {
		return tar, nil
	}
	if err := os.MkdirAll(cache, 0o755); err != nil {
		return "", fmt.Errorf("image: %w", err)
	}
	unlock, err := labenv.Lock(ctx, filepath.Join(cache, ".image.lock"))
	if err != nil {
		return "", fmt.Errorf("image: %w", err)
	}
	defer unlock()
	if _, err := os.Stat(tar); err == nil {
		return tar, nil // built while we waited
	}
	if err := build(ctx, consulBin, tar); err != nil {
		return "", fmt.Errorf("image: %w", err)
	}
	removeOlder(cache, tar)
	return tar, nil
}

// build runs mmdebstrap into tar.tmp, with the consul package built into a
// temporary directory and customize.sh as its customize hook, and renames
// the result to tar. mmdebstrap's log is tar's name with .log.
func build(ctx context.Context, consulBin, tar string) error {
	// What a build killed half way left (the caller holds the lock: no
	// build is running).
	stale, _ := filepath.Glob(filepath.Join(filepath.Dir(tar), ".build-*"))
	tmps, _ := filepath.Glob(filepath.Join(filepath.Dir(tar), "rootfs-*.tar.tmp"))
	for _, p := range append(stale, tmps...) {
		os.RemoveAll(p)
	}
	work, err := os.MkdirTemp(filepath.Dir(tar), ".build-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(work)
	deb, err := debs.Consul(ctx, consulBin, work)
	if err != nil {
		return err
	}
	hook := filepath.Join(work, "customize.sh")
	if err := os.WriteFile(hook, customize, 0o755); err != nil {
		return err
	}
	if err := labenv.CheckPath(hook); err != nil {
		return err
	}
	names := make([]string, len(Packages))
	for i, p := range Packages {
		names[i] = p.Name
	}
	tmp := tar + ".tmp"
	// --format=tar: mmdebstrap would take the name's .tmp for a directory.
	args := []string{"--variant=minbase", "--mode=root", "--format=tar", "--include=" + strings.Join(names, ","),
		"--customize-hook=sh " + hook + ` "$1" ` + deb, Suite, tmp}
	if err := labenv.RunLogged(ctx, strings.TrimSuffix(tar, ".tar")+".log", "mmdebstrap", args...); err != nil {
		os.Remove(tmp)
		return err
	}
	return os.Rename(tmp, tar)
}

// removeOlder removes every other image tar in cache, and the extracted
// root (lower directory) of each that no overlay mount still uses.
func removeOlder(cache, keep string) {
	old, _ := filepath.Glob(filepath.Join(cache, "rootfs-*.tar"))
	for _, t := range old {
		if t != keep {
			os.Remove(t)
			os.Remove(strings.TrimSuffix(t, ".tar") + ".log")
			os.Remove(t + ".lock")
		}
	}
	dirs, _ := filepath.Glob(filepath.Join(cache, "rootfs-*"))
	for _, d := range dirs {
		if fi, err := os.Lstat(d); err != nil || !fi.IsDir() || strings.Contains(filepath.Base(d), ".") || d == strings.TrimSuffix(keep, ".tar") {
			continue
		}
		if inUse, err := lowerInUse(d); err == nil && !inUse {
			os.Remove(d + ".extracted")
			os.RemoveAll(d)
		}
	}
}

// errNotTar is returned for an image path that is not a .tar.
var errNotTar = errors.New("not an image tar (rootfs-KEY.tar)")
