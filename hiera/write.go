package hiera

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"syscall"

	"github.com/jiocloud/orchestrate/watch"
)

// newFileMode is the mode of a file WriteFile creates: hiera data holds
// addresses, not secrets, and Puppet may run as another user.
const newFileMode = 0o644

// WriteFile replaces path with data atomically: it writes a temporary file in
// the same directory, fsyncs it, gives it the old file's mode and owner, and
// renames it over path, so a reader sees the old file or the new one, never
// part of one. When path already holds exactly data it is not touched (its
// mtime stays), and changed is false. The directory is created if missing.
func WriteFile(path string, data []byte) (changed bool, err error) {
	old, err := os.ReadFile(path)
	switch {
	case err == nil && bytes.Equal(old, data):
		return false, nil
	case err != nil && !errors.Is(err, fs.ErrNotExist):
		return false, fmt.Errorf("read %s: %w", path, err)
	}
	dir := filepath.Dir(path)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return false, fmt.Errorf("create %s: %w", dir, err)
	}
	mode := fs.FileMode(newFileMode)
	uid, gid := -1, -1
	if fi, err := os.Stat(path); err == nil {
		mode = fi.Mode().Perm()
		if st, ok := fi.Sys().(*syscall.Stat_t); ok {
			uid, gid = int(st.Uid), int(st.Gid)
		}
	}
	tmp, err := os.CreateTemp(dir, "."+filepath.Base(path)+".tmp-*")
	if err != nil {
		return false, fmt.Errorf("write %s: %w", path, err)
	}
	tmpName := tmp.Name()
	defer func() {
		if err != nil {
			os.Remove(tmpName)
		}
	}()
	if _, err = tmp.Write(data); err == nil {
		err = tmp.Chmod(mode)
	}
	if err == nil && uid >= 0 {
		if cerr := tmp.Chown(uid, gid); cerr != nil && !errors.Is(cerr, fs.ErrPermission) {
			err = cerr
		}
	}
	if err == nil {
		err = tmp.Sync()
	}
	if cerr := tmp.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return false, fmt.Errorf("write %s: %w", path, err)
	}
	if err = os.Rename(tmpName, path); err != nil {
		return false, fmt.Errorf("write %s: %w", path, err)
	}
	// The rename is durable once the directory is synced; a failure here
	// leaves a correct file that a crash might roll back, so it is not an
	// error worth failing the render for.
	if d, derr := os.Open(dir); derr == nil {
		_ = d.Sync()
		d.Close()
	}
	return true, nil
}

// FileSink is the Sink of hiera-services: it writes the data to Path with
// WriteFile, holding LockFile, which serialises overlapping runs, while it
// writes.
type FileSink struct {
	Path     string
	LockFile string
	// Locked says the caller holds LockFile for as long as the sink is
	// used (once mode), so Publish does not take it again.
	Locked bool
}

// Publish writes data to Path unless it already holds exactly data.
func (s *FileSink) Publish(ctx context.Context, data []byte) (changed bool, err error) {
	if !s.Locked {
		unlock, err := watch.Lock(ctx, s.LockFile, true)
		if err != nil {
			return false, err
		}
		defer unlock()
	}
	changed, err = WriteFile(s.Path, data)
	if err != nil {
		// A file that cannot be written is the operator's --out, not
		// Consul.
		return false, &InputError{Err: fmt.Errorf("--out: %w", err)}
	}
	return changed, nil
}
