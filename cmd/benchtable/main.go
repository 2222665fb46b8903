// Command benchtable runs orchestrate's benchmarks in one go and prints
// their figures as one Markdown table, with the machine they ran on. `make
// bench` runs it. Each benchmark runs against a real Consul dev agent; the
// hiera-services one also runs the consul-template binary on the same
// template and catalog, side by side.
package main

import (
	"context"
	"os"
	"os/signal"
	"syscall"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	failed := run(ctx)
	stop()
	if failed {
		os.Exit(1)
	}
}
