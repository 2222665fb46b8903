// Command demo runs the whole of orchestrate on one machine, against a real
// local Consul dev agent on free loopback ports and a simulated cloud, and
// prints each step for a person to read: hiera-services rendering the
// dependency state, service-blocker waiting for a third database, a rolling
// version with converge on every node, and the reaper replacing a dead node
// and pausing when most of the fleet looks unhealthy at once. ACLs are on
// (default deny): the operator, the reaper and every node run with their
// own tokens, set up as docs/acl.md tells an operator.
//
// `make demo` runs it. It stops everything it started, by PID, and leaves no
// files outside a temporary directory it removes (or --keep DIR).
package main

import (
	"context"
	"fmt"
	"os"
	"os/signal"
	"syscall"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	err := run(ctx, os.Args[1:])
	stop()
	if err != nil {
		fmt.Fprintf(os.Stderr, "\ndemo failed: %v\n", err)
		os.Exit(1)
	}
	fmt.Println("\ndemo finished: every step behaved as described.")
}
