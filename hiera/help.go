package hiera

import (
	"io"

	"github.com/spf13/pflag"

	"github.com/jiocloud/orchestrate/internal/cli"
	"github.com/jiocloud/orchestrate/internal/paths"
)

// newFlagSet is hiera-services' command line, bound to c.
func newFlagSet(c *Config) *pflag.FlagSet {
	fs := pflag.NewFlagSet("hiera-services", pflag.ContinueOnError)
	fs.SetOutput(io.Discard)
	c.AddFlags(fs)
	return fs
}

// program is hiera-services as its help, man page and completion scripts
// see it.
func program() *cli.Program {
	return &cli.Program{Name: "hiera-services", Help: help}
}

// help is hiera-services' help; it has no subcommands of its own.
func help(sub string) (*cli.Help, bool) {
	if sub != "" {
		return nil, false
	}
	return &cli.Help{
		Name:     "hiera-services",
		Summary:  "render Puppet hiera data from the Consul catalog",
		Synopsis: []string{"hiera-services [flags]", "hiera-services --watch [flags]", "hiera-services --publish [flags]"},
		Description: []string{
			"Renders Puppet's hiera data (services.yaml and dependency state) from the Consul catalog through consul-template, and writes it only when it changed.",
			"Once (the default): render, write if changed, run --exec if due (below), exit; the Consul watch handler mode (the watch's JSON on stdin is read and ignored; overlapping runs take turns on --lock-file). --watch: stay running and re-render on every catalog change.",
			"--publish: run the datacenter's catalog change feed instead (one at a time, under a Consul lock): --watch on every node then reads again only the services that changed, instead of asking every service it uses.",
			"--exec runs when what this node reads changed since it last ran: the whole file, or with --reads (--reads-regex) the keys of the services named, of the dependencies and of --expect-service, and the dependency state. It waits a random delay within --splay first; changes meanwhile join that one run.",
		},
		Flags: newFlagSet(&Config{}),
		Exit: map[int]string{
			1: "the --exec command failed",
			2: "bad flags, template or dependencies file; nothing was written",
			3: "Consul could not be reached or refused (the file is left as it was)",
		},
		Examples: []cli.Example{
			{Comment: "Render once, as a Consul watch handler does", Command: "hiera-services --out " + paths.HieraData + " --dependencies " + paths.Dependencies},
			{Comment: "Stay running; run the eventual Puppet step when what this node reads changed", Command: "hiera-services --watch --reads mysql,rabbitmq --exec 'orchestrate converge --eventual-only'"},
			{Comment: "Serve the datacenter's change feed (one node at a time runs it)", Command: "hiera-services --publish"},
		},
		SeeAlso: []string{"orchestrate(1)", "orchestrate-watch-config(1)", "/usr/share/doc/orchestrate/docs/hiera-services.md.gz"},
	}, true
}
