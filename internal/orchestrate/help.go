package orchestrate

import (
	bincli "github.com/jiocloud/orchestrate/internal/cli"
	"github.com/jiocloud/orchestrate/internal/store"
)

// cmdHelp is what a subcommand's help and man page say beyond its
// definition (name, usage, summary and flags, in its own file): a short
// line for lists and the man page's NAME, more paragraphs, the exit
// statuses it gives a meaning of its own, examples, and the values of its
// positional arguments for completion. Kept here, out of the command
// definitions; TestEveryCommandHasHelp fails for a command without one.
type cmdHelp struct {
	short    string
	more     []string
	exit     map[int]string
	examples []ex
	args     [][]string
	seeAlso  []string
}

// ex is an example: a comment saying what it does, and the command.
type ex struct{ comment, command string }

// helpExamples are examples as internal/cli renders them.
func helpExamples(exs []ex) []bincli.Example {
	out := make([]bincli.Example, len(exs))
	for i, e := range exs {
		out[i] = bincli.Example{Comment: e.comment, Command: e.command}
	}
	return out
}

// categories are the status categories completion offers; any other name
// is accepted.
var categories = []string{store.CategoryProvisioned, store.CategoryUpdate, store.CategoryPuppet, store.CategoryEventual, store.CategoryValidation, store.CategoryRepair}

// topHelp is `orchestrate --help` and orchestrate(1) beyond the list of
// subcommands.
var topHelp = cmdHelp{
	short: "versions, per-host status and the node update loop over Consul KV",
	more: []string{
		"orchestrate keeps the desired version of the whole cloud, each host's running version and build status, the roles' desired counts and the operator's requests to the reaper in Consul KV, under a prefix (--prefix, default $ORCHESTRATE_PREFIX, else orchestrate). Operators, build scripts, Puppet and Consul watches run it; every node runs `orchestrate converge`, its own update loop.",
		"Every subcommand connects to Consul as the consul CLI does: $CONSUL_HTTP_ADDR, $CONSUL_HTTP_TOKEN_FILE (or $CONSUL_HTTP_TOKEN), $CONSUL_CACERT, with --consul-addr and --token-file taking precedence. A token never appears in output. `orchestrate SUBCOMMAND --help` shows a subcommand's flags; `orchestrate --version` prints the version.",
	},
	examples: []ex{
		{"Roll the cloud to a new package snapshot", "orchestrate trigger-update 2026-11-27.1"},
		{"Which hosts do not run it yet (exit 1 while any)", "orchestrate verify-hosts 2026-11-27.1"},
		{"Every host's version and state, with a summary line", "orchestrate status"},
		{"Complete orchestrate's subcommands and flags in bash", "source <(orchestrate completion bash)"},
	},
	seeAlso: []string{"reaper(1)", "hiera-services(1)", "service-blocker(1)", "/usr/share/doc/orchestrate/docs/orchestrate.md.gz", "/usr/share/doc/orchestrate/docs/converge.md.gz", "/usr/share/doc/orchestrate/docs/watches.md.gz"},
}

// helps holds every subcommand's help, by name.
var helps = map[string]cmdHelp{
	"trigger-update": {
		short:    "set the desired version of the whole cloud",
		examples: []ex{{"Every host converges to this snapshot", "orchestrate trigger-update 2026-11-27.1"}},
	},
	"current-version": {
		short:    "print the desired version",
		exit:     map[int]string{1: "no desired version is set"},
		examples: []ex{{"The version the cloud is rolling to", "orchestrate current-version"}},
	},
	"pending-update": {
		short: "say whether this host has an update to run",
		exit:  map[int]string{0: "an update is pending (its version is printed)", 1: "this host runs the desired version, or none is set (with --handler: exit 0)"},
		examples: []ex{
			{"Is this host behind? Exit 0 and the version to install when it is", "orchestrate pending-update"},
		},
	},
	"report-version": {
		short:    "record the version this host runs",
		examples: []ex{{"After a successful update", "orchestrate report-version 2026-11-27.1"}},
	},
	"verify-hosts": {
		short: "check that hosts run a version",
		exit:  map[int]string{1: "some hosts do not run VERSION (they are printed)"},
		examples: []ex{
			{"Gate a deployment pipeline on every host", "orchestrate verify-hosts 2026-11-27.1"},
			{"Only the hosts listed in a file", "orchestrate verify-hosts 2026-11-27.1 --from-file hosts.txt"},
		},
	},
	"hosts-at-version": {
		short:    "print the hosts running a version",
		examples: []ex{{"As JSON, for a script", "orchestrate hosts-at-version 2026-11-27.1 --json"}},
	},
	"running-versions": {
		short:    "print each running version and its number of hosts",
		examples: []ex{{"How far a rollout got", "orchestrate running-versions"}},
	},
	"update-status": {
		short: "put this host in a state of a status category",
		args:  [][]string{categories, store.States},
		examples: []ex{
			{"A failed Puppet run, with where to read its log", "orchestrate update-status puppet failed --detail 'exec apt failed' --log-url https://logs.example/h1/42"},
			{"Validation passed", "orchestrate update-status validation success"},
		},
	},
	"get-failures": {
		short: "print the hosts in a failed state",
		exit:  map[int]string{0: "no host failed", 1: "some hosts failed (they are printed)"},
		args:  [][]string{categories},
		examples: []ex{
			{"Every failure", "orchestrate get-failures"},
			{"Only failed Puppet runs, as JSON", "orchestrate get-failures puppet --json"},
		},
	},
	"status": {
		short: "print every host's version and state per category",
		examples: []ex{
			{"The whole cloud at a glance", "orchestrate status"},
			{"Only hosts that reported, as JSON", "orchestrate status --no-catalog --json"},
		},
	},
	"scale": {
		short: "set the desired count of a role",
		examples: []ex{
			{"Five web servers, saying why", "orchestrate scale web 5 --reason 'sale this week'"},
			{"Give an autoscaled role back to its autoscaler", "orchestrate scale web --auto"},
		},
	},
	"rollout": {
		short: "set and print how a role rolls out a new version",
		args:  [][]string{{"resume"}},
		examples: []ex{
			{"Two db hosts at a time, after the web tier, halting after one failure", "orchestrate rollout db --max-unavailable 2 --after web --max-failures 1"},
			{"Lift a halted rollout", "orchestrate rollout resume db"},
		},
	},
	"report-metric": {
		short:    "report this host's value of a metric for its role's autoscaler",
		examples: []ex{{"From a cron job on a web server", "orchestrate report-metric cpu 0.73 --role web"}},
	},
	"scale-in": {
		short:    "remove named hosts from a role",
		examples: []ex{{"Retire two web servers", "orchestrate scale-in web web-4 web-5"}},
	},
	"drained": {
		short: "answer the reaper's drain request for a host",
		exit:  map[int]string{1: "the host has no drain request"},
		examples: []ex{
			{"This host's work moved away", "orchestrate drained"},
			{"Moving it failed", "orchestrate drained --failed --detail 'queue not empty'"},
		},
	},
	"protect": {
		short:    "exempt a host from scale-in",
		examples: []ex{{"Keep db-1 through scale-in", "orchestrate protect db-1 --reason 'holds the primary'"}},
	},
	"unprotect": {
		short:    "lift a host's scale-in protection",
		examples: []ex{{"db-1 may be scaled in again", "orchestrate unprotect db-1"}},
	},
	"drain": {
		short:    "the node's drain handler",
		examples: []ex{{"Run by a key watch on a load balancer: stop taking traffic, then answer drained", "orchestrate drain --handler --drain-cmd 'systemctl stop haproxy'"}},
	},
	"converge": {
		short: "the node's update loop: update, Puppet, validation, report",
		exit:  map[int]string{0: "converged, repaired or nothing to do", 1: "a step failed, is pending or waits for an update slot (with --handler, pending and waiting exit 0)"},
		examples: []ex{
			{"Run by the current_version watch", "orchestrate converge --handler --update-cmd 'apt-get install -y mypkg=$ORCHESTRATE_VERSION' --consistent-cmd 'puppet apply --detailed-exitcodes site.pp'"},
		},
		seeAlso: []string{"/usr/share/doc/orchestrate/docs/converge.md.gz"},
	},
	"watch-config": {
		short:    "print the Consul watches that run hiera-services and converge",
		examples: []ex{{"Install the node's watches", "orchestrate watch-config --dependencies /etc/orchestrate/dependencies.yaml --consistent-cmd 'puppet apply site.pp' > /etc/consul.d/orchestrate-watches.json"}},
		seeAlso:  []string{"/usr/share/doc/orchestrate/docs/watches.md.gz"},
	},
	"reaper": {
		short: "arm, disarm or look at the reaper",
		args:  [][]string{{"arm", "disarm", "status", "history"}},
		examples: []ex{
			{"Let the reaper replace and delete servers", "orchestrate reaper arm --reason 'cloud built, checks green'"},
			{"What it sees and will do", "orchestrate reaper status"},
			{"What it did for web in the last day", "orchestrate reaper history --role web --since 24h"},
		},
		seeAlso: []string{"reaper(1)"},
	},
	"pool": {
		short: "print or flush the reaper's warm pools",
		args:  [][]string{{"status", "flush"}},
		examples: []ex{
			{"Every role's standbys", "orchestrate pool status"},
			{"Replace web's standbys after a new image", "orchestrate pool flush web --reason 'new image'"},
		},
	},
	"standby": {
		short:    "keep this node in maintenance while it is a warm pool standby",
		examples: []ex{{"Run by a key watch on the node", "orchestrate standby --handler --role web"}},
	},
	"refresh": {
		short: "replace a role's servers not built from its boot spec",
		args:  [][]string{{"continue", "status"}},
		examples: []ex{
			{"Refresh web, keeping 90% serving, pausing at half", "orchestrate refresh web --min-healthy-percent 90 --checkpoints 50"},
			{"Go on past a checkpoint", "orchestrate refresh continue web"},
		},
	},
	"hook": {
		short: "list or answer the reaper's lifecycle hooks",
		args:  [][]string{{"list", "complete"}},
		examples: []ex{
			{"Hooks waiting for an answer", "orchestrate hook list"},
			{"Let the new web-7 join its role", "orchestrate hook complete web web-7 continue"},
		},
	},
	"hold": {
		short: "keep a failing server for a human",
		args:  [][]string{{"release", "list"}},
		examples: []ex{
			{"Keep db-2 for a day to debug it", "orchestrate hold db-2 --reason 'corrupt index, INC-123'"},
			{"Let the reaper have it again", "orchestrate hold release db-2"},
		},
	},
	"migrate": {
		short:    "move hosts' records to the node-restricted layout",
		exit:     map[int]string{1: "refused: a rollout slot of the older layout is held (nothing moved)"},
		examples: []ex{{"Once, after upgrading every node", "orchestrate migrate"}},
	},
	"heartbeat": {
		short:    "write this host's heartbeat record",
		examples: []ex{{"Run by the node's watch on the reaper's heartbeat", "orchestrate heartbeat --handler"}},
	},
	"logs": {
		short: "read, push and flush failure logs in Swift",
		args:  [][]string{{"push", "flush"}},
		exit:  map[int]string{1: "the host has no log"},
		examples: []ex{
			{"The newest failure log of web-3", "orchestrate logs web-3"},
			{"On a node, upload its Puppet log", "orchestrate logs push --step puppet /var/log/puppet.log"},
		},
	},
}
