package blocker

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"net"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/hashicorp/consul/api"
)

// Mode says when an endpoint counts.
type Mode string

// The modes of the issue: addressable (Consul DNS returns it) and
// functional (it also accepts a TCP connection on its SRV port).
const (
	Addressable Mode = "addressable"
	Functional  Mode = "functional"
)

// Defaults of the service-blocker command line.
const (
	DefaultTimeout        = 10 * time.Minute
	DefaultInterval       = 500 * time.Millisecond
	DefaultMaxInterval    = 5 * time.Second
	DefaultConnectTimeout = 2 * time.Second
)

// Health reports which instances of a service pass all their health
// checks, as address:port strings. ConsulHealth is the real one.
type Health interface {
	Passing(ctx context.Context, service, tag, datacenter string) (map[string]bool, error)
}

// ConsulHealth asks a Consul agent's HTTP API for passing instances.
type ConsulHealth struct {
	Client *api.Client
}

var _ Health = ConsulHealth{}

// Passing implements Health with /v1/health/service/<service>?passing.
func (h ConsulHealth) Passing(ctx context.Context, service, tag, datacenter string) (map[string]bool, error) {
	q := (&api.QueryOptions{Datacenter: datacenter}).WithContext(ctx)
	entries, meta, err := h.Client.Health().Service(service, tag, true, q)
	var se api.StatusError
	if errors.As(err, &se) && se.Code == http.StatusForbidden {
		return nil, fmt.Errorf("passing instances of %s: %w: %w", service, ErrRefused, err)
	}
	if err != nil {
		return nil, fmt.Errorf("passing instances of %s: %w", service, err)
	}
	// Consul leaves out, with a 200, the instances the token may not read:
	// counting what is left would take "refused" for "too few" until the
	// timeout.
	if meta != nil && meta.ResultsFilteredByACLs {
		return nil, fmt.Errorf("passing instances of %s: %w: instances hidden by Consul's ACLs (the token needs service:read on %q and node:read on their nodes)", service, ErrRefused, service)
	}
	out := make(map[string]bool, len(entries))
	for _, e := range entries {
		if e.Service == nil {
			continue
		}
		addr := e.Service.Address
		if addr == "" && e.Node != nil {
			addr = e.Node.Address
		}
		out[net.JoinHostPort(addr, strconv.Itoa(e.Service.Port))] = true
	}
	return out, nil
}

// Config is what a Blocker waits for and how.
type Config struct {
	// DNS is the server's host:port; Domain is fully qualified ("consul.").
	DNS    string
	Domain string
	// Datacenter and Tag narrow every query; empty means the agent's
	// datacenter and any tag.
	Datacenter string
	Tag        string
	// Mode is Addressable or Functional.
	Mode Mode
	// ConnectTimeout bounds each TCP connection attempt in Functional mode.
	ConnectTimeout time.Duration
	// PassingOnly counts only instances Health reports passing (Consul DNS
	// also returns instances whose checks are warning).
	PassingOnly bool
	// Timeout is how long to wait in all; 0 waits for ever.
	Timeout time.Duration
	// Interval is the first pause between polls; it doubles after every poll
	// that changes nothing, up to MaxInterval, and starts over when a count
	// changes.
	Interval, MaxInterval time.Duration
	// QueryTimeout bounds one DNS exchange; zero means DefaultQueryTimeout.
	QueryTimeout time.Duration
	// Requirements are what to wait for, all at once.
	Requirements []Requirement
}

// Validate names the first field that cannot work.
func (c Config) Validate() error {
	switch {
	case c.DNS == "":
		return errors.New("no DNS server address")
	case c.Domain == "":
		return errors.New("no domain")
	case c.Mode != Addressable && c.Mode != Functional:
		return fmt.Errorf("mode %q: want addressable or functional", c.Mode)
	case c.Mode == Functional && c.ConnectTimeout <= 0:
		return fmt.Errorf("connect timeout %s: must be positive", c.ConnectTimeout)
	case c.Timeout < 0:
		return fmt.Errorf("timeout %s: must be 0 (for ever) or positive", c.Timeout)
	case c.Interval <= 0:
		return fmt.Errorf("interval %s: must be positive", c.Interval)
	case c.MaxInterval < c.Interval:
		return fmt.Errorf("max interval %s is below interval %s", c.MaxInterval, c.Interval)
	case len(c.Requirements) == 0:
		return errors.New("no service to wait for")
	}
	if c.Datacenter != "" {
		if err := validLabel("datacenter", c.Datacenter); err != nil {
			return err
		}
	}
	if c.Tag != "" {
		if err := validLabel("tag", c.Tag); err != nil {
			return err
		}
	}
	seen := map[string]bool{}
	for _, r := range c.Requirements {
		if err := validLabel("service", r.Service); err != nil {
			return err
		}
		if r.Count < 1 {
			return fmt.Errorf("%s: count %d is below 1", r.Service, r.Count)
		}
		if seen[r.Service] {
			return fmt.Errorf("service %s given twice", r.Service)
		}
		seen[r.Service] = true
	}
	return nil
}

// Status is where one requirement stands after a poll.
type Status struct {
	Requirement
	// Endpoints are those that count in the configured mode.
	Endpoints []Endpoint `json:"endpoints"`
	// Found is len(Endpoints).
	Found int `json:"found"`
	// Met says Found >= Count.
	Met bool `json:"met"`
	// Answered says a poll for this service ever completed (DNS, and health
	// with PassingOnly, answered).
	Answered bool `json:"answered"`
	// LastError is the most recent failure of a poll, if the last one failed.
	LastError string `json:"last_error,omitempty"`
}

// Result is the outcome of Wait, one Status per requirement in the order
// given.
type Result struct {
	Mode     Mode          `json:"mode"`
	Met      bool          `json:"met"`
	Elapsed  time.Duration `json:"-"`
	Services []Status      `json:"services"`
}

// ErrTimeout is returned (wrapped, naming what is short) when the timeout
// passed with DNS answering but too few endpoints.
var ErrTimeout = errors.New("timed out")

// ErrUnanswered is returned (wrapped) when the DNS server never gave a usable
// answer for the whole wait.
var ErrUnanswered = errors.New("DNS never answered")

// ErrRefused is returned (wrapped) at once when Consul's ACLs refused the
// token a query: waiting longer cannot change that.
var ErrRefused = errors.New("refused by Consul's ACLs")

// Blocker polls Consul DNS until every requirement is met.
type Blocker struct {
	cfg      Config
	resolver *Resolver
	health   Health
	log      *slog.Logger
	progress io.Writer
	dialer   net.Dialer
}

// New returns a Blocker for a valid cfg. health is needed only with
// PassingOnly; log gets one line per change in DNS reachability; progress
// (may be nil) gets one line each time a count changes.
func New(cfg Config, health Health, log *slog.Logger, progress io.Writer) (*Blocker, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if cfg.PassingOnly && health == nil {
		return nil, errors.New("passing-only needs a Consul health source")
	}
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	if progress == nil {
		progress = io.Discard
	}
	return &Blocker{
		cfg:      cfg,
		resolver: &Resolver{Server: cfg.DNS, Timeout: cfg.QueryTimeout},
		health:   health,
		log:      log,
		progress: progress,
		dialer:   net.Dialer{Timeout: cfg.ConnectTimeout},
	}, nil
}

// Wait polls until every requirement is met (nil error), the timeout passes
// (ErrTimeout, or ErrUnanswered when DNS never answered for any service), or
// ctx ends (its error). The Result says where each service stood last.
func (b *Blocker) Wait(ctx context.Context) (Result, error) {
	start := time.Now()
	if b.cfg.Timeout > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, b.cfg.Timeout)
		defer cancel()
	}
	res := Result{Mode: b.cfg.Mode, Services: make([]Status, len(b.cfg.Requirements))}
	failing := make([]bool, len(b.cfg.Requirements)) // in a streak of errors, logged once
	for i, r := range b.cfg.Requirements {
		res.Services[i] = Status{Requirement: r, Found: -1}
	}
	interval := b.cfg.Interval
	for {
		changed := false
		res.Met = true
		for i := range res.Services {
			st := &res.Services[i]
			eps, err := b.check(ctx, st.Requirement)
			if errors.Is(err, ErrRefused) {
				st.LastError = err.Error()
				res.Met, res.Elapsed = false, time.Since(start)
				return res, err
			}
			if err != nil {
				if ctx.Err() != nil {
					if st.LastError == "" && !st.Answered {
						// The deadline cut the first query: still say why.
						st.LastError = err.Error()
					}
					break // the wait is over; keep the last good count
				}
				st.LastError = err.Error()
				if !failing[i] {
					b.log.Warn("query failed, retrying every poll", "service", st.Service, "err", err)
					failing[i] = true
				}
				if st.Found < 0 {
					st.Found = 0
				}
				st.Met = false
				res.Met = false
				continue
			}
			if failing[i] {
				b.log.Info("query answering again", "service", st.Service)
				failing[i] = false
			}
			st.Answered, st.LastError = true, ""
			if len(eps) != st.Found || !sameEndpoints(eps, st.Endpoints) {
				if len(eps) != st.Found {
					changed = true
					b.printProgress(st.Requirement, eps)
				}
				st.Endpoints, st.Found = eps, len(eps)
			}
			st.Met = st.Found >= st.Count
			res.Met = res.Met && st.Met
		}
		res.Elapsed = time.Since(start)
		if ctx.Err() == nil && res.Met {
			return res, nil
		}
		if changed {
			interval = b.cfg.Interval
		}
		pause := jitter(interval)
		select {
		case <-ctx.Done():
			res.Met = false
			res.Elapsed = time.Since(start)
			for i := range res.Services {
				res.Services[i].Found = max(res.Services[i].Found, 0)
			}
			return res, b.failure(ctx, res)
		case <-time.After(pause):
		}
		interval = min(interval*2, b.cfg.MaxInterval)
	}
}

// jitter shortens d by up to a tenth, so many blockers started together (a
// thousand nodes booted at once) drift apart instead of querying in step.
// It never lengthens d: a registration is still seen within one interval.
func jitter(d time.Duration) time.Duration {
	if d < 10 {
		return d
	}
	return d - rand.N(d/10)
}

// failure says why the wait ended without every requirement met.
func (b *Blocker) failure(ctx context.Context, res Result) error {
	if errors.Is(ctx.Err(), context.DeadlineExceeded) && b.cfg.Timeout > 0 {
		answered := false
		var lastErr string
		for _, st := range res.Services {
			answered = answered || st.Answered
			if st.LastError != "" {
				lastErr = st.LastError
			}
		}
		if !answered {
			return fmt.Errorf("%w: %s gave no usable answer in %s while waiting for %s (last error: %s)",
				ErrUnanswered, b.cfg.DNS, b.cfg.Timeout, names(res), lastErr)
		}
		return fmt.Errorf("%w: %s", ErrTimeout, shortList(res, b.cfg.Timeout))
	}
	return fmt.Errorf("interrupted (%w): %s", ctx.Err(), shortList(res, res.Elapsed.Round(time.Millisecond)))
}

// shortList names each service still short: "web: 5/6 after 3s".
func shortList(res Result, after time.Duration) string {
	var parts []string
	for _, st := range res.Services {
		if st.Met {
			continue
		}
		found := max(st.Found, 0)
		s := fmt.Sprintf("%s: %d/%d after %s", st.Service, found, st.Count, after)
		if !st.Answered {
			s += " (never answered)"
		} else if st.LastError != "" {
			s += " (last poll failed: " + st.LastError + ")"
		}
		parts = append(parts, s)
	}
	return strings.Join(parts, "; ")
}

// names lists the services not met as arguments: "web:2 db:1".
func names(res Result) string {
	var parts []string
	for _, st := range res.Services {
		if !st.Met {
			parts = append(parts, fmt.Sprintf("%s:%d", st.Service, st.Count))
		}
	}
	return strings.Join(parts, " ")
}

// check polls one requirement once and returns the endpoints that count.
func (b *Blocker) check(ctx context.Context, r Requirement) ([]Endpoint, error) {
	name := QueryName(r.Service, b.cfg.Tag, b.cfg.Datacenter, b.cfg.Domain)
	eps, err := b.resolver.LookupSRV(ctx, name)
	if err != nil {
		return nil, err
	}
	if b.cfg.PassingOnly && len(eps) > 0 {
		passing, err := b.health.Passing(ctx, r.Service, b.cfg.Tag, b.cfg.Datacenter)
		if err != nil {
			return nil, err
		}
		kept := eps[:0:0]
		for _, e := range eps {
			if passing[net.JoinHostPort(e.Address, strconv.Itoa(e.Port))] {
				kept = append(kept, e)
			}
		}
		eps = kept
	}
	if b.cfg.Mode == Functional && len(eps) > 0 {
		eps = b.reachable(ctx, eps)
	}
	return eps, nil
}

// reachable keeps the endpoints that accept a TCP connection within the
// connect timeout, trying them all at once.
func (b *Blocker) reachable(ctx context.Context, eps []Endpoint) []Endpoint {
	ok := make([]bool, len(eps))
	var wg sync.WaitGroup
	for i, e := range eps {
		if e.Address == "" {
			continue
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			conn, err := b.dialer.DialContext(ctx, "tcp", net.JoinHostPort(e.Address, strconv.Itoa(e.Port)))
			if err != nil {
				b.log.Debug("endpoint not accepting connections", "endpoint", e.String(), "err", err)
				return
			}
			conn.Close()
			ok[i] = true
		}()
	}
	wg.Wait()
	var kept []Endpoint
	for i, e := range eps {
		if ok[i] {
			kept = append(kept, e)
		}
	}
	return kept
}

// maxProgressEndpoints caps the endpoints named on one progress line, so a
// service with hundreds of instances stays one readable line.
const maxProgressEndpoints = 8

func (b *Blocker) printProgress(r Requirement, eps []Endpoint) {
	line := fmt.Sprintf("%s: %d/%d %s", r.Service, len(eps), r.Count, b.cfg.Mode)
	if len(eps) > 0 {
		names := make([]string, 0, min(len(eps), maxProgressEndpoints))
		for _, e := range eps[:min(len(eps), maxProgressEndpoints)] {
			names = append(names, e.String())
		}
		more := ""
		if len(eps) > maxProgressEndpoints {
			more = fmt.Sprintf(" and %d more", len(eps)-maxProgressEndpoints)
		}
		line += " (" + strings.Join(names, ", ") + more + ")"
	}
	fmt.Fprintln(b.progress, line)
}

func sameEndpoints(a, b []Endpoint) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}
