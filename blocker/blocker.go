package blocker

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"net"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/hashicorp/consul/api"
)

// Mode says when an endpoint counts.
type Mode string

// The two modes. Addressable: Consul DNS returns the endpoint (its checks
// are passing or warning). Functional, the one meaning of the word across
// orchestrate: every check of the instance passes (Consul's HTTP API) and,
// here where a TCP test is possible, it accepts a TCP connection on its SRV
// port. hiera-services' functional count is the same without the TCP test.
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

// dnsLagRetry is the first pause before asking DNS again when it answered
// fewer instances than the watch saw passing: a DNS read served by a server
// a few milliseconds behind the one the watch heard from. It doubles up to
// the max interval.
const dnsLagRetry = 25 * time.Millisecond

// disagreeGrace is how long DNS may keep returning instances a consistent
// health query does not know before the watch is taken for blind and
// given up. A deregistration racing the two queries, or a DNS server a
// moment behind, agrees again within milliseconds; a token that cannot
// read the service, or DNS and HTTP API of two different Consuls, never
// do. Until then DNS, the judge, is asked at the lag retry, so nothing is
// missed meanwhile.
const disagreeGrace = 2 * time.Second

// Config is what a Blocker waits for and how.
type Config struct {
	// DNS is the server's host:port; Domain is fully qualified ("consul.").
	DNS    string
	Domain string
	// Datacenter is the datacenter of every requirement that names none;
	// empty means the agent's. Tag narrows every query; empty means any.
	Datacenter string
	Tag        string
	// Mode is Addressable or Functional.
	Mode Mode
	// ConnectTimeout bounds each TCP connection attempt in Functional mode.
	ConnectTimeout time.Duration
	// PassingOnly counts, in Addressable mode too, only instances whose
	// checks all pass (Consul DNS also returns instances in warning).
	// Functional mode always does.
	PassingOnly bool
	// Watch holds one blocking query per requirement on the Consul HTTP
	// API (/v1/health/service/<name>) and asks DNS again the moment its
	// answer changes, polling DNS only every MaxInterval meanwhile. Without
	// it, or while the API refuses or denies, DNS is polled with backoff.
	Watch bool
	// WatchWait is the wait of each blocking query; 0 means
	// DefaultWatchWait.
	WatchWait time.Duration
	// Timeout is how long to wait in all; 0 waits for ever.
	Timeout time.Duration
	// Interval is the first pause between polls; it doubles after every poll
	// that changes nothing, up to MaxInterval, and starts over when a count
	// changes. While watching, it paces only TCP probes and retries.
	Interval, MaxInterval time.Duration
	// QueryTimeout bounds one DNS exchange, and each non-blocking health
	// query; zero means DefaultQueryTimeout.
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
	case c.WatchWait < 0:
		return fmt.Errorf("watch wait %s: must be 0 (the default) or positive", c.WatchWait)
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
		if r.Datacenter != "" {
			if err := validLabel("datacenter", r.Datacenter); err != nil {
				return err
			}
		}
		if r.Count < 1 {
			return fmt.Errorf("%s: count %d is below 1", r.Name(), r.Count)
		}
		if seen[r.Name()] {
			return fmt.Errorf("service %s given twice", r.Name())
		}
		seen[r.Name()] = true
	}
	return nil
}

// needsHealth says whether an endpoint counts only when its checks pass.
func (c Config) needsHealth() bool { return c.PassingOnly || c.Mode == Functional }

// Status is where one requirement stands after a poll.
type Status struct {
	Requirement
	// Endpoints are those that count in the configured mode.
	Endpoints []Endpoint `json:"endpoints"`
	// Found is len(Endpoints).
	Found int `json:"found"`
	// Met says Found >= Count.
	Met bool `json:"met"`
	// Answered says a poll for this service ever completed (DNS answered,
	// and the HTTP API too where health counts).
	Answered bool `json:"answered"`
	// LastError is the most recent failure of a poll, if the last one
	// failed; "" when it did not.
	LastError string `json:"last_error"`
}

// Result is the outcome of Wait, one Status per requirement in the order
// given.
type Result struct {
	Mode     Mode          `json:"mode"`
	Met      bool          `json:"met"`
	Elapsed  time.Duration `json:"-"`
	Services []Status      `json:"services"`
}

// stable is r in the JSON shape docs/json.md documents: a service with
// no endpoint has "endpoints": [], never null, and no service is
// "services": [].
func (r Result) stable() Result {
	services := make([]Status, 0, len(r.Services))
	for _, st := range r.Services {
		if st.Endpoints == nil {
			st.Endpoints = []Endpoint{}
		}
		services = append(services, st)
	}
	r.Services = services
	return r
}

// ErrTimeout is returned (wrapped, naming what is short) when the timeout
// passed with DNS answering but too few endpoints.
var ErrTimeout = errors.New("timed out")

// ErrUnanswered is returned (wrapped) when the DNS server never gave a usable
// answer for the whole wait.
var ErrUnanswered = errors.New("DNS never answered")

// ErrHealthUnanswered is returned (wrapped) when DNS answered but the Consul
// HTTP API never told which instances pass, for the whole wait, where that
// counts (functional mode, --passing-only).
var ErrHealthUnanswered = errors.New("the Consul HTTP API never answered")

// ErrRefused is returned (wrapped) at once when Consul's ACLs refused the
// token the health query that passing-only or functional mode needs:
// waiting longer cannot change that. (A refused watch in addressable mode
// only ends the wake-up: DNS is polled instead.)
var ErrRefused = errors.New("refused by Consul's ACLs")

// Blocker waits until every requirement is met, waking on Consul's change
// notification and asking Consul DNS.
type Blocker struct {
	cfg      Config
	resolver *Resolver
	consul   *api.Client
	log      *slog.Logger
	progress io.Writer
	dialer   net.Dialer
}

// New returns a Blocker for a valid cfg. consul is the agent's HTTP API,
// needed to watch (cfg.Watch) and to tell passing instances (functional
// mode, PassingOnly); log gets one line per change in DNS reachability and
// in watching; progress (may be nil) gets one line each time a count
// changes.
func New(cfg Config, consul *api.Client, log *slog.Logger, progress io.Writer) (*Blocker, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if consul == nil && cfg.needsHealth() {
		return nil, fmt.Errorf("%s needs the Consul HTTP API for passing health", whyHealth(cfg))
	}
	if consul == nil && cfg.Watch {
		return nil, errors.New("watching needs the Consul HTTP API")
	}
	if cfg.WatchWait == 0 {
		cfg.WatchWait = DefaultWatchWait
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
		consul:   consul,
		log:      log,
		progress: progress,
		dialer:   net.Dialer{Timeout: cfg.ConnectTimeout},
	}, nil
}

func whyHealth(cfg Config) string {
	if cfg.Mode == Functional {
		return "functional mode"
	}
	return "passing-only"
}

// queryTimeout is the bound of one DNS exchange or non-blocking health
// query.
func (b *Blocker) queryTimeout() time.Duration {
	if b.cfg.QueryTimeout > 0 {
		return b.cfg.QueryTimeout
	}
	return DefaultQueryTimeout
}

// req is one requirement while Wait runs: its status, its watcher and when
// it is next asked.
type req struct {
	Requirement
	st    *Status
	qname string // the DNS name
	dc    string // the datacenter asked, "" for the agent's
	w     *watcher

	polled      bool
	seenGen     uint64    // the watcher's generation at the last poll
	next        time.Time // when it is asked next without a change
	probe       bool      // next is a TCP probe of candidates, not DNS
	lastDNS     time.Time
	backoff     time.Duration
	lagBackoff  time.Duration
	candidates  []Endpoint // functional: passed DNS and health, before TCP
	failing     bool       // in a streak of failed polls, logged once
	disagreed   time.Time  // since when DNS is ahead of a consistent health query
	dnsAnswered bool       // DNS ever answered, whatever health did
	healthAsked bool       // the health query, where it counts, answered once
	refused     error      // health, which counts, refused by ACL: the wait ends
}

// watching says whether the requirement's watcher follows the index now.
func (r *req) watching() bool {
	return r.w != nil && r.w.view().state == watchOK
}

// Wait waits until every requirement is met (nil error), the timeout passes
// (ErrTimeout; ErrUnanswered when DNS never answered for any service,
// ErrHealthUnanswered when health counts and the HTTP API never answered;
// ErrRefused at once when health counts and the token may not read it),
// or ctx ends (its error). The Result says where each service stood last.
//
// Each requirement is asked once at the start. Then, while its watch
// works, again the moment Consul's answer for it changes, every
// MaxInterval in case a change was missed, at Interval (doubling) while
// DNS lags behind the watch, and (functional mode) its endpoints are probed
// over TCP at Interval (doubling) while enough pass but too few accept. A
// requirement whose watch does not work is polled as without one: at
// Interval, doubling to MaxInterval while nothing changes.
func (b *Blocker) Wait(ctx context.Context) (Result, error) {
	start := time.Now()
	if b.cfg.Timeout > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, b.cfg.Timeout)
		defer cancel()
	}
	res := Result{Mode: b.cfg.Mode, Services: make([]Status, len(b.cfg.Requirements))}
	changeCh := make(chan struct{}, 1)
	notify := func() {
		select {
		case changeCh <- struct{}{}:
		default:
		}
	}
	reqs := b.newReqs(res.Services, notify)

	// The watchers live exactly as long as this call.
	watchCtx, stopWatching := context.WithCancel(ctx)
	var wg sync.WaitGroup
	defer func() {
		stopWatching()
		wg.Wait()
	}()
	b.startWatches(ctx, watchCtx, &wg, reqs)

	var announced bool // a watch failure was logged in this episode
	for {
		now := time.Now()
		for _, rq := range reqs {
			due, probeOnly, woke := b.due(rq, now)
			if !due {
				continue
			}
			if !b.ask(ctx, rq, probeOnly, woke) {
				break // the wait is over
			}
		}
		if err := refusal(reqs); err != nil {
			endUnmet(&res, start)
			return res, err
		}
		res.Met = true
		for _, rq := range reqs {
			res.Met = res.Met && rq.st.Met
		}
		res.Elapsed = time.Since(start)
		if ctx.Err() == nil && res.Met {
			return res, nil
		}
		// Said only when it matters: a blocker met at once says nothing.
		announced = b.noteWatch(reqs, announced)
		if ctx.Err() == nil {
			sleepUntil(ctx, changeCh, nextDue(reqs))
		}
		if ctx.Err() != nil {
			endUnmet(&res, start)
			return res, b.failure(ctx, res, reqs)
		}
	}
}

// newReqs makes one req per requirement, each pointing at its Status in
// services (whose counts start unknown, -1): the datacenter it asks (its
// own, else the configured one), its DNS name, and, when watching, its
// watcher, which calls notify on every change.
func (b *Blocker) newReqs(services []Status, notify func()) []*req {
	reqs := make([]*req, len(b.cfg.Requirements))
	for i, r := range b.cfg.Requirements {
		services[i] = Status{Requirement: r, Found: -1}
		rq := &req{Requirement: r, st: &services[i], dc: r.Datacenter, backoff: b.cfg.Interval, lagBackoff: dnsLagRetry}
		if rq.dc == "" {
			rq.dc = b.cfg.Datacenter
		}
		rq.qname = QueryName(r.Service, b.cfg.Tag, rq.dc, b.cfg.Domain)
		if b.cfg.Watch {
			rq.w = &watcher{client: b.consul, req: r, tag: b.cfg.Tag, dc: rq.dc, wait: b.cfg.WatchWait,
				first: b.queryTimeout(), retry: b.cfg.Interval, notify: notify, startedCh: make(chan struct{})}
		}
		reqs[i] = rq
	}
	return reqs
}

// startWatches starts each requirement's watcher under watchCtx, counted
// in wg, and decides when the first poll may run: at once, unless health
// counts, then once every watch gave its first answer (each bounded by
// QueryTimeout) or ctx ended. Without watching it only says that DNS is
// polled instead.
func (b *Blocker) startWatches(ctx, watchCtx context.Context, wg *sync.WaitGroup, reqs []*req) {
	if !b.cfg.Watch {
		b.log.Info("not watching Consul for changes (--no-watch): polling DNS",
			"interval", b.cfg.Interval, "max_interval", b.cfg.MaxInterval)
		return
	}
	for _, rq := range reqs {
		wctx, stop := context.WithCancel(watchCtx)
		rq.w.stop = stop
		wg.Go(func() {
			defer stop()
			rq.w.runWatch(wctx)
		})
	}
	if b.cfg.needsHealth() {
		// The first poll needs to know which instances pass: wait
		// for each watch's first answer (bounded by QueryTimeout).
		for _, rq := range reqs {
			select {
			case <-rq.w.startedCh:
			case <-ctx.Done():
			}
		}
	}
}

// refusal is the ACL refusal that ends the wait at once (health counts
// and the token may not read it), of the first requirement refused, or
// nil.
func refusal(reqs []*req) error {
	for _, rq := range reqs {
		if rq.refused != nil {
			return rq.refused
		}
	}
	return nil
}

// endUnmet records in res a wait that ended with a requirement not met:
// its elapsed time, and no count left unknown (-1 becomes 0).
func endUnmet(res *Result, start time.Time) {
	res.Met = false
	res.Elapsed = time.Since(start)
	for i := range res.Services {
		res.Services[i].Found = max(res.Services[i].Found, 0)
	}
}

// nextDue is the earliest time a requirement is next asked without a
// change.
func nextDue(reqs []*req) time.Time {
	next := reqs[0].next
	for _, rq := range reqs[1:] {
		if rq.next.Before(next) {
			next = rq.next
		}
	}
	return next
}

// sleepUntil waits until next, a watch's change (changeCh) or the end of
// ctx, whichever comes first.
func sleepUntil(ctx context.Context, changeCh <-chan struct{}, next time.Time) {
	timer := time.NewTimer(time.Until(next))
	defer timer.Stop()
	select {
	case <-ctx.Done():
	case <-changeCh:
	case <-timer.C:
	}
}

// due says whether rq is to be asked now; probeOnly when only a TCP probe
// of its last candidates is due; woke when its watch saw a change.
func (b *Blocker) due(rq *req, now time.Time) (due, probeOnly, woke bool) {
	if !rq.polled {
		return true, false, false
	}
	if rq.w != nil && rq.w.view().gen != rq.seenGen {
		return true, false, true
	}
	if now.Before(rq.next) {
		return false, false, false
	}
	return true, rq.probe && now.Before(rq.lastDNS.Add(b.cfg.MaxInterval)), false
}

// ask polls (or probes) one requirement, updates its status and schedules
// its next poll. It returns false when ctx ended during the poll.
func (b *Blocker) ask(ctx context.Context, rq *req, probeOnly, woke bool) bool {
	st := rq.st
	var gen uint64
	if rq.w != nil {
		gen = rq.w.view().gen
	}
	var a answer
	var err error
	if probeOnly {
		a = answer{candidates: rq.candidates, endpoints: b.reachable(ctx, rq.candidates)}
	} else {
		a, err = b.check(ctx, rq)
		rq.lastDNS = time.Now()
		rq.seenGen = gen
	}
	rq.polled = true
	if errors.Is(err, ErrRefused) {
		st.LastError, st.Met = err.Error(), false
		rq.refused = err
		return false
	}
	if err != nil {
		if ctx.Err() != nil {
			if st.LastError == "" && !st.Answered {
				// The deadline cut the first query: still say why.
				st.LastError = err.Error()
			}
			return false // the wait is over; keep the last good count
		}
		st.LastError = err.Error()
		if !rq.failing {
			b.log.Warn("query failed, retrying every poll", "service", rq.Name(), "err", err)
			rq.failing = true
		}
		st.Found = max(st.Found, 0)
		st.Met = false
		b.schedule(rq, a, true, false, woke)
		return true
	}
	if rq.failing {
		b.log.Info("query answering again", "service", rq.Name())
		rq.failing = false
	}
	st.Answered, st.LastError = true, ""
	eps := a.endpoints
	changed := false
	if len(eps) != st.Found || !sameEndpoints(eps, st.Endpoints) {
		if len(eps) != st.Found {
			changed = true
			b.printProgress(rq.Requirement, eps)
		}
		st.Endpoints, st.Found = eps, len(eps)
	}
	if !probeOnly {
		rq.candidates = a.candidates
	}
	st.Met = st.Found >= st.Count
	b.schedule(rq, a, false, changed, woke)
	return true
}

// schedule sets when rq is asked next, after a poll that failed, changed
// its count, or was woken by its watch.
func (b *Blocker) schedule(rq *req, a answer, failed, changed, woke bool) {
	now := time.Now()
	if changed || woke {
		rq.backoff = b.cfg.Interval
	}
	backoff := func() time.Time {
		t := now.Add(jitter(rq.backoff))
		rq.backoff = min(rq.backoff*2, b.cfg.MaxInterval)
		return t
	}
	rq.probe = false
	if !a.dnsBehind && !a.disagree {
		rq.lagBackoff = dnsLagRetry
	}
	switch {
	case failed || !rq.watching():
		rq.next = backoff()
	case a.dnsBehind || a.disagree:
		rq.next = now.Add(rq.lagBackoff)
		rq.lagBackoff = min(rq.lagBackoff*2, b.cfg.MaxInterval)
	case b.cfg.Mode == Functional && len(a.candidates) >= rq.Count && len(a.endpoints) < rq.Count:
		// Enough instances pass but too few accept TCP yet: a listening
		// socket gives no Consul event, so probe at the polling interval.
		rq.next, rq.probe = backoff(), true
	default:
		rq.next = rq.lastDNS.Add(jitter(b.cfg.MaxInterval))
	}
}

// noteWatch logs, once per episode, that a watch does not work and DNS is
// polled instead, and when every watch works again. It returns whether a
// failure is announced.
func (b *Blocker) noteWatch(reqs []*req, announced bool) bool {
	if !b.cfg.Watch {
		return false
	}
	allOK := true
	for _, rq := range reqs {
		v := rq.w.view()
		switch v.state {
		case watchOK:
			continue
		case watchStarting:
			allOK = false
			continue
		}
		allOK = false
		if announced {
			continue
		}
		args := []any{"service", rq.Name(), "err", v.err}
		if v.state == watchDenied {
			args = append(args, "retry", "not in this wait")
		} else {
			args = append(args, "retry", fmt.Sprintf("with backoff up to %s", watchRetryMax))
		}
		b.log.Warn("cannot watch Consul for changes, polling DNS instead", args...)
		announced = true
	}
	if allOK && announced {
		b.log.Info("watching Consul for changes again")
		announced = false
	}
	return announced
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
func (b *Blocker) failure(ctx context.Context, res Result, reqs []*req) error {
	if errors.Is(ctx.Err(), context.DeadlineExceeded) && b.cfg.Timeout > 0 {
		answered, dnsAnswered := false, false
		var lastErr string
		for i, st := range res.Services {
			answered = answered || st.Answered
			dnsAnswered = dnsAnswered || reqs[i].dnsAnswered
			if st.LastError != "" {
				lastErr = st.LastError
			}
		}
		switch {
		case !answered && dnsAnswered:
			return fmt.Errorf("%w: no answer about passing health in %s while waiting for %s, which %s needs (last error: %s)",
				ErrHealthUnanswered, b.cfg.Timeout, names(res), whyHealth(b.cfg), lastErr)
		case !answered:
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
		s := fmt.Sprintf("%s: %d/%d after %s", st.Name(), found, st.Count, after)
		if !st.Answered {
			s += " (never answered)"
		} else if st.LastError != "" {
			s += " (last poll failed: " + st.LastError + ")"
		}
		parts = append(parts, s)
	}
	return strings.Join(parts, "; ")
}

// names lists the services not met as arguments: "web:2 db@dc2:1".
func names(res Result) string {
	var parts []string
	for _, st := range res.Services {
		if !st.Met {
			parts = append(parts, fmt.Sprintf("%s:%d", st.Name(), st.Count))
		}
	}
	return strings.Join(parts, " ")
}

// answer is what one poll of a requirement found.
type answer struct {
	// endpoints count in the configured mode.
	endpoints []Endpoint
	// candidates (functional mode) passed DNS and health, before TCP.
	candidates []Endpoint
	// dnsBehind: DNS returned fewer instances than the watch saw passing.
	dnsBehind bool
	// disagree: DNS returned more instances than a consistent health
	// query, once; asked again shortly before the watch is given up.
	disagree bool
}

// check asks DNS for one requirement, keeps the instances that pass where
// health counts (from the watch's latest answer, else from a query of its
// own) and, in functional mode, those that accept TCP.
func (b *Blocker) check(ctx context.Context, rq *req) (answer, error) {
	eps, err := b.resolver.LookupSRV(ctx, rq.qname)
	if err != nil {
		return answer{}, err
	}
	rq.dnsAnswered = true
	var a answer
	var h health
	known := false
	if rq.w != nil {
		if v := rq.w.view(); v.state == watchOK {
			h, known = v.snap, true
			a.dnsBehind = len(eps) < h.nPassing
			if len(eps) > h.nAddressable {
				h, known, a.disagree = b.checkWatch(ctx, rq, len(eps), h)
			} else {
				rq.disagreed = time.Time{}
			}
		}
	}
	// Health is asked even while DNS returns nothing, until it answered
	// once: a token Consul does not know (or denies) is known at once, not
	// after the whole wait.
	if b.cfg.needsHealth() && (len(eps) > 0 || !rq.healthAsked) {
		if !known {
			h, err = b.healthNow(ctx, rq, true)
			if aclRefused(err) {
				return answer{}, fmt.Errorf("%w: %w", ErrRefused, err)
			}
			if err != nil {
				return answer{}, err
			}
		}
		rq.healthAsked = true
		kept := eps[:0:0]
		for _, e := range eps {
			if h.passing[net.JoinHostPort(e.Address, strconv.Itoa(e.Port))] {
				kept = append(kept, e)
			}
		}
		eps = kept
	}
	if b.cfg.Mode == Functional && len(eps) > 0 {
		a.candidates = eps
		eps = b.reachable(ctx, eps)
	}
	a.endpoints = eps
	return a, nil
}

// healthNow asks for rq's health once, without blocking.
func (b *Blocker) healthNow(ctx context.Context, rq *req, stale bool) (health, error) {
	qctx, cancel := context.WithTimeout(ctx, b.queryTimeout())
	defer cancel()
	h, _, err := fetchHealth(qctx, b.consul, rq.Requirement, b.cfg.Tag, rq.dc, 0, 0, stale)
	return h, err
}

// checkWatch runs when DNS returned more instances (n) than the watch's
// answer h holds. The watch may just be behind (it wakes in a moment), or
// blind: Consul answers a blocking query from a token that may not read the
// service with nothing, never waking it, and an agent other than the one
// DNS asks knows other instances. One consistent query tells: an answer
// filtered by ACL ends the watch (the blocker polls, and says why). One
// that also lacks the instances may have raced a deregistration or a check
// turning critical between the two queries, or come from a DNS server
// behind the agent: DNS is asked again shortly (disagree), and only a
// disagreement lasting disagreeGrace ends the watch. It returns the health
// to use for this poll, whether it is known, and whether DNS is to be
// asked again shortly.
func (b *Blocker) checkWatch(ctx context.Context, rq *req, n int, h health) (_ health, known, disagree bool) {
	fresh, err := b.healthNow(ctx, rq, false)
	switch {
	case err != nil && permanent(err):
		rq.w.deny(err)
		return health{}, false, false
	case err != nil:
		return h, true, false // the API failed for now: the watcher will say so
	case n > fresh.nAddressable && rq.disagreed.IsZero():
		rq.disagreed = time.Now()
		return fresh, true, true
	case n > fresh.nAddressable && time.Since(rq.disagreed) >= disagreeGrace:
		rq.disagreed = time.Time{}
		rq.w.deny(&healthError{Service: rq.Name(), Err: errDisagree})
		return health{}, false, false
	case n > fresh.nAddressable:
		return fresh, true, true
	}
	rq.disagreed = time.Time{}
	return fresh, true, false
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
	line := fmt.Sprintf("%s: %d/%d %s", r.Name(), len(eps), r.Count, b.cfg.Mode)
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
