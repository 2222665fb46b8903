package orchestrate

import (
	"context"
	"fmt"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/pflag"

	"github.com/jiocloud/orchestrate/internal/exitcode"
	"github.com/jiocloud/orchestrate/internal/hieradata"
	"github.com/jiocloud/orchestrate/internal/paths"
	"github.com/jiocloud/orchestrate/internal/store"
	"github.com/jiocloud/orchestrate/internal/store/reaperkv"
	"github.com/jiocloud/orchestrate/internal/store/schema"
	"github.com/jiocloud/orchestrate/watch"
)

// watchConfigOptions are watch-config's flags: what the generated handlers
// run.
type watchConfigOptions struct {
	hieraServices string   // path of the hiera-services binary
	out           string   // --out of hiera-services
	dependencies  string   // --dependencies of hiera-services
	exec          string   // --exec of hiera-services
	tokenFile     string   // --token-file of the handlers
	hieraArgs     []string // further hiera-services arguments
	orchestrate   string   // path of the orchestrate binary
	puppetCmd     string   // converge's --puppet-cmd (the older single run)
	consistentCmd string   // converge's --consistent-cmd
	eventualCmd   string   // converge's --eventual-cmd; hiera-services --exec runs it
	// (with neither puppetCmd nor consistentCmd the version watch runs
	// pending-update only)
	convergeArgs  []string // further converge arguments
	watchServices []string // services whose health changes also re-render
	// role is converge's --role; rolloutDir, its rollout keys, and
	// wakeKey, its doorbell, are watched so the node's waiting converge
	// runs again when a slot frees or a role it follows progressed.
	role, rolloutDir, wakeKey string
	// drainCmd is `orchestrate drain`'s --drain-cmd; drainKey, this host's
	// drain request, is watched so the command runs when the reaper asks.
	drainCmd, drainKey, host string
	// standby: a key watch on this host's warm pool record runs
	// `orchestrate standby`, which holds the node's maintenance while it
	// is a standby (needs role).
	standby bool
	// repairServices are the node's own services whose critical checks
	// its repair watch repairs (converge --repair), each watched by a
	// checks watch; repairAttempts and repairBackoff are passed on.
	repairServices []string
	repairAttempts int
	repairBackoff  time.Duration
	// reads, when readsSet (--reads given, even empty), is what the
	// node's Puppet reads besides its dependencies: hiera-services' --reads.
	reads    []string
	readsSet bool
}

var cmdWatchConfig = &command{
	name: "watch-config", minArgs: 0, maxArgs: 0, needsHost: true,
	summary: "Print Consul agent configuration (JSON, for a file in /etc/consul.d/) whose watches run hiera-services on every catalog change and every health change of a service in the dependencies file (or named by --watch-service), and orchestrate converge (with --consistent-cmd or --puppet-cmd) when <prefix>/current_version changes; with --eventual-cmd, hiera-services runs converge's eventual step alone whenever the data changed. Handlers exit 0 when they found nothing to do.",
	setup: func(fs *pflag.FlagSet) runFunc {
		o := &watchConfigOptions{}
		fs.StringVar(&o.hieraServices, "hiera-services", paths.HieraServices, "absolute path of the hiera-services binary the watch runs")
		fs.StringVar(&o.out, "out", hieradata.DefaultOut, "file hiera-services writes (its --out), which every converge handler reads (its --hiera-data)")
		fs.StringVar(&o.dependencies, "dependencies", "", "this node's dependencies file (hiera-services --dependencies)")
		fs.StringVar(&o.exec, "exec", "", "command hiera-services runs when the data changed (its --exec), e.g. 'orchestrate converge --force ...'")
		fs.StringVar(&o.tokenFile, "handler-token-file", "", "token file the handlers read (their --token-file); a token itself never goes into a watch's arguments")
		fs.StringArrayVar(&o.hieraArgs, "hiera-arg", nil, "one more hiera-services argument, e.g. --hiera-arg=--service-regex=^os- (repeatable)")
		fs.StringVar(&o.orchestrate, "orchestrate", paths.Orchestrate, "absolute path of the orchestrate binary the current_version watch runs")
		fs.StringVar(&o.consistentCmd, "consistent-cmd", "", "converge's consistent Puppet run: the current_version watch runs `orchestrate converge` with it (without it or --puppet-cmd the watch only runs `orchestrate pending-update`)")
		fs.StringVar(&o.eventualCmd, "eventual-cmd", "", "converge's eventual Puppet run: the current_version watch runs it after the consistent one, and hiera-services runs `orchestrate converge --eventual-only` (this step only) whenever the data changed; needs --consistent-cmd or --puppet-cmd, excludes --exec")
		fs.StringVar(&o.puppetCmd, "puppet-cmd", "", "the older single Puppet run, instead of --consistent-cmd")
		fs.StringArrayVar(&o.convergeArgs, "converge-arg", nil, "one more converge argument, e.g. --converge-arg=--validate-dir=/usr/lib/jiocloud/tests (repeatable)")
		fs.StringVar(&o.role, "role", "", "this node's role: converge takes one of its update slots before the consistent step (`orchestrate rollout`), and a keyprefix watch on the role's rollout keys and a key watch on its doorbell (<prefix>/wake/ROLE) run converge again whenever a slot may have freed")
		fs.StringVar(&o.drainCmd, "drain-cmd", "", "command that moves this host's work away when the reaper drains it (scale in, replacement): a key watch on <prefix>/drain/HOST runs `orchestrate drain --drain-cmd CMD`, which answers the reaper when it succeeded")
		fs.BoolVar(&o.standby, "standby", false, "this node may be a reaper warm pool standby: a key watch on <prefix>/reaper/pool/ROLE/HOST runs `orchestrate standby`, which keeps the node in Consul maintenance while it is one and ends it when the reaper claims it (needs --role)")
		fs.StringArrayVar(&o.repairServices, "repair-service", nil, "a service of this node whose checks its repair watch follows: a checks watch on it runs `orchestrate converge --repair`, which re-runs converge while one of this node's checks of it is critical, at most --repair-attempts times (the first step, rerun, of a reaper role's repair ladder; repeatable)")
		fs.IntVar(&o.repairAttempts, "repair-attempts", 3, "with --repair-service, the repair handler's --repair-attempts")
		fs.DurationVar(&o.repairBackoff, "repair-backoff", time.Minute, "with --repair-service, the repair handler's --repair-backoff")
		fs.StringArrayVar(&o.watchServices, "watch-service", nil, "also re-render when this service's health changes, to keep its healthy_services:: keys fresh (repeatable; the dependencies file's services are watched already)")
		fs.StringSliceVar(&o.reads, "reads", nil, "the services this node's Puppet reads besides its dependencies (comma-separated, repeatable; --reads= for none): each gets a service watch, as a dependency does, and hiera-services runs --exec (the eventual step) only when their data, the dependencies' or a --watch-service's changed, instead of on any change of the file (hiera-services --reads)")
		return func(ctx context.Context, e *env, _ []string) error {
			o.readsSet = fs.Changed("reads")
			return runWatchConfig(ctx, e, *o)
		}
	},
}

func runWatchConfig(_ context.Context, e *env, o watchConfigOptions) error {
	if err := o.validate(); err != nil {
		return exitcode.Wrap(exitcode.Usage, fmt.Errorf("watch-config: %w", err))
	}
	if o.role != "" {
		o.rolloutDir = e.store.RolloutDir(o.role)
		o.wakeKey = e.store.WakeKey(o.role)
	}
	o.host = e.host
	o.drainKey = store.DrainKey(e.store.Prefix(), e.host)
	var deps hieradata.Dependencies
	if o.dependencies != "" {
		// The dependencies file names the services whose health the node
		// waits on; each gets its own watch. It must exist now: a watch
		// configuration generated without it would miss their changes.
		d, err := hieradata.LoadDependencies(o.dependencies)
		if err != nil {
			return exitcode.Wrap(exitcode.Usage, fmt.Errorf("watch-config: %w", err))
		}
		deps = d
	}
	out, err := watch.AgentConfig(watchEntries(o, deps, e.store.Prefix()))
	if err != nil {
		return exitcode.Wrap(exitcode.Usage, fmt.Errorf("watch-config: %w", err))
	}
	_, err = e.Stdout.Write(out)
	return err
}

// watchEntries lists the watches a node runs; each is one entry. prefix is
// orchestrate's KV prefix, for watches on keys under it.
//
// Which watch types, and why: a "services" watch (/v1/catalog/services)
// fires when a service is registered, deregistered or changed (an instance
// added or removed, a new address or tag), but not when a check changes
// state. A "service" watch (/v1/health/service/NAME) fires when anything
// about that one service changes, its checks' state included. So the
// services watch keeps the services:: keys fresh, and one service watch per
// dependency keeps the dependency counts and orchestrate::dependencies_met
// fresh. A datacenter-wide "checks" watch would do both but fire on every
// check update of every node; a service watch fires only for its service,
// and a TTL check refreshed with the same status and output writes nothing
// to the catalog, so an idle fleet causes no render at all.
func watchEntries(o watchConfigOptions, deps hieradata.Dependencies, prefix string) []watch.Watch {
	hs := o.hieraServicesArgs(prefix)
	ws := []watch.Watch{
		// The handler reads the catalog itself and ignores the payload.
		{Type: "services", Args: hs},
	}
	seen := map[string]bool{}
	add := func(svc string) {
		if !seen[svc] {
			seen[svc] = true
			ws = append(ws, watch.Watch{Type: "service", Service: svc, Args: hs})
		}
	}
	for _, r := range deps {
		add(r.Service)
	}
	for _, s := range o.watchServices {
		add(s)
	}
	// What the node reads changes with its instances and health, neither
	// of which moves the service list.
	for _, s := range o.reads {
		add(s)
	}
	// A new desired version: the node converges to it (or, without a
	// Puppet command, says whether it has an update pending).
	ws = append(ws, watch.Watch{Type: "key", Key: store.CurrentVersionKey(prefix), Args: o.currentVersionArgs(prefix)})
	if o.role != "" {
		// The role's rollout changed (a slot freed, the policy changed, a
		// resume) or its doorbell rang (a host of a role it follows
		// reported the version): a node waiting for a slot decides again.
		// The handler reads KV itself and ignores the payload, so a
		// doorbell rung by anyone only wakes. --slot-wake: only a waiting
		// host acts; a failed one is not rebuilt on every change of its
		// role's rollout.
		ws = append(ws, watch.Watch{Type: "keyprefix", Prefix: o.rolloutDir, Args: o.slotWakeArgs(prefix)},
			watch.Watch{Type: "key", Key: o.wakeKey, Args: o.slotWakeArgs(prefix)})
	}
	if o.drainCmd != "" {
		// The reaper asked this host to drain: the handler moves the work
		// away and answers (it acts only on an unanswered request, so its
		// own answer firing the watch again does nothing).
		args := o.withConnection([]string{o.orchestrate, "drain", "--handler", "--host", o.host, "--drain-cmd", o.drainCmd}, prefix)
		ws = append(ws, watch.Watch{Type: "key", Key: o.drainKey, Args: args})
	}
	for _, svc := range o.repairServices {
		// A check of one of the node's own services changed (any
		// instance's: a checks watch takes a service, not a node): the
		// handler reads its own agent's checks and repairs only while one
		// of them is critical, at most --repair-attempts times an episode.
		ws = append(ws, watch.Watch{Type: "checks", Service: svc, Args: o.repairArgs(prefix)})
	}
	if o.standby {
		// The reaper holds this host as a standby (or claimed it): the
		// handler sets or ends the node's maintenance to match. A key
		// watch fires when the agent starts too, before Puppet registers
		// the node's services.
		args := o.withConnection([]string{o.orchestrate, "standby", "--handler", "--host", o.host, "--role", o.role}, prefix)
		ws = append(ws, watch.Watch{Type: "key", Key: reaperkv.PoolKey(prefix, o.role, o.host), Args: args})
	}
	// The reaper's heartbeat rang (every heartbeat_interval, and when the
	// agent starts): the handler writes the host's own heartbeat record,
	// so a healthy idle host's records move and it is not counted silent.
	// Its value is never read.
	ws = append(ws, watch.Watch{Type: "key", Key: reaperkv.ReaperKey(prefix, reaperkv.ReaperHeartbeatKey),
		Args: o.withConnection([]string{o.orchestrate, "heartbeat", "--handler", "--host", o.host}, prefix)})
	return ws
}

// converges: the version watch runs converge (not only pending-update).
func (o watchConfigOptions) converges() bool { return o.puppetCmd != "" || o.consistentCmd != "" }

func (o watchConfigOptions) currentVersionArgs(prefix string) []string {
	if !o.converges() {
		// --handler: "nothing to do" exits 0, or the agent logs it as an error.
		return o.withConnection([]string{o.orchestrate, "pending-update", "--handler"}, prefix)
	}
	return o.convergeArgsFor(prefix, false)
}

// convergeArgsFor is the converge command line of a handler: the version
// watch's, or with eventualOnly the one hiera-services --exec runs after
// the data changed.
func (o watchConfigOptions) convergeArgsFor(prefix string, eventualOnly bool) []string {
	args := []string{o.orchestrate, "converge", "--handler"}
	if eventualOnly {
		args = append(args, "--eventual-only")
	}
	if o.puppetCmd != "" {
		args = append(args, "--puppet-cmd", o.puppetCmd)
	} else {
		args = append(args, "--consistent-cmd", o.consistentCmd)
	}
	if o.eventualCmd != "" {
		args = append(args, "--eventual-cmd", o.eventualCmd)
	}
	if o.role != "" {
		args = append(args, "--role", o.role)
	}
	// converge tells pending from failed by the data hiera-services writes:
	// the same file, whatever either binary's default.
	args = append(args, "--hiera-data", o.out)
	return append(o.withConnection(args, prefix), o.convergeArgs...)
}

// slotWakeArgs is the converge command line of the rollout watch: the
// version watch's, acting only when the host waits for a slot.
func (o watchConfigOptions) slotWakeArgs(prefix string) []string {
	args := o.convergeArgsFor(prefix, false)
	return append(args[:3:3], append([]string{"--slot-wake"}, args[3:]...)...)
}

// repairArgs is the converge command line of the repair watch: the
// version watch's, with --repair and the node's repaired services.
func (o watchConfigOptions) repairArgs(prefix string) []string {
	args := o.convergeArgsFor(prefix, false)
	extra := []string{"--repair"}
	for _, svc := range o.repairServices {
		extra = append(extra, "--repair-service", svc)
	}
	extra = append(extra, "--repair-attempts", strconv.Itoa(o.repairAttempts), "--repair-backoff", o.repairBackoff.String())
	return append(args[:3:3], append(extra, args[3:]...)...)
}

// withConnection adds the prefix and token file the handlers use.
func (o watchConfigOptions) withConnection(args []string, prefix string) []string {
	if prefix != schema.DefaultPrefix {
		args = append(args, "--prefix", prefix)
	}
	if o.tokenFile != "" {
		args = append(args, "--token-file", o.tokenFile)
	}
	return args
}

func (o watchConfigOptions) hieraServicesArgs(prefix string) []string {
	args := []string{o.hieraServices, "--out", o.out}
	if o.dependencies != "" {
		args = append(args, "--dependencies", o.dependencies)
	}
	switch {
	case o.exec != "":
		args = append(args, "--exec", o.exec)
	case o.eventualCmd != "":
		// The data changed: the eventual step runs again, alone.
		args = append(args, "--exec", watch.ShellCommand(o.convergeArgsFor(prefix, true)))
	}
	if o.readsSet {
		// A --watch-service is watched because Puppet reads it.
		reads := append(slices.Clone(o.reads), o.watchServices...)
		slices.Sort(reads)
		args = append(args, "--reads="+strings.Join(slices.Compact(reads), ","))
	}
	if o.tokenFile != "" {
		args = append(args, "--token-file", o.tokenFile)
	}
	return append(args, o.hieraArgs...)
}

func (o watchConfigOptions) validate() error {
	// Consul runs handlers from its own working directory.
	for _, p := range []struct{ flag, path string }{
		{"--hiera-services", o.hieraServices}, {"--out", o.out},
		{"--dependencies", o.dependencies}, {"--handler-token-file", o.tokenFile},
		{"--orchestrate", o.orchestrate},
	} {
		if p.path != "" && !filepath.IsAbs(p.path) {
			return fmt.Errorf("%s %q: want an absolute path (Consul runs handlers from its own directory)", p.flag, p.path)
		}
	}
	if o.hieraServices == "" || o.out == "" || o.orchestrate == "" {
		return fmt.Errorf("--hiera-services, --orchestrate and --out must not be empty")
	}
	if err := o.validateOwnedFlags(); err != nil {
		return err
	}
	if o.role != "" {
		if err := schema.ValidName("--role", o.role); err != nil {
			return err
		}
	}
	if o.standby && o.role == "" {
		return fmt.Errorf("--standby needs --role (the standby's record is under its role)")
	}
	if err := o.validateServices(); err != nil {
		return err
	}
	if o.readsSet && o.exec == "" && o.eventualCmd == "" {
		return fmt.Errorf("--reads needs --exec or --eventual-cmd: it says when hiera-services runs them")
	}
	switch {
	case o.puppetCmd != "" && o.consistentCmd != "":
		return fmt.Errorf("--puppet-cmd and --consistent-cmd exclude each other (--puppet-cmd is the older single Puppet run)")
	case o.eventualCmd != "" && !o.converges():
		return fmt.Errorf("--eventual-cmd needs --consistent-cmd (or --puppet-cmd)")
	case o.eventualCmd != "" && o.exec != "":
		return fmt.Errorf("--eventual-cmd and --exec exclude each other: with --eventual-cmd, hiera-services runs the eventual step when the data changed")
	case o.role != "" && !o.converges():
		return fmt.Errorf("--role needs --consistent-cmd or --puppet-cmd: the role's slots are taken by converge")
	case len(o.convergeArgs) > 0 && !o.converges():
		return fmt.Errorf("--converge-arg needs --consistent-cmd or --puppet-cmd: without one the current_version watch does not converge")
	}
	for _, a := range o.convergeArgs {
		if a == "--token" || strings.HasPrefix(a, "--token=") {
			return fmt.Errorf("--converge-arg --token: a token in a watch's arguments shows in process listings; use --handler-token-file")
		}
	}
	for _, a := range o.hieraArgs {
		if a == "--token" || strings.HasPrefix(a, "--token=") {
			// The value is a token: never echo it.
			return fmt.Errorf("--hiera-arg --token: a token in a watch's arguments shows in process listings; use --handler-token-file")
		}
		if a == "--watch" || strings.HasPrefix(a, "--watch=") {
			return fmt.Errorf("--hiera-arg %q: a watch handler renders once per change; run --watch as its own daemon instead", a)
		}
	}
	// A token inside a command string or an argument's value lands in the
	// watch's arguments just the same. The value is never echoed.
	values := []struct{ flag, v string }{{"--exec", o.exec}, {"--puppet-cmd", o.puppetCmd}, {"--consistent-cmd", o.consistentCmd}, {"--eventual-cmd", o.eventualCmd}, {"--drain-cmd", o.drainCmd}}
	for _, a := range o.hieraArgs {
		values = append(values, struct{ flag, v string }{"--hiera-arg", a})
	}
	for _, a := range o.convergeArgs {
		values = append(values, struct{ flag, v string }{"--converge-arg", a})
	}
	for _, x := range values {
		if tokenInArgs.MatchString(x.v) {
			return fmt.Errorf("%s holds a Consul token: a token in a watch's arguments shows in process listings; use --handler-token-file (or a token file in the command)", x.flag)
		}
	}
	return nil
}

// validateServices checks the services named to watch (--watch-service,
// --reads, --repair-service) and the repair watch's flags.
func (o watchConfigOptions) validateServices() error {
	for _, s := range o.watchServices {
		if err := hieradata.ValidServiceName(s); err != nil {
			return fmt.Errorf("--watch-service: %w", err)
		}
	}
	for _, s := range o.reads {
		if err := hieradata.ValidServiceName(s); err != nil {
			return fmt.Errorf("--reads: %w", err)
		}
	}
	return o.validateRepair()
}

// validateRepair checks the repair watch's flags: its services, and a
// converge to run.
func (o watchConfigOptions) validateRepair() error {
	if len(o.repairServices) == 0 {
		return nil
	}
	if !o.converges() {
		return fmt.Errorf("--repair-service needs --consistent-cmd or --puppet-cmd: the repair re-runs converge")
	}
	for _, s := range o.repairServices {
		if err := hieradata.ValidServiceName(s); err != nil {
			return fmt.Errorf("--repair-service: %w", err)
		}
	}
	if o.repairAttempts < 1 || o.repairAttempts > 20 {
		return fmt.Errorf("--repair-attempts %d must be between 1 and 20", o.repairAttempts)
	}
	if o.repairBackoff < time.Second {
		return fmt.Errorf("--repair-backoff %s must be at least 1s", o.repairBackoff)
	}
	return nil
}

// ownedFlags are the flags of the handlers that watch-config sets itself
// from its own, so that the handlers agree with each other: converge
// reads the file hiera-services writes, and hiera-services renders the
// dependencies the service watches follow.
var ownedFlags = []struct{ via, flag, short, owner, why string }{
	{"--hiera-arg", "--out", "-o", "--out", "converge reads the file hiera-services writes"},
	{"--hiera-arg", "--dependencies", "", "--dependencies", "hiera-services renders the dependencies the service watches follow"},
	{"--converge-arg", "--hiera-data", "", "--out", "converge reads the file hiera-services writes"},
}

// validateOwnedFlags refuses a --hiera-arg or --converge-arg that would
// give a handler another value for a flag watch-config owns: hiera-services
// writing one file while converge reads another is how a waiting node used
// to be recorded as failed. The same value again is harmless.
func (o watchConfigOptions) validateOwnedFlags() error {
	owners := map[string]string{"--out": o.out, "--dependencies": o.dependencies}
	for _, f := range ownedFlags {
		args := o.hieraArgs
		if f.via == "--converge-arg" {
			args = o.convergeArgs
		}
		for i := range args {
			v, ok := flagValue(args, i, f.flag, f.short)
			if ok && v != owners[f.owner] {
				return fmt.Errorf("%s %s %q: watch-config gives the handlers its own %s (%q), so %s; set %s instead", f.via, f.flag, v, f.owner, owners[f.owner], f.why, f.owner)
			}
		}
	}
	return nil
}

// flagValue says whether args[i] sets flag (or its one-letter short form),
// and to what: "--flag=V", "--flag V", "-oV", "-o=V" or "-o V".
func flagValue(args []string, i int, flag, short string) (string, bool) {
	a := args[i]
	next := func() string {
		if i+1 < len(args) {
			return args[i+1]
		}
		return ""
	}
	switch {
	case a == flag || (short != "" && a == short):
		return next(), true
	case strings.HasPrefix(a, flag+"="):
		return strings.TrimPrefix(a, flag+"="), true
	case short != "" && strings.HasPrefix(a, short):
		return strings.TrimPrefix(strings.TrimPrefix(a, short), "="), true
	}
	return "", false
}

// tokenInArgs finds a Consul token given on a command line: a --token or
// -token flag (not -token-file), CONSUL_HTTP_TOKEN= (not _FILE) or an
// X-Consul-Token header.
var tokenInArgs = regexp.MustCompile(`(?i)(^|[\s'"=])--?token([=\s'"]|$)|CONSUL_HTTP_TOKEN=|X-Consul-Token`)
