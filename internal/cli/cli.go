// Package cli is what the four binaries share at their edge: the shape of
// their Run function, the main that calls it, and the build information
// `--version` prints. Each binary's Run parses its flags, runs, and maps any
// error to an exit code once, through internal/exitcode.
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

// Main runs the binary called name with the process's arguments and
// streams, under a context that SIGINT and SIGTERM cancel, and exits with
// its code. `NAME --version` prints the build information and exits 0
// before run sees any argument, the same way for every binary.
func Main(name string, run RunFunc) {
	os.Exit(runMain(name, run, os.Args[1:], IO{Stdin: os.Stdin, Stdout: os.Stdout, Stderr: os.Stderr}))
}

func runMain(name string, run RunFunc, args []string, stdio IO) int {
	if WantsVersion(args) {
		PrintVersion(stdio.Stdout, name)
		return 0
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	return run(ctx, args, stdio)
}

// WantsVersion reports whether args ask for the version: `--version` as
// the first argument. Only the first: anywhere else it could be the value
// of another flag (`--exec --version`), which is not a request.
func WantsVersion(args []string) bool {
	return len(args) > 0 && args[0] == VersionFlag
}
