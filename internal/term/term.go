// Package term answers the two questions the binaries ask of a terminal:
// is this stream one (so a person may be asked to confirm), and how wide
// is it (so help and status screens wrap to fit).
package term

import (
	"os"
	"strconv"

	"golang.org/x/sys/unix"
)

// DefaultWidth is the width assumed when the output is not a terminal and
// $COLUMNS is unset: the classic terminal's, and what man pages assume.
const DefaultWidth = 80

// minWidth is the narrowest width honoured: below it, wrapped text would be
// one word a line, which helps nobody.
const minWidth = 40

// IsTerminal reports whether s is an *os.File open on a terminal.
func IsTerminal(s any) bool {
	f, ok := s.(*os.File)
	if !ok || f == nil {
		return false
	}
	_, err := unix.IoctlGetTermios(int(f.Fd()), unix.TCGETS)
	return err == nil
}

// Width is the width to wrap output written to s at: the terminal's when s
// is one, else $COLUMNS when it holds a positive number, else
// DefaultWidth; never below 40 columns.
func Width(s any) int {
	w := 0
	if f, ok := s.(*os.File); ok && f != nil {
		if ws, err := unix.IoctlGetWinsize(int(f.Fd()), unix.TIOCGWINSZ); err == nil {
			w = int(ws.Col)
		}
	}
	if w <= 0 {
		if n, err := strconv.Atoi(os.Getenv("COLUMNS")); err == nil && n > 0 {
			w = n
		}
	}
	if w <= 0 {
		w = DefaultWidth
	}
	return max(w, minWidth)
}
