// Package repo makes the lab's apt repository: a flat repository (apt
// source "deb [signed-by=KEYRING] URL ./") holding the .deb files it is
// given, its Packages index and a Release file signed with a key the lab
// generates once, served over HTTP. The servers' user data adds it as the
// shipped example adds an operator's repository: the source line and the
// armoured public key Build returns.
package repo

import (
	"bytes"
	"compress/gzip"
	"context"
	"crypto/md5"
	"crypto/sha1"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"hash"
	"io"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"time"

	"github.com/jiocloud/orchestrate/lab/internal/labenv"
)

// KeyUID names the lab's repository signing key in its GNUPGHOME.
const KeyUID = "orchestrate lab repository <lab-repo@orchestrate.invalid>"

// Origin is the Release file's Origin and Label.
const Origin = "orchestrate-lab"

// A package's name, version and architecture, as Debian allows them (the
// version without its epoch goes into the file name).
var (
	pkgName    = regexp.MustCompile(`\A[a-z0-9][a-z0-9+.-]+\z`)
	pkgVersion = regexp.MustCompile(`\A([0-9]+:)?[0-9][A-Za-z0-9.+~-]*\z`)
	pkgArch    = regexp.MustCompile(`\A[a-z0-9-]+\z`)
)

// deb is one package of the repository.
type deb struct {
	src     string // the .deb given
	name    string // its file name in the repository
	control string // its control paragraph, as dpkg-deb prints it
	pkg     string // Package, Version and Architecture
	version string
	arch    string
}

// Build makes dir a flat apt repository of exactly debs and returns the
// ASCII-armoured public key that signs it. It copies each package in as
// PACKAGE_VERSION_ARCH.deb, writes Packages, Packages.gz and Release with
// their sizes and hashes, signs Release (InRelease, clear-signed, and
// Release.gpg, detached) with the lab's key, and removes any other .deb.
// The key is made on first use, without a passphrase, in $LAB_DIR/gnupg,
// which must not be under dir (dir is served). Every file is written
// beside its name and renamed when whole; the index files are renamed
// after the packages they list and before the old packages go, and
// InRelease last. Bad input (no package, a file that is not a .deb, two
// of one name, version and architecture) is refused before anything in
// dir changes.
func Build(ctx context.Context, dir string, debs []string) (string, error) {
	home, err := gnupgHome(dir)
	if err != nil {
		return "", fmt.Errorf("repo: %w", err)
	}
	pkgs, err := readDebs(ctx, debs)
	if err != nil {
		return "", fmt.Errorf("repo: %w", err)
	}
	if err := os.MkdirAll(home, 0o700); err != nil {
		return "", fmt.Errorf("repo: %w", err)
	}
	unlock, err := labenv.Lock(ctx, filepath.Join(home, ".build.lock"))
	if err != nil {
		return "", fmt.Errorf("repo: %w", err)
	}
	defer unlock()
	// gpg starts an agent for the key; it goes when Build is done.
	defer labenv.Run(context.Background(), "", []string{"GNUPGHOME=" + home}, "gpgconf", "--kill", "gpg-agent") //nolint:errcheck
	fpr, pub, err := signingKey(ctx, home)
	if err != nil {
		return "", fmt.Errorf("repo: %w", err)
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", fmt.Errorf("repo: %w", err)
	}
	if err := writeRepo(ctx, dir, home, fpr, pkgs); err != nil {
		return "", fmt.Errorf("repo %s: %w", dir, err)
	}
	return pub, nil
}

// gnupgHome is $LAB_DIR/gnupg, refused when it is dir or under it: the
// private key would be served.
func gnupgHome(dir string) (string, error) {
	if err := labenv.CheckPath(dir); err != nil {
		return "", fmt.Errorf("repository directory: %w", err)
	}
	lab, err := labenv.Dir()
	if err != nil {
		return "", err
	}
	home := filepath.Join(lab, "gnupg")
	if home == dir || strings.HasPrefix(home, dir+"/") || strings.HasPrefix(dir, home+"/") {
		return "", fmt.Errorf("repository directory %s holds or is inside the signing key's %s, and would serve it", dir, home)
	}
	return home, nil
}

// readDebs reads each package's control fields and checks them.
func readDebs(ctx context.Context, paths []string) ([]deb, error) {
	if len(paths) == 0 {
		return nil, errors.New("no package given")
	}
	var out []deb
	seen := map[string]string{}
	for _, p := range paths {
		b, err := labenv.Output(ctx, "", nil, "dpkg-deb", "--field", p)
		if err != nil {
			return nil, fmt.Errorf("%s is not a Debian package: %w", p, err)
		}
		d := deb{src: p, control: controlFields(string(b))}
		d.pkg, d.version, d.arch = field(d.control, "Package"), field(d.control, "Version"), field(d.control, "Architecture")
		switch {
		case !pkgName.MatchString(d.pkg):
			return nil, fmt.Errorf("%s: Package %q is not a Debian package name", p, d.pkg)
		case !pkgVersion.MatchString(d.version):
			return nil, fmt.Errorf("%s: Version %q is not a Debian version", p, d.version)
		case !pkgArch.MatchString(d.arch):
			return nil, fmt.Errorf("%s: Architecture %q is not a Debian architecture", p, d.arch)
		}
		_, upstream, ok := strings.Cut(d.version, ":")
		if !ok {
			upstream = d.version
		}
		d.name = d.pkg + "_" + upstream + "_" + d.arch + ".deb"
		if other, dup := seen[d.name]; dup {
			return nil, fmt.Errorf("%s and %s are both %s %s (%s)", other, p, d.pkg, d.version, d.arch)
		}
		seen[d.name] = p
		out = append(out, d)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].name < out[j].name })
	return out, nil
}

// repoFields are the fields Build writes into the index for a package; a
// package's control file naming one (a Filename pointing elsewhere) has it
// dropped.
var repoFields = []string{"Filename:", "Size:", "MD5sum:", "SHA1:", "SHA256:"}

// controlFields is a package's control paragraph without the fields Build
// writes, and without blank lines, which would end the paragraph.
func controlFields(control string) string {
	var out []string
	skip := false
	for _, l := range strings.Split(control, "\n") {
		if strings.TrimSpace(l) == "" {
			continue
		}
		if !strings.HasPrefix(l, " ") && !strings.HasPrefix(l, "\t") {
			skip = false
			for _, f := range repoFields {
				skip = skip || strings.HasPrefix(l, f)
			}
		}
		if !skip {
			out = append(out, l)
		}
	}
	return strings.Join(out, "\n")
}

// field is the value of a single-line field of a control paragraph.
func field(control, name string) string {
	for _, l := range strings.Split(control, "\n") {
		if v, ok := strings.CutPrefix(l, name+":"); ok {
			return strings.TrimSpace(v)
		}
	}
	return ""
}

// sums are a file's size and the hashes apt checks.
type sums struct {
	size                int64
	md5, sha1, sha256hx string
}

// sumOf hashes b.
func sumOf(b []byte) sums {
	var s sums
	s.size, s.md5, s.sha1, s.sha256hx = hashAll(bytes.NewReader(b))
	return s
}

// hashAll reads r to the end and returns its size and MD5, SHA-1 and
// SHA-256 in hex.
func hashAll(r io.Reader) (int64, string, string, string) {
	hs := []hash.Hash{md5.New(), sha1.New(), sha256.New()}
	n, _ := io.Copy(io.MultiWriter(hs[0], hs[1], hs[2]), r)
	return n, hex.EncodeToString(hs[0].Sum(nil)), hex.EncodeToString(hs[1].Sum(nil)), hex.EncodeToString(hs[2].Sum(nil))
}

// writeRepo copies the packages in, writes and signs the index, and
// removes the packages no longer listed.
func writeRepo(ctx context.Context, dir, home, fpr string, pkgs []deb) error {
	var index bytes.Buffer
	for _, d := range pkgs {
		s, err := copyIn(d.src, filepath.Join(dir, d.name))
		if err != nil {
			return err
		}
		fmt.Fprintf(&index, "%s\nFilename: ./%s\nSize: %d\nMD5sum: %s\nSHA1: %s\nSHA256: %s\n\n",
			d.control, d.name, s.size, s.md5, s.sha1, s.sha256hx)
	}
	var gz bytes.Buffer
	zw, _ := gzip.NewWriterLevel(&gz, gzip.BestCompression)
	zw.Write(index.Bytes()) //nolint:errcheck // a bytes.Buffer does not fail
	if err := zw.Close(); err != nil {
		return err
	}
	release := releaseFile(map[string][]byte{"Packages": index.Bytes(), "Packages.gz": gz.Bytes()}, pkgs)
	work, err := os.MkdirTemp(dir, ".build-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(work)
	files := map[string][]byte{"Packages": index.Bytes(), "Packages.gz": gz.Bytes(), "Release": release}
	for name, b := range files {
		if err := os.WriteFile(filepath.Join(work, name), b, 0o644); err != nil {
			return err
		}
	}
	if err := sign(ctx, home, fpr, work); err != nil {
		return err
	}
	for _, name := range []string{"Packages", "Packages.gz", "Release", "Release.gpg", "InRelease"} {
		if err := os.Rename(filepath.Join(work, name), filepath.Join(dir, name)); err != nil {
			return err
		}
	}
	return removeUnlisted(dir, pkgs)
}

// copyIn copies a package to dst through a temporary file and returns its
// sums.
func copyIn(src, dst string) (sums, error) {
	in, err := os.Open(src)
	if err != nil {
		return sums{}, err
	}
	defer in.Close()
	tmp, err := os.CreateTemp(filepath.Dir(dst), ".deb-")
	if err != nil {
		return sums{}, err
	}
	defer os.Remove(tmp.Name())
	var s sums
	s.size, s.md5, s.sha1, s.sha256hx = hashAll(io.TeeReader(in, tmp))
	if err := tmp.Close(); err != nil {
		return sums{}, err
	}
	if fi, err := in.Stat(); err != nil || fi.Size() != s.size {
		return sums{}, fmt.Errorf("copy %s: copied %d bytes (%v)", src, s.size, err)
	}
	if err := os.Chmod(tmp.Name(), 0o644); err != nil {
		return sums{}, err
	}
	return s, os.Rename(tmp.Name(), dst)
}

// releaseFile is the Release file listing the index files.
func releaseFile(index map[string][]byte, pkgs []deb) []byte {
	archs := map[string]bool{}
	for _, d := range pkgs {
		archs[d.arch] = true
	}
	var list []string
	for a := range archs {
		list = append(list, a)
	}
	sort.Strings(list)
	names := []string{"Packages", "Packages.gz"}
	var b bytes.Buffer
	fmt.Fprintf(&b, "Origin: %s\nLabel: %s\nDate: %s\nArchitectures: %s\nDescription: orchestrate lab packages\n",
		Origin, Origin, time.Now().UTC().Format("Mon, 02 Jan 2006 15:04:05 UTC"), strings.Join(list, " "))
	for _, h := range []string{"MD5Sum", "SHA1", "SHA256"} {
		fmt.Fprintf(&b, "%s:\n", h)
		for _, n := range names {
			s := sumOf(index[n])
			sum := map[string]string{"MD5Sum": s.md5, "SHA1": s.sha1, "SHA256": s.sha256hx}[h]
			fmt.Fprintf(&b, " %s %d %s\n", sum, s.size, n)
		}
	}
	return b.Bytes()
}

// removeUnlisted removes every .deb in dir that pkgs does not name.
func removeUnlisted(dir string, pkgs []deb) error {
	keep := map[string]bool{}
	for _, d := range pkgs {
		keep[d.name] = true
	}
	all, err := filepath.Glob(filepath.Join(dir, "*.deb"))
	if err != nil {
		return err
	}
	for _, f := range all {
		if !keep[filepath.Base(f)] {
			if err := os.Remove(f); err != nil {
				return err
			}
		}
	}
	return nil
}
