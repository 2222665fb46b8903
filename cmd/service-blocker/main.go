// Command service-blocker waits until enough endpoints of one or more
// services are addressable in Consul DNS, or also accept TCP connections,
// so Puppet can exec it before configuration that needs them. See
// `service-blocker --help`.
package main

import (
	"github.com/jiocloud/orchestrate/blocker"
	"github.com/jiocloud/orchestrate/internal/cli"
)

func main() { cli.Main("service-blocker", blocker.Run) }
