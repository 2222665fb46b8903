package hiera

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"time"

	"github.com/hashicorp/consul-template/config"
	"github.com/spf13/pflag"

	"github.com/jiocloud/orchestrate/internal/cli"
	"github.com/jiocloud/orchestrate/internal/consulclient"
	"github.com/jiocloud/orchestrate/internal/exitcode"
	"github.com/jiocloud/orchestrate/internal/fileutil"
	"github.com/jiocloud/orchestrate/internal/logging"
	"github.com/jiocloud/orchestrate/internal/store/schema"
	"github.com/jiocloud/orchestrate/templates"
	"github.com/jiocloud/orchestrate/watch"
)

// IO is the process's standard streams.
type IO = cli.IO

// Config is hiera-services' configuration: defaults, then the environment
// (through consulclient), then flags, then Validate.
type Config struct {
	// Out is the file to write.
	Out string
	// Template is an operator's template file; empty: the embedded one.
	Template string
	// Services and ServiceRegex select the services to output (default all).
	Services     []string
	ServiceRegex string
	// Dependencies is the node's dependencies file; empty: none.
	Dependencies string
	// Expect names services whose keys are always output.
	Expect []string
	// Watch keeps running and re-renders on every catalog change.
	Watch bool
	// Wait is MIN:MAX quiescence for --watch, as consul-template's -wait.
	Wait string
	// Exec is a shell command run after a change of what the node reads
	// in Out (all of it unless ReadsDeclared).
	Exec string
	// Reads names the services whose keys the node's Puppet reads besides
	// its dependencies and Expect; ReadsRegex reads every service whose
	// name matches. ReadsDeclared (--reads given, even empty, or
	// --reads-regex) makes Exec run only when keys the node reads changed.
	Reads         []string
	ReadsRegex    string
	ReadsDeclared bool
	// Splay is the window of the random delay before Exec; 0: none.
	Splay time.Duration
	// LockFile serialises overlapping runs; empty: .<out name>.lock beside Out.
	LockFile string
	// PassEnv names credentials Exec may inherit (see watch.ChildEnv).
	PassEnv []string
	// Feed follows the datacenter's catalog change feed in --watch while
	// a publisher serves it; Publish runs that publisher instead of
	// rendering. Prefix is the KV prefix of the feed.
	Feed    bool
	Publish bool
	Prefix  string

	Consul consulclient.Options
	Log    logging.Options

	serviceRe *regexp.Regexp
	readsRe   *regexp.Regexp
	wait      *config.WaitConfig
}

// AddFlags registers every flag on fs.
func (c *Config) AddFlags(fs *pflag.FlagSet) {
	fs.StringVarP(&c.Out, "out", "o", DefaultOut, "file to write the hiera data to")
	fs.StringVar(&c.Template, "template", "", "consul-template template to render instead of the built-in services.yaml.ctmpl")
	fs.StringArrayVar(&c.Services, "service", nil, "output only this service (repeatable; with --service-regex, either selects)")
	fs.StringVar(&c.ServiceRegex, "service-regex", "", "output only services whose name matches this Go regular expression")
	fs.StringVar(&c.Dependencies, "dependencies", "", "YAML file of this node's dependencies: SERVICE: {addressable: N, functional: N}; their keys are always output (empty lists while no instance exists)")
	fs.StringArrayVar(&c.Expect, "expect-service", nil, "always output this service's keys, as empty lists while no instance exists, so Puppet code that looks them up compiles (repeatable)")
	fs.BoolVar(&c.Watch, "watch", false, "keep running, re-render on every catalog change")
	fs.StringVar(&c.Wait, "wait", "", "with --watch: MIN[:MAX] quiescence before rendering, e.g. 2s:10s (MAX defaults to 4*MIN)")
	fs.StringVar(&c.Exec, "exec", "", "shell command to run when what this node reads in the file changed since it last ran (all of the file unless --reads; after --splay)")
	fs.StringSliceVar(&c.Reads, "reads", nil, "with --exec: the services this node's Puppet reads besides its dependencies and --expect-service (comma-separated, repeatable); given at all, even empty (--reads=), --exec runs only when their keys or the dependency state changed, not on any change of the file")
	fs.StringVar(&c.ReadsRegex, "reads-regex", "", "with --exec: this node's Puppet also reads every service whose name matches this Go regular expression (declares, as --reads does)")
	fs.DurationVar(&c.Splay, "splay", DefaultSplay, "with --exec: wait a random delay within this window before running it, changes meanwhile coalescing into the one run, which sees the latest data (0: run at once; at most 10m)")
	fs.StringVar(&c.LockFile, "lock-file", "", "lock serialising overlapping runs (default .NAME.lock beside --out)")
	fs.StringArrayVar(&c.PassEnv, "pass-env", nil, "let --exec inherit this credential variable (CONSUL_HTTP_TOKEN, CONSUL_HTTP_TOKEN_FILE or an OS_* one), withheld by default (repeatable)")
	defPrefix := os.Getenv("ORCHESTRATE_PREFIX")
	if defPrefix == "" {
		defPrefix = schema.DefaultPrefix
	}
	fs.BoolVar(&c.Feed, "feed", true, "with --watch: while a publisher (--publish) serves the datacenter's catalog change feed, follow it with one query and read again only the services that changed, instead of watching the whole catalog (--feed=false: always watch the catalog)")
	fs.BoolVar(&c.Publish, "publish", false, "run the datacenter's catalog change feed publisher (one at a time, under a Consul lock) instead of rendering: one blocking query per service, so its agent's limits.http_max_conns_per_client must exceed the number of services")
	fs.StringVar(&c.Prefix, "prefix", defPrefix, "Consul KV prefix of the change feed ($ORCHESTRATE_PREFIX when set)")
	c.Consul.AddFlags(fs)
	c.Log.AddFlags(fs)
}

// Validate checks the configuration and fills derived fields; the error
// names the bad flag.
func (c *Config) Validate() error {
	if strings.TrimSpace(c.Out) == "" {
		return errors.New("--out is empty")
	}
	if strings.HasSuffix(c.Out, "/") {
		return fmt.Errorf("--out %q names a directory, want a file", c.Out)
	}
	if fi, err := os.Stat(c.Out); err == nil && fi.IsDir() {
		return fmt.Errorf("--out %q is a directory, want a file", c.Out)
	} else if err == nil && !fi.Mode().IsRegular() {
		// WriteFile reads the old content and renames a new file over
		// it: a FIFO would block, /dev/zero exhaust memory, and /dev/null
		// be replaced by a regular file.
		return fmt.Errorf("--out %q is a device, pipe or socket, want a regular file", c.Out)
	}
	for _, s := range c.Services {
		if err := ValidServiceName(s); err != nil {
			return fmt.Errorf("--service: %w", err)
		}
	}
	for _, s := range c.Expect {
		if err := ValidServiceName(s); err != nil {
			return fmt.Errorf("--expect-service: %w", err)
		}
	}
	if c.ServiceRegex != "" {
		re, err := regexp.Compile(c.ServiceRegex)
		if err != nil {
			return fmt.Errorf("--service-regex: %w", err)
		}
		c.serviceRe = re
	}
	if c.Consul.Datacenter != "" && !regexp.MustCompile(`\A[A-Za-z0-9_.-]+\z`).MatchString(c.Consul.Datacenter) {
		return fmt.Errorf("--datacenter %q: want letters, digits, '.', '_' and '-'", c.Consul.Datacenter)
	}
	if c.Wait != "" {
		if !c.Watch {
			return errors.New("--wait needs --watch")
		}
		w, err := config.ParseWaitConfig(c.Wait)
		if err != nil {
			return fmt.Errorf("--wait %q: %w", c.Wait, err)
		}
		c.wait = w
	}
	if err := c.validateExec(); err != nil {
		return err
	}
	if err := watch.ValidPassEnv(c.PassEnv); err != nil {
		return err
	}
	if len(c.PassEnv) > 0 && c.Exec == "" {
		return errors.New("--pass-env needs --exec")
	}
	if err := schema.ValidPrefix(strings.Trim(c.Prefix, "/")); err != nil {
		return fmt.Errorf("--prefix: %w", err)
	}
	if c.LockFile == "" {
		c.LockFile = filepath.Join(filepath.Dir(c.Out), "."+filepath.Base(c.Out)+".lock")
	}
	return nil
}

// validateExec checks the flags that say when --exec runs.
func (c *Config) validateExec() error {
	for _, s := range c.Reads {
		if err := ValidServiceName(s); err != nil {
			return fmt.Errorf("--reads: %w", err)
		}
	}
	if c.ReadsRegex != "" {
		re, err := regexp.Compile(c.ReadsRegex)
		if err != nil {
			return fmt.Errorf("--reads-regex: %w", err)
		}
		c.readsRe = re
	}
	if len(c.Reads) > 0 || c.readsRe != nil {
		c.ReadsDeclared = true
	}
	if c.ReadsDeclared && c.Exec == "" {
		return errors.New("--reads and --reads-regex need --exec: they say when it runs")
	}
	if c.Splay < 0 || c.Splay > MaxSplay {
		return fmt.Errorf("--splay %s: want 0 (no delay) up to %s", c.Splay, MaxSplay)
	}
	return nil
}

// Run runs `hiera-services args...` and returns the process exit code:
// 0 done, 1 the --exec command failed (once mode), 2 bad flags or input,
// 3 Consul unreachable.
func Run(ctx context.Context, args []string, stdio IO) int {
	err := run(ctx, args, stdio)
	if err == nil {
		return exitcode.OK
	}
	fmt.Fprintf(stdio.Stderr, "hiera-services: %s\n", exitcode.Message(err))
	return exitcode.Code(err)
}

func run(ctx context.Context, args []string, stdio IO) error {
	if done, err := program().Meta(args, stdio.Stdout); done {
		return err
	}
	var c Config
	fs := newFlagSet(&c)
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, pflag.ErrHelp) {
			return program().PrintHelp(stdio.Stdout, "")
		}
		return exitcode.Usagef("%v", err)
	}
	if fs.NArg() > 0 {
		return exitcode.Usagef("unexpected argument %q (hiera-services takes flags only)", fs.Arg(0))
	}
	if c.Publish {
		return runPublish(ctx, &c, fs, stdio)
	}
	c.ReadsDeclared = fs.Changed("reads")
	if fs.Changed("splay") && c.Exec == "" {
		return exitcode.Usagef("--splay needs --exec: it delays it")
	}
	if err := c.Validate(); err != nil {
		return exitcode.Wrap(exitcode.Usage, err)
	}
	logger, err := c.Log.New(stdio.Stderr)
	if err != nil {
		return err
	}
	deps := Dependencies{}
	if c.Dependencies != "" {
		if deps, err = LoadDependencies(c.Dependencies); err != nil {
			return exitcode.Wrap(exitcode.Usage, err)
		}
	}
	tmpl := templates.ServicesYAML
	if c.Template != "" {
		b, err := fileutil.ReadLimited(c.Template, maxInputFile)
		if err != nil {
			return exitcode.Usagef("--template %s: %v", c.Template, err)
		}
		tmpl = string(b)
	}
	if err := checkTemplate(tmpl, NewFuncs(&Selection{}, logger).FuncMap()); err != nil {
		return exitcode.Wrap(exitcode.Usage, err)
	}
	if !c.Watch {
		// A Consul watch handler gets a JSON payload on stdin; the catalog is
		// read afresh anyway, but the payload must be consumed.
		go func() { _, _ = readPayload(stdio.Stdin) }()
	}
	f, err := newFileRun(&c, tmpl, deps, logger, stdio)
	if err != nil {
		return err
	}
	if !c.Watch {
		return f.once(ctx)
	}
	return f.watch(ctx)
}
