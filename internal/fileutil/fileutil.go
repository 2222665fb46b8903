// Package fileutil reads operators' input files safely.
package fileutil

import (
	"errors"
	"fmt"
	"io"
	"os"
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
