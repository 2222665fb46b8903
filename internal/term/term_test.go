package term

import (
	"bytes"
	"os"
	"testing"
)

func TestNotATerminal(t *testing.T) {
	var buf bytes.Buffer
	if IsTerminal(&buf) {
		t.Error("a buffer is not a terminal")
	}
	f, err := os.CreateTemp(t.TempDir(), "f")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if IsTerminal(f) {
		t.Error("a regular file is not a terminal")
	}
	if IsTerminal((*os.File)(nil)) {
		t.Error("a nil file is not a terminal")
	}
}

func TestWidth(t *testing.T) {
	var buf bytes.Buffer
	for _, tc := range []struct {
		name, columns string
		want          int
	}{
		{"unset", "", DefaultWidth},
		{"columns", "132", 132},
		{"narrow", "10", minWidth},
		{"garbage", "wide", DefaultWidth},
		{"negative", "-5", DefaultWidth},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Setenv("COLUMNS", tc.columns)
			if got := Width(&buf); got != tc.want {
				t.Errorf("Width with COLUMNS=%q = %d, want %d", tc.columns, got, tc.want)
			}
		})
	}
}
