package watch

import (
	"io"
	"os"
)

// maxPayload bounds how much of a handler payload ReadPayload keeps. A
// services watch on a large catalog sends a few hundred KiB; the rest is read
// and discarded so Consul never blocks or fails writing it.
const maxPayload = 16 << 20

// ReadPayload reads the JSON a Consul watch hands its handler on stdin and
// returns up to 16 MiB of it. Consul writes the payload to a pipe and
// reports a broken pipe if the handler exits without reading it, so a
// handler that ignores the payload should still call this. A terminal on
// stdin (someone running the handler by hand) is not read: it returns nil.
func ReadPayload(r io.Reader) ([]byte, error) {
	if r == nil {
		return nil, nil
	}
	if f, ok := r.(*os.File); ok {
		fi, err := f.Stat()
		if err != nil || fi.Mode()&os.ModeCharDevice != 0 {
			return nil, nil
		}
	}
	data, err := io.ReadAll(io.LimitReader(r, maxPayload))
	if err != nil {
		return data, err
	}
	_, err = io.Copy(io.Discard, r)
	return data, err
}
