package daemon

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"
	"time"

	"github.com/jiocloud/orchestrate/internal/cli"
	"github.com/jiocloud/orchestrate/internal/consulclient"
	"github.com/jiocloud/orchestrate/internal/exitcode"
	"github.com/jiocloud/orchestrate/internal/logging"
	"github.com/jiocloud/orchestrate/reaper"
	"github.com/jiocloud/orchestrate/reaper/nova"
	"github.com/spf13/pflag"
)

// Run runs `reaper args...` until ctx ends and returns the exit code.
func Run(ctx context.Context, args []string, stdio cli.IO) int {
	return RunWithCloud(ctx, args, stdio, nil)
}

// RunWithCloud is Run with the cloud given (a simulated one for demos and
// tests); nil means OpenStack Nova from the environment.
func RunWithCloud(ctx context.Context, args []string, stdio cli.IO, cloud reaper.Cloud) int {
	err := run(ctx, args, stdio, cloud)
	if err == nil {
		return exitcode.OK
	}
	fmt.Fprintf(stdio.Stderr, "reaper: %s\n", exitcode.Message(err))
	return exitcode.Code(err)
}

// overrides are the flags that override a value of the config file; only
// a flag given on the command line does.
type overrides struct {
	dryRun      bool
	interval    time.Duration
	listen      string
	webConfig   string
	prefix      string
	lockKey     string
	maxInFlight int
	maxPerHour  int
}

func (o *overrides) addFlags(fs *pflag.FlagSet) {
	// The flag's own default is never used: only an explicit --dry-run or
	// --dry-run=false overrides the file, whose default is dry run.
	fs.BoolVar(&o.dryRun, "dry-run", false, "log every action and take none; --dry-run=false acts (default: dry_run in the file, else on)")
	fs.DurationVar(&o.interval, "interval", 0, "time between cycles (overrides interval)")
	fs.StringVar(&o.listen, "listen", "", "address for /metrics, e.g. 127.0.0.1:9469 (overrides listen)")
	fs.StringVar(&o.webConfig, "web-config-file", "", "Prometheus web configuration (TLS, basic auth) for /metrics; needed off loopback (overrides web_config_file)")
	fs.StringVar(&o.prefix, "prefix", "", "Consul KV prefix (overrides prefix; default $ORCHESTRATE_PREFIX, else orchestrate)")
	fs.StringVar(&o.lockKey, "lock-key", "", "leader lock key (overrides lock_key)")
	fs.IntVar(&o.maxInFlight, "max-in-flight", 0, "replacements and deletions in flight per role (overrides max_in_flight)")
	fs.IntVar(&o.maxPerHour, "max-actions-per-hour", 0, "destructive actions per hour (overrides max_actions_per_hour)")
}

// apply sets the config values whose flags were given.
func (o *overrides) apply(fs *pflag.FlagSet, cfg *reaper.Config) {
	set := map[string]func(){
		"dry-run":              func() { cfg.DryRun = &o.dryRun },
		"interval":             func() { cfg.Interval = reaper.Duration(o.interval) },
		"listen":               func() { cfg.Listen = o.listen },
		"web-config-file":      func() { cfg.WebConfigFile = o.webConfig },
		"prefix":               func() { cfg.Prefix = o.prefix },
		"lock-key":             func() { cfg.LockKey = o.lockKey },
		"max-in-flight":        func() { cfg.MaxInFlight = o.maxInFlight },
		"max-actions-per-hour": func() { cfg.MaxActionsPerHour = o.maxPerHour },
	}
	for name, f := range set {
		if fs.Changed(name) {
			f()
			// An error about the value names the flag, not the file.
			cfg.Source.SetBy(strings.ReplaceAll(name, "-", "_"), "--"+name)
		}
	}
}

// cmdLine are the reaper's command line.
type cmdLine struct {
	conn       consulclient.Options
	logOpts    logging.Options
	configPath string
	checkOnly  bool
	over       overrides
	fs         *pflag.FlagSet
}

// parse reads the command line; help is true when --help was asked for
// (and printed).
func (o *cmdLine) parse(args []string, stdout io.Writer) (help bool, err error) {
	fs := o.flagSet()
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, pflag.ErrHelp) {
			return true, program().PrintHelp(stdout, "")
		}
		return false, exitcode.Usagef("%v", err)
	}
	if fs.NArg() > 0 {
		return false, exitcode.Usagef("unexpected arguments: %s", strings.Join(fs.Args(), " "))
	}
	if o.configPath == "" {
		return false, exitcode.Usagef("--config FILE is required")
	}
	o.fs = fs
	return false, nil
}

// flagSet registers the reaper's flags, bound to o.
func (o *cmdLine) flagSet() *pflag.FlagSet {
	fs := pflag.NewFlagSet("reaper", pflag.ContinueOnError)
	fs.SetOutput(io.Discard)
	o.conn.AddFlags(fs)
	o.logOpts.AddFlags(fs)
	fs.StringVar(&o.configPath, "config", "", "YAML configuration file (required)")
	fs.BoolVar(&o.checkOnly, "check-config", false, "validate the configuration and exit")
	o.over.addFlags(fs)
	return fs
}

// config loads the file, applies the flags and validates the result.
func (o *cmdLine) config() (*reaper.Config, error) {
	cfg, err := LoadConfig(o.configPath)
	if err != nil {
		return nil, exitcode.Wrap(exitcode.Usage, err)
	}
	o.over.apply(o.fs, cfg)
	if err := CheckConfig(cfg); err != nil {
		return nil, exitcode.Wrap(exitcode.Usage, err)
	}
	return cfg, nil
}

func run(ctx context.Context, args []string, stdio cli.IO, cloud reaper.Cloud) error {
	if len(args) > 0 && args[0] == "identity" {
		return runIdentity(ctx, args[1:], stdio)
	}
	if done, err := program().Meta(args, stdio.Stdout); done {
		return err
	}
	var o cmdLine
	help, err := o.parse(args, stdio.Stdout)
	if help || err != nil {
		return err
	}
	cfg, err := o.config()
	if err != nil {
		return err
	}
	if o.checkOnly {
		fmt.Fprintf(stdio.Stdout, "%s: valid (%d roles, dry run %v)\n", o.configPath, len(cfg.Roles), cfg.IsDryRun())
		return nil
	}
	log, err := o.logOpts.New(stdio.Stderr)
	if err != nil {
		return err
	}
	client, err := o.conn.Client()
	if err != nil {
		return err
	}
	if cloud == nil {
		if cloud, err = openNova(ctx, cfg); err != nil {
			return err
		}
	}
	r, err := New(cfg, client, cloud, log)
	if err != nil {
		return exitcode.Wrap(exitcode.Usage, err)
	}
	b := cli.Build()
	log.Info("reaper starting", "version", b.Version, "commit", b.Commit, "go", b.GoVersion,
		"instance", r.ID(), "dry_run", cfg.IsDryRun(), "roles", len(cfg.Roles), "lock", cfg.LeaderKey())
	if err := r.Run(ctx); err != nil {
		return exitcode.Wrap(exitcode.Unavailable, err)
	}
	return nil
}

// openNova connects to the cloud of the config; missing credentials are a
// usage error, an unreachable cloud exit 3.
func openNova(ctx context.Context, cfg *reaper.Config) (reaper.Cloud, error) {
	nova, err := nova.NewNova(ctx, cfg.Cloud)
	if err != nil {
		if reaper.ClassOf(err) == reaper.Fatal && os.Getenv("OS_AUTH_URL") == "" && os.Getenv("OS_CLOUD") == "" && cfg.Cloud.Name == "" {
			return nil, exitcode.Wrap(exitcode.Usage, fmt.Errorf("no OpenStack credentials: set OS_CLOUD (clouds.yaml) or the OS_* variables: %w", err))
		}
		return nil, exitcode.Wrap(exitcode.Unavailable, err)
	}
	return nova, nil
}
