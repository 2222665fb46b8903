package logship

import (
	"fmt"
	"io"
	"os"
	"syscall"
)

// DefaultMaxBytes is the default cap on an uploaded log: 8 MiB holds a
// Puppet run at debug level of a large catalog many times over, and is
// quick to fetch and read; a log over it is a runaway loop, whose head
// (what started) and tail (how it ended) say what there is to say.
const DefaultMaxBytes = 8 << 20

// MinMaxBytes is the smallest cap: room for a head, a tail and the marker.
const MinMaxBytes = 4 << 10

// ReadCapped reads the log at path, whole when it is at most max bytes;
// a larger one is capped: its first quarter of max and its last bytes, with
// a marker line between saying how much was left out. A log is capped, not
// segmented (Swift's large objects): the failure is at its end and its
// cause often at its start, a capped log is one plain object any client
// reads, and a node's disk or a runaway loop never turns into gigabytes in
// the store. Only a regular file is read (a FIFO would block).
func ReadCapped(path string, max int64) ([]byte, error) {
	if max < MinMaxBytes {
		return nil, fmt.Errorf("cap %d bytes is below %d", max, MinMaxBytes)
	}
	// O_NONBLOCK: opening a FIFO would otherwise wait for a writer; it
	// changes nothing for a regular file.
	f, err := os.OpenFile(path, os.O_RDONLY|syscall.O_NONBLOCK, 0)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return nil, err
	}
	if !st.Mode().IsRegular() {
		return nil, fmt.Errorf("%s is not a regular file (%s)", path, st.Mode().Type())
	}
	size := st.Size()
	if size <= max {
		// Read up to max+1: a file still growing is capped by what was
		// read, never read without bound.
		data, err := io.ReadAll(io.LimitReader(f, max+1))
		if err != nil {
			return nil, err
		}
		if int64(len(data)) <= max {
			return data, nil
		}
		size = int64(len(data))
	}
	head := max / 4
	marker := []byte(fmt.Sprintf("\n\n[orchestrate: log capped at %d bytes: %%d bytes cut here of %d in all; the head and the tail are kept]\n\n", max, size))
	tail := max - head - int64(len(marker)) - 20 // room for the cut count's digits
	cut := size - head - tail
	marker = []byte(fmt.Sprintf(string(marker), cut))
	out := make([]byte, 0, head+int64(len(marker))+tail)
	buf := make([]byte, head)
	if _, err := io.ReadFull(f, buf); err != nil {
		return nil, fmt.Errorf("read %s: %w", path, err)
	}
	out = append(out, buf...)
	out = append(out, marker...)
	buf = make([]byte, tail)
	if _, err := f.ReadAt(buf, size-tail); err != nil && err != io.EOF {
		return nil, fmt.Errorf("read %s: %w", path, err)
	}
	return append(out, buf...), nil
}
