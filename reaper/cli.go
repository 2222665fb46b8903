package reaper

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"
	"time"

	"github.com/spf13/pflag"

	"github.com/jiocloud/orchestrate/internal/consulclient"
	"github.com/jiocloud/orchestrate/internal/exitcode"
	"github.com/jiocloud/orchestrate/internal/logging"
)

const usageText = `usage: reaper --config FILE [flags]

Keeps every role at its desired count of healthy, young machines through
OpenStack Nova, under a Consul session lock (several copies may run; one
acts). Dry run unless the config says dry_run: false or --dry-run=false.

`

// Run runs `reaper args...` until ctx ends and returns the exit code.
func Run(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	return RunWithCloud(ctx, args, stdout, stderr, nil)
}

// RunWithCloud is Run with the cloud given (a simulated one for demos and
// tests); nil means OpenStack Nova from the environment.
func RunWithCloud(ctx context.Context, args []string, stdout, stderr io.Writer, cloud Cloud) int {
	err := run(ctx, args, stdout, stderr, cloud)
	if err == nil {
		return exitcode.OK
	}
	fmt.Fprintf(stderr, "reaper: %v\n", err)
	return exitcode.Code(err)
}

func run(ctx context.Context, args []string, stdout, stderr io.Writer, cloud Cloud) error {
	fs := pflag.NewFlagSet("reaper", pflag.ContinueOnError)
	fs.SetOutput(io.Discard)
	var (
		conn        consulclient.Options
		logOpts     logging.Options
		configPath  string
		checkOnly   bool
		dryRun      bool
		interval    time.Duration
		listen      string
		prefix      string
		lockKey     string
		maxInFlight int
		maxPerHour  int
	)
	conn.AddFlags(fs)
	logOpts.AddFlags(fs)
	fs.StringVar(&configPath, "config", "", "YAML configuration file (required)")
	fs.BoolVar(&checkOnly, "check-config", false, "validate the configuration and exit")
	// The flag's own default is never used: only an explicit --dry-run or
	// --dry-run=false overrides the file, whose default is dry run.
	fs.BoolVar(&dryRun, "dry-run", false, "log every action and take none; --dry-run=false acts (default: dry_run in the file, else on)")
	fs.DurationVar(&interval, "interval", 0, "time between cycles (overrides interval)")
	fs.StringVar(&listen, "listen", "", "address for /metrics, e.g. 127.0.0.1:9469 (overrides listen)")
	fs.StringVar(&prefix, "prefix", "", "Consul KV prefix (overrides prefix; default $ORCHESTRATE_PREFIX, else orchestrate)")
	fs.StringVar(&lockKey, "lock-key", "", "leader lock key (overrides lock_key)")
	fs.IntVar(&maxInFlight, "max-in-flight", 0, "replacements and deletions in flight per role (overrides max_in_flight)")
	fs.IntVar(&maxPerHour, "max-actions-per-hour", 0, "destructive actions per hour (overrides max_actions_per_hour)")
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, pflag.ErrHelp) {
			fmt.Fprint(stdout, usageText+fs.FlagUsages())
			return nil
		}
		return exitcode.Usagef("%v", err)
	}
	if fs.NArg() > 0 {
		return exitcode.Usagef("unexpected arguments: %s", strings.Join(fs.Args(), " "))
	}
	if configPath == "" {
		return exitcode.Usagef("--config FILE is required")
	}
	cfg, err := LoadConfig(configPath)
	if err != nil {
		return exitcode.Wrap(exitcode.Usage, fmt.Errorf("config: %w", err))
	}
	if fs.Changed("dry-run") {
		cfg.DryRun = &dryRun
	}
	if fs.Changed("interval") {
		cfg.Interval = Duration(interval)
	}
	if fs.Changed("listen") {
		cfg.Listen = listen
	}
	if fs.Changed("prefix") {
		cfg.Prefix = prefix
	}
	if fs.Changed("lock-key") {
		cfg.LockKey = lockKey
	}
	if fs.Changed("max-in-flight") {
		cfg.MaxInFlight = maxInFlight
	}
	if fs.Changed("max-actions-per-hour") {
		cfg.MaxActionsPerHour = maxPerHour
	}
	if err := cfg.Validate(); err != nil {
		return exitcode.Wrap(exitcode.Usage, fmt.Errorf("config %s: %w", configPath, err))
	}
	if checkOnly {
		fmt.Fprintf(stdout, "%s: valid (%d roles, dry run %v)\n", configPath, len(cfg.Roles), cfg.IsDryRun())
		return nil
	}
	log, err := logOpts.New(stderr)
	if err != nil {
		return err
	}
	client, err := conn.Client()
	if err != nil {
		return err
	}
	if cloud == nil {
		nova, err := NewNova(ctx, cfg.Cloud)
		if err != nil {
			if ClassOf(err) == Fatal && os.Getenv("OS_AUTH_URL") == "" && os.Getenv("OS_CLOUD") == "" && cfg.Cloud.Name == "" {
				return exitcode.Wrap(exitcode.Usage, fmt.Errorf("no OpenStack credentials: set OS_CLOUD (clouds.yaml) or the OS_* variables: %w", err))
			}
			return exitcode.Wrap(exitcode.Unavailable, err)
		}
		cloud = nova
	}
	r, err := New(cfg, client, cloud, log)
	if err != nil {
		return exitcode.Wrap(exitcode.Usage, err)
	}
	log.Info("reaper starting", "instance", r.ID(), "dry_run", cfg.IsDryRun(), "roles", len(cfg.Roles), "lock", cfg.LeaderKey())
	if err := r.Run(ctx); err != nil {
		return exitcode.Wrap(exitcode.Unavailable, err)
	}
	return nil
}
