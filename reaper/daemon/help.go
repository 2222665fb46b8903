package daemon

import (
	"io"

	"github.com/spf13/pflag"

	"github.com/jiocloud/orchestrate/internal/cli"
)

// program is the reaper as its help, man pages and completion scripts see
// it: the FlagSets it parses and the texts below.
func program() *cli.Program {
	return &cli.Program{Name: "reaper", Help: help, Subcommands: []string{"identity"}}
}

// help is the help of the reaper ("") or of reaper identity.
func help(sub string) (*cli.Help, bool) {
	switch sub {
	case "":
		var o cmdLine
		return &cli.Help{
			Name:     "reaper",
			Summary:  "keep every role at its count of healthy machines through OpenStack Nova",
			Synopsis: []string{"reaper --config FILE [flags]", "reaper identity --config FILE [--apply]"},
			Description: []string{
				"Keeps every role at its desired count of healthy, young machines through OpenStack Nova, under a Consul session lock: several copies may run, one acts. It replaces servers whose checks stay critical, servers past their maximum age and servers that never checked in, launch-before-terminate; nothing destructive happens until `orchestrate reaper arm`, while too much of the fleet looks unhealthy at once, or without a fresh, complete picture.",
				"It runs in dry run unless the configuration says dry_run: false or --dry-run=false is given. OpenStack credentials come as the openstack CLI takes them: OS_CLOUD with clouds.yaml, or the OS_* variables; Consul's as the consul CLI's. `reaper identity --help` says how to set up node_identity in Consul.",
			},
			Commands: []cli.Item{{Term: "identity", Text: "set up what node_identity needs in Consul"}},
			Flags:    o.flagSet(),
			Exit:     map[int]string{0: "stopped cleanly (a signal), or --check-config found the configuration valid", 3: "Consul or the cloud could not be reached, refused, or the leader lock was lost for good"},
			Examples: []cli.Example{
				{Comment: "Check a configuration before restarting the service", Command: "reaper --config /etc/orchestrate/reaper.yaml --check-config"},
				{Comment: "Watch what it would do, acting on nothing", Command: "reaper --config /etc/orchestrate/reaper.yaml --dry-run"},
			},
			SeeAlso: []string{"orchestrate-reaper(1)", "reaper-identity(1)", "orchestrate(1)", "/usr/share/doc/orchestrate/reaper.md.gz", "/usr/share/doc/orchestrate/docs/reaper.md.gz"},
		}, true
	case "identity":
		fs := pflag.NewFlagSet("reaper identity", pflag.ContinueOnError)
		fs.SetOutput(io.Discard)
		identityFlags(fs)
		return &cli.Help{
			Name:     "reaper identity",
			Summary:  "set up what node_identity needs in Consul",
			Synopsis: []string{"reaper identity --config FILE [--node-policy FILE] [--extra N] [--apply]"},
			Description: []string{
				"Sets up what node_identity needs in Consul, once, with a management token (CONSUL_HTTP_TOKEN_FILE or --token-file): the JWT auth method that trusts the reaper's public key (node_identity.key_file), its binding rules, the shared role every node's token carries (--node-policy), and one policy per server name the reaper may build (orchestrate-host-<name>): for each role, names 1 to its count (the larger of desired and autoscale max) plus its warm pool, max_in_flight and --extra.",
				"Without --apply it prints what it would write; with it, it writes it (idempotent: run it again after raising a role's max). The reaper itself needs no ACL rights for this.",
			},
			Flags: fs,
			Examples: []cli.Example{
				{Comment: "See what it would write", Command: "reaper identity --config /etc/orchestrate/reaper.yaml"},
				{Comment: "Write it, with a management token", Command: "CONSUL_HTTP_TOKEN_FILE=/root/mgmt.token reaper identity --apply"},
			},
			SeeAlso: []string{"reaper(1)", "/usr/share/doc/orchestrate/docs/acl.md.gz"},
		}, true
	}
	return nil, false
}
