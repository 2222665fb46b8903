package image

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"

	"github.com/jiocloud/orchestrate/lab/internal/labenv"
)

// stateSuffix names the directory beside a container root that holds its
// own state (an overlay's upper and work directories). Remove removes
// only a root that has one, so it never removes a directory Root did not
// make.
const stateSuffix = ".lab"

// tarArgs extract an image as mmdebstrap packed it: owners by number,
// modes and extended attributes kept.
var tarArgs = []string{"--numeric-owner", "--xattrs", "--xattrs-include=*", "-xpf"}

// Root makes dest a container root filesystem from the image tar: an
// overlay whose lower layer is the image extracted once (beside the tar,
// shared by every container and never written) and whose upper layer,
// in dest.lab, takes the container's writes. dest must not exist. An
// overlay is made in milliseconds and costs no disk until the container
// writes; a full extraction (Extract) takes seconds and the image's size
// each (lab/README.md has the figures). Remove undoes it.
func Root(ctx context.Context, tar, dest string) (err error) {
	if err := checkTar(tar); err != nil {
		return err
	}
	state, err := newRoot(dest)
	if err != nil {
		return err
	}
	defer func() {
		if err != nil { // nothing mounted: leave nothing behind
			os.RemoveAll(dest)
			os.RemoveAll(state)
		}
	}()
	lower, err := Lower(ctx, tar)
	if err != nil {
		return fmt.Errorf("image root %s: %w", dest, err)
	}
	upper, work := filepath.Join(state, "upper"), filepath.Join(state, "work")
	for _, d := range []string{upper, work, dest} {
		if err := os.Mkdir(d, 0o755); err != nil {
			return fmt.Errorf("image root %s: %w", dest, err)
		}
	}
	opts := "lowerdir=" + lower + ",upperdir=" + upper + ",workdir=" + work
	if err := syscall.Mount("overlay", dest, "overlay", 0, opts); err != nil {
		return fmt.Errorf("image root %s: mount overlay %s: %w", dest, opts, err)
	}
	return nil
}

// Extract makes dest a container root filesystem by extracting the whole
// image tar into it: what Root's overlay was measured against. dest must
// not exist; Remove removes it.
func Extract(ctx context.Context, tar, dest string) (err error) {
	if err := checkTar(tar); err != nil {
		return err
	}
	state, err := newRoot(dest)
	if err != nil {
		return err
	}
	defer func() {
		if err != nil { // a partial extraction is no root
			os.RemoveAll(dest)
			os.RemoveAll(state)
		}
	}()
	if err := os.Mkdir(dest, 0o755); err != nil {
		return fmt.Errorf("image root %s: %w", dest, err)
	}
	if err := labenv.Run(ctx, "", nil, "tar", append(append([]string{"-C", dest}, tarArgs...), tar)...); err != nil {
		return fmt.Errorf("image root %s: %w", dest, err)
	}
	return nil
}

// newRoot checks dest for a new container root and makes its parent and
// its state directory dest.lab, which it returns.
func newRoot(dest string) (string, error) {
	if err := labenv.CheckPath(dest); err != nil {
		return "", fmt.Errorf("image root: %w", err)
	}
	state := dest + stateSuffix
	for _, p := range []string{dest, state} {
		if _, err := os.Lstat(p); err == nil {
			return "", fmt.Errorf("image root %s: %s exists (Remove it first)", dest, p)
		}
	}
	if err := os.MkdirAll(filepath.Dir(dest), 0o755); err != nil {
		return "", fmt.Errorf("image root %s: %w", dest, err)
	}
	if err := os.Mkdir(state, 0o700); err != nil {
		return "", fmt.Errorf("image root %s: %w", dest, err)
	}
	return state, nil
}

// Remove unmounts the container root dest (when an overlay is mounted
// there) and removes it and its state directory. It refuses a directory
// without the state directory Root and Extract make beside it, and a root
// still in use (a running container: the unmount fails busy).
func Remove(dest string) error {
	if err := labenv.CheckPath(dest); err != nil {
		return fmt.Errorf("remove root: %w", err)
	}
	state := dest + stateSuffix
	if fi, err := os.Stat(state); err != nil || !fi.IsDir() {
		return fmt.Errorf("remove root %s: no %s: not a root image.Root made", dest, state)
	}
	mounted, err := mountedAt(dest)
	if err != nil {
		return fmt.Errorf("remove root %s: %w", dest, err)
	}
	if mounted {
		if err := syscall.Unmount(dest, 0); err != nil {
			return fmt.Errorf("remove root %s: unmount: %w", dest, err)
		}
	}
	if err := os.RemoveAll(dest); err != nil {
		return fmt.Errorf("remove root %s: %w", dest, err)
	}
	return os.RemoveAll(state)
}

// Lower is the image tar extracted once into the directory of its name
// without .tar, made whole before it is used: the lower layer of every
// overlay Root makes from it.
func Lower(ctx context.Context, tar string) (string, error) {
	if err := checkTar(tar); err != nil {
		return "", err
	}
	lower := strings.TrimSuffix(tar, ".tar")
	done := lower + ".extracted"
	if _, err := os.Stat(done); err == nil {
		return lower, nil
	}
	unlock, err := labenv.Lock(ctx, tar+".lock")
	if err != nil {
		return "", err
	}
	defer unlock()
	if _, err := os.Stat(done); err == nil {
		return lower, nil
	}
	// A partial extraction (a crash) is removed; the lower layer is never
	// used before done exists.
	if err := os.RemoveAll(lower); err != nil {
		return "", err
	}
	if err := os.Mkdir(lower, 0o755); err != nil {
		return "", err
	}
	if err := labenv.Run(ctx, "", nil, "tar", append(append([]string{"-C", lower}, tarArgs...), tar)...); err != nil {
		return "", err
	}
	return lower, os.WriteFile(done, nil, 0o644)
}

// checkTar refuses an image path that is not an existing rootfs-KEY.tar
// with a path the lab accepts.
func checkTar(tar string) error {
	if err := labenv.CheckPath(tar); err != nil {
		return fmt.Errorf("image %w", err)
	}
	if !strings.HasPrefix(filepath.Base(tar), "rootfs-") || !strings.HasSuffix(tar, ".tar") {
		return fmt.Errorf("image %s: %w", tar, errNotTar)
	}
	if fi, err := os.Stat(tar); err != nil || !fi.Mode().IsRegular() {
		return fmt.Errorf("image %s: not a regular file (%v)", tar, err)
	}
	return nil
}

// mountinfo calls fn with the mount point and super options of every
// mount the process sees, until fn returns true.
func mountinfo(fn func(point, opts string) bool) error {
	f, err := os.Open("/proc/self/mountinfo")
	if err != nil {
		return err
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 64*1024), 1024*1024)
	for sc.Scan() {
		// ID PARENT MAJ:MIN ROOT POINT OPTS [OPTIONAL...] - FSTYPE SOURCE SUPER
		pre, post, ok := strings.Cut(sc.Text(), " - ")
		f, g := strings.Fields(pre), strings.Fields(post)
		if !ok || len(f) < 5 || len(g) < 3 {
			continue
		}
		if fn(unescape(f[4]), g[2]) {
			return nil
		}
	}
	return sc.Err()
}

// unescape undoes mountinfo's octal escapes of space, tab, newline and
// backslash.
func unescape(s string) string {
	return strings.NewReplacer(`\040`, " ", `\011`, "\t", `\012`, "\n", `\134`, `\`).Replace(s)
}

// mountedAt says whether something is mounted on dir.
func mountedAt(dir string) (bool, error) {
	found := false
	err := mountinfo(func(point, _ string) bool {
		found = point == dir
		return found
	})
	return found, err
}

// lowerInUse says whether an overlay mount uses dir as a lower layer.
func lowerInUse(dir string) (bool, error) {
	found := false
	err := mountinfo(func(_, opts string) bool {
		for _, o := range strings.Split(opts, ",") {
			if v, ok := strings.CutPrefix(o, "lowerdir="); ok {
				for _, l := range strings.Split(v, ":") {
					found = found || l == dir
				}
			}
		}
		return found
	})
	return found, err
}
