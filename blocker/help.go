package blocker

import "github.com/jiocloud/orchestrate/internal/cli"

// program is service-blocker as its help, man page and completion scripts
// see it. `help` and `completion` come first as words of their own: a
// service of that name is waited for after --
// (service-blocker -- completion).
func program() *cli.Program {
	return &cli.Program{Name: "service-blocker", Help: help}
}

// help is service-blocker's help; it has no subcommands of its own.
func help(sub string) (*cli.Help, bool) {
	if sub != "" {
		return nil, false
	}
	var o options
	return &cli.Help{
		Name:     "service-blocker",
		Summary:  "wait until enough endpoints of a service exist in Consul",
		Synopsis: []string{"service-blocker [flags] SERVICE[@DC][:N] [SERVICE[@DC][:N] ...]"},
		Description: []string{
			"Waits until at least N endpoints (default --count) of every SERVICE resolve in Consul DNS (--mode addressable), or also pass all their health checks and accept a TCP connection on their SRV port (--mode functional). SERVICE@DC asks datacenter DC (default --datacenter, else the agent's).",
			"While waiting it holds one blocking query per SERVICE on the agent's HTTP API and asks DNS again the moment Consul reports a change; without a usable HTTP API (or with --no-watch) it polls DNS. When all are met it prints the endpoints (SERVICE ADDRESS:PORT TARGET, one a line, or --json) and exits 0.",
			"A service named help or completion is waited for after --: service-blocker -- completion.",
		},
		Flags: o.flagSet(),
		Exit: map[int]string{
			0: "every SERVICE has its endpoints (printed)",
			1: "timed out; the message names each service still short",
			3: "the DNS server (or, where health counts, the HTTP API) never answered for the whole timeout; at once when Consul's ACLs refuse the token the health that counts (the message names the permission)",
		},
		Examples: []cli.Example{
			{Comment: "Wait for two addressable MySQL servers", Command: "service-blocker mysql:2"},
			{Comment: "Wait up to 10 minutes for a working RabbitMQ in dc2", Command: "service-blocker --mode functional --timeout 10m rabbitmq@dc2"},
		},
		SeeAlso: []string{"orchestrate(1)", "hiera-services(1)", "/usr/share/doc/orchestrate/docs/service-blocker.md.gz"},
	}, true
}
