// Package orchestrate is the `orchestrate` command: versions and build
// status over Consul KV, for operators, build scripts, Puppet and Consul
// watches. cmd/orchestrate only wires it to the process.
package orchestrate

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"os"
	"sort"
	"strings"

	"github.com/hashicorp/consul/api"
	"github.com/spf13/pflag"

	bincli "github.com/jiocloud/orchestrate/internal/cli"
	"github.com/jiocloud/orchestrate/internal/consulclient"
	"github.com/jiocloud/orchestrate/internal/exitcode"
	"github.com/jiocloud/orchestrate/internal/logging"
	"github.com/jiocloud/orchestrate/internal/store"
	"github.com/jiocloud/orchestrate/internal/store/schema"
)

// IO is the process's standard streams.
type IO = bincli.IO

// command is one subcommand.
type command struct {
	name    string
	usage   string // the positional arguments
	summary string
	// minArgs and maxArgs bound the positional arguments (-1: no limit).
	minArgs, maxArgs int
	// needsHost: the command acts for one host (--host).
	needsHost bool
	// hostArg: its positional argument, when given, is the host: the
	// default host (the agent's node name, which needs agent read) is
	// not looked up, so a platform's token answers for any host.
	hostArg bool
	// json: the command prints data and takes --json.
	json bool
	// handler: the command is run by Consul watches and takes --handler,
	// which makes "nothing to do" exit 0 (see env.handler).
	handler bool
	// run does the work of a command without flags of its own; args are
	// the positional arguments.
	run runFunc
	// setup, for a command with flags of its own, registers them on fs and
	// returns the run function that reads their values.
	setup func(fs *pflag.FlagSet) runFunc
}

// runFunc runs a command; args are the positional arguments.
type runFunc func(ctx context.Context, e *env, args []string) error

// env is what a running subcommand works with.
type env struct {
	IO
	log    *slog.Logger
	client *api.Client
	// closeIdle closes the client's idle connections. Run may be called
	// many times in one process (the demo, tests): its connections must
	// not stay open for the transport's 90 s idle timeout, each counting
	// against the agent's limit on concurrent connections from one
	// address (200 by default: a test polling Run every 20 ms reached it
	// and the agent refused the node's own watch handlers with 429).
	closeIdle func()
	store     *store.Store
	host      string
	json      bool
	// handler: run by a Consul watch. Consul logs every non-zero exit of a
	// handler as an error, so a command that found nothing to do (no
	// pending update, a build pending on other hosts) exits 0; only a real
	// failure (Consul down, a failed build, bad input) is non-zero.
	handler bool
}

func commands() []*command {
	return []*command{
		cmdTriggerUpdate, cmdCurrentVersion, cmdPendingUpdate, cmdReportVersion,
		cmdVerifyHosts, cmdHostsAtVersion, cmdRunningVersions, cmdUpdateStatus,
		cmdGetFailures, cmdStatus, cmdScale, cmdRollout,
		cmdReportMetric, cmdScaleIn, cmdDrained, cmdProtect, cmdUnprotect, cmdDrain,
		cmdConverge,
		cmdWatchConfig,
		cmdReaper, cmdPool, cmdStandby, cmdRefresh, cmdHook, cmdHold,
		cmdMigrate,
		cmdHeartbeat,
		cmdLogs,
	}
}

// Run runs `orchestrate args...` and returns the process exit code.
func Run(ctx context.Context, args []string, stdio IO) int {
	err := run(ctx, args, stdio)
	if err == nil {
		return exitcode.OK
	}
	code := exitcode.Code(err)
	var silent *silentError
	if !errors.As(err, &silent) {
		fmt.Fprintf(stdio.Stderr, "orchestrate: %s\n", exitcode.Message(err))
	}
	return code
}

// silentError carries an exit code for an answer already printed (such as
// "not on version" after the list of hosts).
type silentError struct{ code int }

func (e *silentError) Error() string { return fmt.Sprintf("exit %d", e.code) }

func answerNo() error { return exitcode.Wrap(exitcode.No, &silentError{code: exitcode.No}) }

func run(ctx context.Context, args []string, stdio IO) error {
	p := program()
	if len(args) == 0 {
		if err := p.PrintHelp(stdio.Stdout, ""); err != nil {
			return err
		}
		return exitcode.Usagef("no subcommand given")
	}
	if args[0] == "-h" || args[0] == "--help" {
		return p.PrintHelp(stdio.Stdout, "")
	}
	if done, err := p.Meta(args, stdio.Stdout); done {
		return err
	}
	cmd := findCommand(args[0])
	if cmd == nil {
		return exitcode.Usagef("unknown subcommand %q (see orchestrate --help)", bincli.Printable(args[0]))
	}
	fs, common, runCmd := newFlagSet(cmd)
	if err := fs.Parse(args[1:]); err != nil {
		if errors.Is(err, pflag.ErrHelp) {
			return p.PrintHelp(stdio.Stdout, cmd.name)
		}
		return exitcode.Usagef("%s: %v", cmd.name, err)
	}
	if n := fs.NArg(); n < cmd.minArgs || (cmd.maxArgs >= 0 && n > cmd.maxArgs) {
		return exitcode.Usagef("%s: got %d arguments, usage: orchestrate %s %s", cmd.name, n, cmd.name, cmd.usage)
	}
	if cmd.hostArg && fs.NArg() == 1 {
		if err := schema.ValidName("host", fs.Arg(0)); err != nil {
			return exitcode.Usagef("%s: %v", cmd.name, err)
		}
		common.host = fs.Arg(0)
	}
	e, err := common.env(stdio, cmd)
	if err != nil {
		return err
	}
	defer e.closeIdle()
	return runCmd(ctx, e, fs.Args())
}

// findCommand is the subcommand called name, nil when there is none.
func findCommand(name string) *command {
	for _, c := range commands() {
		if c.name == name {
			return c
		}
	}
	return nil
}

// newFlagSet is cmd's command line: the common flags and its own, and the
// function that runs it with their values. Help and completion read the
// same FlagSet, so they never drift from what the command parses.
func newFlagSet(cmd *command) (*pflag.FlagSet, *commonFlags, runFunc) {
	fs := pflag.NewFlagSet("orchestrate "+cmd.name, pflag.ContinueOnError)
	fs.SetOutput(io.Discard)
	common := &commonFlags{}
	common.register(fs, cmd)
	runCmd := cmd.run
	if cmd.setup != nil {
		runCmd = cmd.setup(fs)
	}
	return fs, common, runCmd
}

// commonFlags are the flags every subcommand takes, and those its kind
// adds (--host, --json, --handler).
type commonFlags struct {
	conn          consulclient.Options
	log           logging.Options
	prefix, host  string
	json, handler bool
}

func (f *commonFlags) register(fs *pflag.FlagSet, cmd *command) {
	f.conn.AddFlags(fs)
	f.log.AddFlags(fs)
	defPrefix := os.Getenv("ORCHESTRATE_PREFIX")
	if defPrefix == "" {
		defPrefix = schema.DefaultPrefix
	}
	fs.StringVar(&f.prefix, "prefix", defPrefix, "Consul KV prefix (default $ORCHESTRATE_PREFIX, else orchestrate)")
	if cmd.needsHost {
		fs.StringVar(&f.host, "host", "", "this host's name (default: the Consul agent's node name, else the OS hostname)")
	}
	if cmd.json {
		fs.BoolVar(&f.json, "json", false, "print JSON for machines")
	}
	if cmd.handler {
		fs.BoolVar(&f.handler, "handler", false, "run as a Consul watch handler: exit 0 when there is nothing to do, non-zero only on a failure")
	}
}

// env connects to Consul and builds what the command runs with.
func (f *commonFlags) env(stdio IO, cmd *command) (*env, error) {
	logger, err := f.log.New(stdio.Stderr)
	if err != nil {
		return nil, err
	}
	cfg, err := f.conn.Config()
	if err != nil {
		return nil, err
	}
	client, err := consulclient.NewClient(cfg)
	if err != nil {
		return nil, err
	}
	st, err := store.New(client, f.prefix)
	if err != nil {
		return nil, exitcode.Wrap(exitcode.Usage, fmt.Errorf("--prefix: %w", err))
	}
	e := &env{IO: stdio, log: logger, client: client, store: st, json: f.json, handler: f.handler, closeIdle: cfg.Transport.CloseIdleConnections}
	if cmd.needsHost {
		host := f.host
		if host == "" {
			if host, err = defaultHost(client, logger); err != nil {
				e.closeIdle()
				return nil, err
			}
		}
		if err := schema.ValidName("host", host); err != nil {
			return nil, exitcode.Usagef("--host: %v", err)
		}
		e.host = host
	}
	return e, nil
}

// defaultHost is the local agent's node name, else (no agent answering)
// the OS hostname. An agent that answers but refuses the token is an error
// (exit 3): the OS hostname may not be the node's name in Consul, under
// which the reaper and every other host look for this one.
func defaultHost(c *api.Client, log *slog.Logger) (string, error) {
	name, err := c.Agent().NodeName()
	if err == nil && name != "" {
		return name, nil
	}
	var se api.StatusError
	if errors.As(err, &se) && se.Code == http.StatusForbidden {
		return "", exitcode.Wrap(exitcode.Unavailable, fmt.Errorf("read this agent's node name for --host: %w (the token needs agent:read on this node, or pass --host)", err))
	}
	h, herr := os.Hostname()
	log.Debug("agent node name unavailable, using OS hostname", "err", err, "hostname", h)
	if herr != nil {
		return "", nil
	}
	return h, nil
}

// program is orchestrate as its help, man pages and completion scripts
// see it: the command table, each command's FlagSet and help.go's texts.
func program() *bincli.Program {
	cmds := commands()
	names := make([]string, len(cmds))
	for i, c := range cmds {
		names[i] = c.name
	}
	sort.Strings(names)
	return &bincli.Program{Name: "orchestrate", Help: commandHelp, Subcommands: names}
}

// commandHelp is the help of subcommand sub, or of orchestrate for "".
func commandHelp(sub string) (*bincli.Help, bool) {
	if sub == "" {
		return topLevelHelp(), true
	}
	cmd := findCommand(sub)
	if cmd == nil {
		return nil, false
	}
	fs, _, _ := newFlagSet(cmd)
	t := helps[cmd.name]
	name := "orchestrate " + cmd.name
	return &bincli.Help{
		Name:        name,
		Summary:     t.short,
		Synopsis:    []string{strings.TrimSpace(name + " [flags] " + cmd.usage)},
		Description: append([]string{cmd.summary}, t.more...),
		Flags:       fs,
		Exit:        t.exit,
		Examples:    helpExamples(t.examples),
		SeeAlso:     append([]string{"orchestrate(1)"}, t.seeAlso...),
		Args:        t.args,
	}, true
}

// topLevelHelp is `orchestrate --help`: the subcommands, in order.
func topLevelHelp() *bincli.Help {
	cmds := commands()
	sort.Slice(cmds, func(i, j int) bool { return cmds[i].name < cmds[j].name })
	items := make([]bincli.Item, len(cmds))
	for i, c := range cmds {
		items[i] = bincli.Item{Term: c.name, Text: helps[c.name].short}
	}
	return &bincli.Help{
		Name:        "orchestrate",
		Summary:     topHelp.short,
		Synopsis:    []string{"orchestrate SUBCOMMAND [flags] [args]"},
		Description: topHelp.more,
		Commands:    items,
		Examples:    helpExamples(topHelp.examples),
		SeeAlso:     topHelp.seeAlso,
	}
}
