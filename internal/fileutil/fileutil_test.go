package fileutil

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestReadLimited(t *testing.T) {
	dir := t.TempDir()
	exact := filepath.Join(dir, "exact")
	if err := os.WriteFile(exact, []byte("12345"), 0o644); err != nil {
		t.Fatal(err)
	}
	if data, err := ReadLimited(exact, 5); err != nil || string(data) != "12345" {
		t.Fatalf("a file at the limit: %q, %v", data, err)
	}
	_, err := ReadLimited(exact, 4)
	if !errors.Is(err, ErrTooLarge) || !strings.Contains(err.Error(), "larger than 4 bytes") {
		t.Fatalf("a file over the limit: %v", err)
	}
	// A device that never ends is refused after max+1 bytes.
	if _, err := ReadLimited("/dev/zero", 1<<10); !errors.Is(err, ErrTooLarge) {
		t.Fatalf("/dev/zero: %v", err)
	}
	var pe *os.PathError
	if _, err := ReadLimited(filepath.Join(dir, "missing"), 10); !errors.As(err, &pe) {
		t.Fatalf("a missing file: %v, want an *os.PathError", err)
	}
}
