// Command service-blocker waits until enough endpoints of one or more
// services are addressable in Consul DNS, or also accept TCP connections,
// so Puppet can exec it before configuration that needs them. See
// `service-blocker --help`.
package main

import (
	"context"
	"os"
	"os/signal"
	"syscall"

	"github.com/jiocloud/orchestrate/blocker"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := blocker.Run(ctx, os.Args[1:], os.Stdout, os.Stderr)
	stop()
	os.Exit(code)
}
