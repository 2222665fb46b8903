// Command reaper keeps every role at its desired count of healthy, young
// machines through OpenStack Nova, under a Consul session lock. See
// `reaper --help`, docs/reaper.md and reaper/README.md.
package main

import (
	"github.com/jiocloud/orchestrate/internal/cli"
	"github.com/jiocloud/orchestrate/reaper/daemon"
)

func main() { cli.Main("reaper", daemon.Run) }
