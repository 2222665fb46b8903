// Command orchestrate tracks desired and running versions and per-host build
// status in Consul KV. See `orchestrate --help`.
package main

import (
	"context"
	"os"
	"os/signal"
	"syscall"

	"github.com/jiocloud/orchestrate/internal/orchestrate"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := orchestrate.Run(ctx, os.Args[1:], orchestrate.IO{Stdin: os.Stdin, Stdout: os.Stdout, Stderr: os.Stderr})
	stop()
	os.Exit(code)
}
