// Package cli is what the four binaries share at their edge: the shape of
// their Run function and the main that calls it. Each binary's Run parses
// its flags, runs, and maps any error to an exit code once, through
// internal/exitcode.
package cli

import (
	"context"
	"io"
	"os"
	"os/signal"
	"syscall"
)

// IO is a process's standard streams.
type IO struct {
	Stdin          io.Reader
	Stdout, Stderr io.Writer
}

// RunFunc is a binary: it runs with args (without the program name) and
// returns the process's exit code.
type RunFunc func(ctx context.Context, args []string, stdio IO) int

// Main runs run with the process's arguments and streams, under a context
// that SIGINT and SIGTERM cancel, and exits with its code.
func Main(run RunFunc) {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := run(ctx, os.Args[1:], IO{Stdin: os.Stdin, Stdout: os.Stdout, Stderr: os.Stderr})
	stop()
	os.Exit(code)
}
