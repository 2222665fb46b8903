// Command reaper keeps every role at its desired count of healthy, young
// machines through OpenStack Nova, under a Consul session lock. See
// `reaper --help` and the README.
package main

import (
	"context"
	"os"
	"os/signal"
	"syscall"

	"github.com/jiocloud/orchestrate/reaper"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := reaper.Run(ctx, os.Args[1:], os.Stdout, os.Stderr)
	stop()
	os.Exit(code)
}
