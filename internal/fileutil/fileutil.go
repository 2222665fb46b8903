// Package fileutil reads operators' input files safely.
package fileutil

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"

	"github.com/jiocloud/orchestrate/internal/fault"
)

// ErrTooLarge is returned by ReadLimited for a file over its limit.
var ErrTooLarge = errors.New("file too large")

// ReadLimited reads the file at path, refusing one larger than max bytes.
// It reads at most max+1 bytes, so a device such as /dev/zero or a huge
// file given where a small one belongs is an error naming the limit, not an
// out-of-memory crash. Errors from the file system are *os.PathError.
func ReadLimited(path string, max int) ([]byte, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	data, err := io.ReadAll(io.LimitReader(f, int64(max)+1))
	if err != nil {
		return nil, err
	}
	if len(data) > max {
		return nil, fmt.Errorf("larger than %d bytes: %w", max, ErrTooLarge)
	}
	return data, nil
}

// ReadInput reads an operator's input file (a configuration) of at most
// max bytes. Its errors are input errors (fault.InputError: exit 2) that
// name the file and say what is wrong with it in a sentence (missing, a
// directory, unreadable, too large), without the system call's name.
func ReadInput(path string, max int) ([]byte, error) {
	if st, err := os.Stat(path); err == nil && st.IsDir() {
		return nil, fault.Inputf("%s: is a directory, not a file", path)
	}
	data, err := ReadLimited(path, max)
	var pe *fs.PathError
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return nil, fault.Inputf("%s: no such file", path)
	case errors.Is(err, fs.ErrPermission):
		return nil, fault.Inputf("%s: permission denied (run as a user that may read it)", path)
	case errors.Is(err, ErrTooLarge):
		return nil, fault.Inputf("%s: larger than %d bytes", path, max)
	case errors.As(err, &pe):
		return nil, fault.Inputf("%s: %w", path, pe.Err)
	case err != nil:
		return nil, fault.Inputf("%s: %w", path, err)
	}
	return data, nil
}

// WriteAtomic writes data to path through a temporary file in the same
// directory, synced and renamed over path, so that a reader (or a crash)
// never sees a partial file. The file gets mode perm.
func WriteAtomic(path string, data []byte, perm os.FileMode) error {
	dir, base := filepath.Split(path)
	if dir == "" {
		dir = "."
	}
	f, err := os.CreateTemp(dir, "."+base+".tmp-*")
	if err != nil {
		return err
	}
	tmp := f.Name()
	_, err = f.Write(data)
	if err == nil {
		err = f.Chmod(perm)
	}
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(tmp, path)
	}
	if err != nil {
		os.Remove(tmp)
	}
	return err
}
