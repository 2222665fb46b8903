// Command orchestrate tracks desired and running versions and per-host build
// status in Consul KV. See `orchestrate --help`.
package main

import (
	"github.com/jiocloud/orchestrate/internal/cli"
	"github.com/jiocloud/orchestrate/internal/orchestrate"
)

func main() { cli.Main("orchestrate", orchestrate.Run) }
