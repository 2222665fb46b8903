package blocker

import (
	"context"
	"errors"
	"fmt"
	"net"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/hashicorp/consul/api"
)

// DefaultWatchWait is the wait of each blocking query, so a blocker on an
// unchanging catalog makes one HTTP request every five minutes. It is
// Consul's own default wait and half its maximum (10 minutes); the agent
// adds up to a sixteenth at random.
const DefaultWatchWait = 5 * time.Minute

// watchRetryMax bounds the pause between attempts to restart a watch that
// failed for a reason that can pass: the connection refused while the agent
// restarts, 429 when the agent's per-client connection limit
// (limits.http_max_conns_per_client, 200) is taken, a 5xx while the servers
// elect a leader. DNS polling carries the wait meanwhile, so a long pause
// costs only latency; 30 s keeps hundreds of refused blockers from becoming
// a load of their own (at most two refused requests a minute each).
const watchRetryMax = 30 * time.Second

// requestSlack is how much longer than its wait (plus Consul's jitter of a
// sixteenth) a blocking query may take before it is abandoned as lost.
const requestSlack = 15 * time.Second

// watchState is where a watcher stands.
type watchState int

const (
	// watchStarting: its first query has not been answered yet.
	watchStarting watchState = iota
	// watchOK: it follows the index; the blocker sleeps until it moves.
	watchOK
	// watchRetrying: the API failed for a reason that can pass (refused,
	// overloaded, no leader); asked again with backoff up to watchRetryMax.
	watchRetrying
	// watchDenied: the API failed for good (ACL-denied, not Consul); the
	// blocker polls DNS for the rest of the wait.
	watchDenied
)

// health is one answer of /v1/health/service/<name>, reduced to what the
// blocker needs.
type health struct {
	// passing holds every address:port by which Consul DNS may name an
	// instance whose checks all pass: its service address (else its
	// node's), and the tagged addresses of the service and the node (DNS
	// answers with a WAN address across datacenters when the agent sets
	// translate_wan_addrs).
	passing map[string]bool
	// nPassing is how many instances pass all their checks. Consul DNS
	// returns at least these (and warning ones unless only_passing is
	// set), so a DNS answer with fewer is behind the watch.
	nPassing int
	// nAddressable is how many are passing or warning: DNS returns no
	// more than these, so a DNS answer with more is ahead of the watch, or
	// the watch is blind (see errBlind).
	nAddressable int
	// fingerprint is what DNS could answer from this state: address,
	// port, aggregate status and tagged addresses of every instance. An
	// index that moves without it changing (a check's output, a
	// re-registration of the same thing) asks DNS nothing.
	fingerprint string
}

// errFilteredByACLs: the agent left instances out of the answer because
// the token may not read them. Consul answers a blocking query from such a
// token with nothing, and never wakes it.
var errFilteredByACLs = errors.New("the agent filtered the answer by ACL: the token needs service:read on the service and node:read on its nodes")

// errDisagree: Consul DNS returns instances the HTTP API, asked
// consistently, does not know: they are not the same Consul.
var errDisagree = errors.New("DNS returns instances the Consul HTTP API, asked consistently, does not know: do --dns and --consul-addr reach the same Consul?")

// healthError is a failed health query to the Consul HTTP API.
type healthError struct {
	// Service names the requirement asked about ("web", "web@dc2").
	Service string
	Err     error
}

// Error is "passing instances of SERVICE: ERR", with a body the server
// sent cut to a readable length.
func (e *healthError) Error() string {
	return fmt.Sprintf("passing instances of %s: %s", e.Service, shorten(e.Err.Error(), 300))
}

// Unwrap returns the underlying error.
func (e *healthError) Unwrap() error { return e.Err }

// shorten cuts s to at most n bytes, marking the cut: an HTTP server that
// is not Consul may answer a page of HTML.
func shorten(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "..."
}

// fetchHealth asks the agent for every instance of service (with tag, in
// dc) and its health. With index > 0 it is a blocking query: the agent
// answers when the index moves past index, or after wait.
//
// Watching and polling read from any server (stale); the check of a watch
// that may be blind reads from the leader, which no DNS answer is ahead of.
func fetchHealth(ctx context.Context, c *api.Client, r Requirement, tag, dc string, index uint64, wait time.Duration, stale bool) (health, uint64, error) {
	q := &api.QueryOptions{Datacenter: dc, AllowStale: stale}
	if index > 0 {
		q.WaitIndex, q.WaitTime = index, wait
	}
	q = q.WithContext(ctx)
	entries, meta, err := c.Health().Service(r.Service, tag, false, q)
	if err != nil {
		return health{}, 0, &healthError{Service: r.Name(), Err: err}
	}
	if meta.ResultsFilteredByACLs {
		return health{}, 0, &healthError{Service: r.Name(), Err: errFilteredByACLs}
	}
	return summarize(entries), meta.LastIndex, nil
}

// summarize reduces a health answer to what the blocker compares.
func summarize(entries []*api.ServiceEntry) health {
	h := health{passing: map[string]bool{}}
	var prints []string
	for _, e := range entries {
		if e.Service == nil {
			continue
		}
		port := e.Service.Port
		addr := e.Service.Address
		nodeName, nodeAddr := "", ""
		var nodeTagged map[string]string
		if e.Node != nil {
			nodeName, nodeAddr, nodeTagged = e.Node.Node, e.Node.Address, e.Node.TaggedAddresses
		}
		if addr == "" {
			addr = nodeAddr
		}
		status := e.Checks.AggregatedStatus()
		names := []string{net.JoinHostPort(addr, strconv.Itoa(port))}
		for _, ta := range e.Service.TaggedAddresses {
			if ta.Address != "" {
				names = append(names, net.JoinHostPort(ta.Address, strconv.Itoa(ta.Port)))
			}
		}
		if e.Service.Address == "" {
			for _, a := range nodeTagged {
				if a != "" {
					names = append(names, net.JoinHostPort(a, strconv.Itoa(port)))
				}
			}
		}
		slices.Sort(names)
		names = slices.Compact(names)
		if status == api.HealthPassing || status == api.HealthWarning {
			h.nAddressable++
		}
		if status == api.HealthPassing {
			h.nPassing++
			for _, n := range names {
				h.passing[n] = true
			}
		}
		prints = append(prints, strings.Join([]string{nodeName, e.Service.ID, status, strings.Join(names, ",")}, "|"))
	}
	slices.Sort(prints)
	h.fingerprint = strings.Join(prints, "\n")
	return h
}

// aclRefused says whether a health query failed because of the token: a
// 403, or an answer the agent filtered by ACL.
func aclRefused(err error) bool {
	if errors.Is(err, errFilteredByACLs) {
		return true
	}
	var se api.StatusError
	return errors.As(err, &se) && (se.Code == 401 || se.Code == 403)
}

// permanent says whether a failed watch should not be tried again in this
// wait: the token is denied (403) or sees only part of the service, or the
// address does not serve Consul's API (400, 404, 405).
func permanent(err error) bool {
	if aclRefused(err) {
		return true
	}
	var se api.StatusError
	if errors.As(err, &se) {
		switch se.Code {
		case 400, 404, 405:
			return true
		}
	}
	return false
}

// watcher holds one blocking query on /v1/health/service/<name> for one
// requirement and bumps its generation whenever the answer changes in a way
// DNS could show, or the watch starts or stops working.
type watcher struct {
	client  *api.Client
	req     Requirement
	tag, dc string
	wait    time.Duration
	// first bounds the non-blocking queries (the first one, and those
	// after a failure), so a hung API falls back to polling promptly.
	first time.Duration
	// retry is the first pause before retrying a failed watch; it doubles
	// up to watchRetryMax.
	retry time.Duration
	// notify wakes the blocker's loop; it never blocks.
	notify func()
	// startedCh is closed once the first query is answered or failed.
	startedCh chan struct{}
	// stop ends runWatch (set by the blocker before it starts it).
	stop context.CancelFunc

	// mu guards the fields below.
	mu    sync.Mutex
	state watchState
	err   error
	index uint64
	snap  health
	gen   uint64
}

// view is a consistent copy of a watcher's state.
type view struct {
	state watchState
	err   error
	snap  health
	gen   uint64
}

func (w *watcher) view() view {
	w.mu.Lock()
	defer w.mu.Unlock()
	return view{state: w.state, err: w.err, snap: w.snap, gen: w.gen}
}

// runWatch follows the index until ctx ends or the API fails for good.
func (w *watcher) runWatch(ctx context.Context) {
	pause := w.retry
	started := false
	for ctx.Err() == nil {
		w.mu.Lock()
		index := w.index
		if w.state != watchOK {
			index = 0 // after a failure, a fresh answer at once
		}
		w.mu.Unlock()
		limit := w.first
		if index > 0 {
			limit = w.wait + w.wait/16 + requestSlack
		}
		rctx, cancel := context.WithTimeout(ctx, limit)
		snap, newIndex, err := fetchHealth(rctx, w.client, w.req, w.tag, w.dc, index, w.wait, true)
		cancel()
		if ctx.Err() != nil {
			return
		}
		if err != nil {
			perm := permanent(err)
			w.failed(err, perm)
			if !started {
				started = true
				close(w.startedCh)
			}
			if perm {
				return
			}
			select {
			case <-ctx.Done():
				return
			case <-time.After(jitter(pause)):
			}
			pause = min(pause*2, watchRetryMax)
			continue
		}
		pause = w.retry
		w.answered(snap, newIndex)
		if !started {
			started = true
			close(w.startedCh)
		}
	}
}

// answered records a successful answer.
func (w *watcher) answered(snap health, index uint64) {
	// Consul's advice for blocking queries: an index below 1 would make
	// the next query return at once, for ever; one that went backwards
	// (a restored snapshot, another server) is taken as it is.
	index = max(index, 1)
	w.mu.Lock()
	if w.state == watchDenied { // by the blocker, while this query ran
		w.mu.Unlock()
		return
	}
	changed := w.state != watchOK || snap.fingerprint != w.snap.fingerprint
	w.state, w.err, w.index, w.snap = watchOK, nil, index, snap
	if changed {
		w.gen++
	}
	w.mu.Unlock()
	if changed {
		w.notify()
	}
}

// failed records a failed query.
func (w *watcher) failed(err error, perm bool) {
	state := watchRetrying
	if perm {
		state = watchDenied
	}
	w.mu.Lock()
	if w.state == watchDenied {
		w.mu.Unlock()
		return
	}
	changed := w.state != state
	w.state, w.err = state, err
	if changed {
		w.gen++
	}
	w.mu.Unlock()
	if changed {
		w.notify()
	}
}

// deny ends the watch for the rest of the wait: the blocker found it blind.
func (w *watcher) deny(err error) {
	w.failed(err, true)
	w.stop()
}
