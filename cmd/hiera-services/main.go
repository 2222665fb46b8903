// Command hiera-services renders Puppet's hiera data (services.yaml and
// dependency state) from the Consul catalog through consul-template. See
// `hiera-services --help`.
package main

import (
	"context"
	"os"
	"os/signal"
	"syscall"

	"github.com/jiocloud/orchestrate/hiera"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := hiera.Run(ctx, os.Args[1:], hiera.IO{Stdin: os.Stdin, Stdout: os.Stdout, Stderr: os.Stderr})
	stop()
	os.Exit(code)
}
