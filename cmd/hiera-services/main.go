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
// goroutines, buffers) per service, about 60 MiB in all; without a limit the
// collector lets the heap double past that before it runs, and the process
// peaks near 125 MiB. 80 MiB keeps it under 100 MiB with room above the live
// data, so the collector runs more often but does not thrash (64 MiB did:
// watch latency tripled in BenchmarkCatalog1000x5).
const memoryLimit = 80 << 20

func main() {
	if os.Getenv("GOMEMLIMIT") == "" {
		debug.SetMemoryLimit(memoryLimit)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := hiera.Run(ctx, os.Args[1:], hiera.IO{Stdin: os.Stdin, Stdout: os.Stdout, Stderr: os.Stderr})
	stop()
	os.Exit(code)
}
