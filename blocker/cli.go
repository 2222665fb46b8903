package blocker

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"strconv"
	"strings"

	"github.com/hashicorp/consul/api"
	"github.com/spf13/pflag"

	"github.com/jiocloud/orchestrate/internal/consulclient"
	"github.com/jiocloud/orchestrate/internal/exitcode"
	"github.com/jiocloud/orchestrate/internal/logging"
	"github.com/jiocloud/orchestrate/internal/paths"

	"github.com/jiocloud/orchestrate/internal/cli"
)

// Run runs `service-blocker args...` and returns the process exit code.
// Endpoints go to stdout; progress lines, logs and errors to stderr.
func Run(ctx context.Context, args []string, stdio cli.IO) int {
	err := run(ctx, args, stdio.Stdout, stdio.Stderr)
	if err != nil {
		fmt.Fprintf(stdio.Stderr, "service-blocker: %s\n", exitcode.Message(err))
	}
	return exitcode.Code(err)
}

// options are the command line.
type options struct {
	conn          consulclient.Options
	log           logging.Options
	dns, domain   string
	tag, mode     string
	passingOnly   bool
	noWatch       bool
	quiet, asJSON bool
	count         int
	cfg           Config
}

func run(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	if done, err := program().Meta(args, stdout); done {
		return err
	}
	var o options
	fs := o.flagSet()
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, pflag.ErrHelp) {
			return program().PrintHelp(stdout, "")
		}
		return exitcode.Usagef("%v (see service-blocker --help)", err)
	}
	cfg, err := o.config(fs.Args())
	if err != nil {
		return exitcode.Wrap(exitcode.Usage, err)
	}
	logger, err := o.log.New(stderr)
	if err != nil {
		return err
	}
	var consul *api.Client
	if cfg.Watch || cfg.needsHealth() {
		if consul, err = o.conn.Client(); err != nil {
			return err
		}
	}
	var progress io.Writer = stderr
	if o.quiet {
		progress = nil
	}
	b, err := New(cfg, consul, logger, progress)
	if err != nil {
		return exitcode.Wrap(exitcode.Usage, err)
	}
	res, waitErr := b.Wait(ctx)
	if o.asJSON {
		enc := json.NewEncoder(stdout)
		enc.SetIndent("", "  ")
		if err := enc.Encode(res.stable()); err != nil {
			return fmt.Errorf("write result: %w", err)
		}
	} else if waitErr == nil {
		for _, st := range res.Services {
			for _, e := range st.Endpoints {
				fmt.Fprintf(stdout, "%s %s %s\n", st.Name(), e, e.Target)
			}
		}
	}
	switch {
	case waitErr == nil:
		return nil
	case errors.Is(waitErr, ErrUnanswered), errors.Is(waitErr, ErrHealthUnanswered), errors.Is(waitErr, ErrRefused):
		return exitcode.Wrap(exitcode.Unavailable, waitErr)
	default:
		return exitcode.Wrap(exitcode.No, waitErr)
	}
}

// flagSet is service-blocker's command line, bound to o.
func (o *options) flagSet() *pflag.FlagSet {
	fs := pflag.NewFlagSet("service-blocker", pflag.ContinueOnError)
	fs.SetOutput(io.Discard)
	fs.SortFlags = false
	fs.StringVar(&o.dns, "dns", paths.ConsulDNSAddr, "DNS server to query, host:port (the local Consul agent's DNS)")
	fs.StringVar(&o.domain, "domain", "consul.", "Consul DNS domain")
	fs.StringVar(&o.tag, "tag", "", "only instances with this tag (queries TAG.SERVICE.service[.DC].DOMAIN)")
	fs.StringVar(&o.mode, "mode", string(Addressable), "addressable: an endpoint counts when Consul DNS returns it; functional: all its checks must also pass (HTTP API) and it must accept a TCP connection on its SRV port")
	fs.DurationVar(&o.cfg.ConnectTimeout, "connect-timeout", DefaultConnectTimeout, "TCP connect timeout per endpoint in functional mode")
	fs.BoolVar(&o.passingOnly, "passing-only", false, "addressable mode: count only instances whose checks all pass, from the agent's HTTP API (Consul DNS also returns warning instances); functional mode always does")
	fs.BoolVar(&o.noWatch, "no-watch", false, "do not hold a blocking query on the agent's HTTP API: poll DNS with backoff (health, where it counts, is asked at each poll)")
	fs.DurationVar(&o.cfg.Timeout, "timeout", DefaultTimeout, "give up after this long (0: wait for ever)")
	fs.DurationVar(&o.cfg.Interval, "interval", DefaultInterval, "first pause between polls (while watching: between TCP probes and retries); doubles while nothing changes")
	fs.DurationVar(&o.cfg.MaxInterval, "max-interval", DefaultMaxInterval, "longest pause between polls; while watching, DNS is still asked this often")
	fs.IntVar(&o.count, "count", 1, "endpoints needed for a SERVICE given without :N")
	fs.BoolVarP(&o.quiet, "quiet", "q", false, "no progress lines on stderr")
	fs.BoolVar(&o.asJSON, "json", false, "print the result as JSON on stdout")
	o.conn.AddFlags(fs)
	o.log.AddFlags(fs)
	cli.SetValues(fs, "mode", string(Addressable), string(Functional))
	return fs
}

// config turns flags and arguments into a valid Config, or an error naming
// the bad flag or argument.
func (o *options) config(args []string) (Config, error) {
	cfg := o.cfg
	var err error
	if cfg.DNS, err = dnsAddr(o.dns); err != nil {
		return Config{}, fmt.Errorf("--dns: %w", err)
	}
	if cfg.Domain, err = NormalizeDomain(o.domain); err != nil {
		return Config{}, fmt.Errorf("--domain: %w", err)
	}
	cfg.Datacenter, cfg.Tag = o.conn.Datacenter, o.tag
	if cfg.Datacenter != "" {
		if err := validLabel("datacenter", cfg.Datacenter); err != nil {
			return Config{}, fmt.Errorf("--datacenter: %w", err)
		}
	}
	if cfg.Tag != "" {
		if err := validLabel("tag", cfg.Tag); err != nil {
			return Config{}, fmt.Errorf("--tag: %w", err)
		}
	}
	switch Mode(o.mode) {
	case Addressable, Functional:
		cfg.Mode = Mode(o.mode)
	default:
		return Config{}, fmt.Errorf("--mode %q: want addressable or functional", o.mode)
	}
	cfg.PassingOnly = o.passingOnly
	cfg.Watch = !o.noWatch
	switch {
	case o.count < 1:
		return Config{}, fmt.Errorf("--count %d: must be at least 1", o.count)
	case cfg.Timeout < 0:
		return Config{}, fmt.Errorf("--timeout %s: must be 0 (wait for ever) or positive", cfg.Timeout)
	case cfg.Interval <= 0:
		return Config{}, fmt.Errorf("--interval %s: must be positive", cfg.Interval)
	case cfg.MaxInterval < cfg.Interval:
		return Config{}, fmt.Errorf("--max-interval %s is below --interval %s", cfg.MaxInterval, cfg.Interval)
	case cfg.ConnectTimeout <= 0:
		return Config{}, fmt.Errorf("--connect-timeout %s: must be positive", cfg.ConnectTimeout)
	}
	if len(args) == 0 {
		return Config{}, errors.New("no SERVICE[:N] given (see service-blocker --help)")
	}
	seen := map[string]bool{}
	for _, a := range args {
		r, err := ParseRequirement(a, o.count)
		if err != nil {
			return Config{}, err
		}
		if seen[r.Name()] {
			return Config{}, fmt.Errorf("%q: service %s given twice", a, r.Name())
		}
		seen[r.Name()] = true
		cfg.Requirements = append(cfg.Requirements, r)
	}
	return cfg, cfg.Validate()
}

// dnsAddr checks a --dns value: host:port, or a bare IP address meaning
// port 53.
func dnsAddr(s string) (string, error) {
	if ip := net.ParseIP(strings.Trim(s, "[]")); ip != nil {
		return net.JoinHostPort(ip.String(), "53"), nil
	}
	host, port, err := net.SplitHostPort(s)
	if err != nil {
		return "", fmt.Errorf("%q is not host:port", s)
	}
	if host == "" || strings.ContainsAny(host, " \t/") {
		return "", fmt.Errorf("%q: bad host %q", s, host)
	}
	n, err := strconv.Atoi(port)
	if err != nil || n < 1 || n > 65535 {
		return "", fmt.Errorf("%q: port %q is not a number from 1 to 65535", s, port)
	}
	return s, nil
}
