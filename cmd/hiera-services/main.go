// Command hiera-services renders Puppet's hiera data (services.yaml and
// dependency state) from the Consul catalog through consul-template. See
// `hiera-services --help`.
package main

import (
	"os"
	"runtime/debug"

	"github.com/jiocloud/orchestrate/hiera"
	"github.com/jiocloud/orchestrate/internal/cli"
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
	cli.Main("hiera-services", hiera.Run)
}
