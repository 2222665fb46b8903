// Command hiera-services renders Puppet's hiera data (services.yaml and
// dependency state) from the Consul catalog through consul-template. See
// `hiera-services --help`.
package main

import (
	"context"
	"os"
	"os/signal"
	"runtime/debug"
	"syscall"

	"github.com/jiocloud/orchestrate/hiera"
)

// memoryLimit is a soft limit for the Go runtime unless GOMEMLIMIT sets one.
// Watching a catalog of 1,000 services holds one blocking query (connection,
// goroutines, buffers) per service; without a limit the collector lets the
// heap double past that before it runs, and the process peaks above 100 MiB.
// The live data of such a catalog is far below 64 MiB, so the limit costs
// some extra collections, not a thrashing collector.
const memoryLimit = 64 << 20

func main() {
	if os.Getenv("GOMEMLIMIT") == "" {
		debug.SetMemoryLimit(memoryLimit)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := hiera.Run(ctx, os.Args[1:], hiera.IO{Stdin: os.Stdin, Stdout: os.Stdout, Stderr: os.Stderr})
	stop()
	os.Exit(code)
}
