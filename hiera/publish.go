package hiera

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"slices"
	"sync"
	"time"

	"github.com/hashicorp/consul/api"
	"github.com/hashicorp/go-cleanhttp"
	"github.com/spf13/pflag"

	"github.com/jiocloud/orchestrate/internal/consulclient"
	"github.com/jiocloud/orchestrate/internal/exitcode"
	"github.com/jiocloud/orchestrate/internal/store"
)

// The publisher's timings.
//
//   - Session TTL 10 s (Consul's least), lock delay 5 s: a publisher
//     that dies or hangs holds the lock until Consul ends its session,
//     between TTL and 2 x TTL (TestFeedHungPublisher); the nodes then see
//     the lock released and fall back to watching the catalog
//     themselves, reading everything they use once, so nothing is lost,
//     but a change made while it hung waits up to 20 s. Another
//     publisher takes over within 2 x TTL + lock delay + the api
//     package's 5 s lock retry (about 30 s).
//   - feedFailAfter 30 s: a publisher whose queries fail for this long
//     withdraws the ready record, so the nodes stop trusting a feed that
//     may be missing changes. A shorter failure only delays changes: every
//     blocking query resumes from its last index and misses nothing, and
//     withdrawing at every hiccup would make the whole fleet re-read the
//     catalog at once.
//   - feedRetention 24 h: a service's gone marker is kept this long, so a
//     node that follows the feed sees the service leave; a node started
//     later reads the catalog afresh anyway.
const (
	feedSessionTTL = 10 * time.Second
	feedLockDelay  = 5 * time.Second
	feedFailAfter  = 30 * time.Second
	feedRetention  = 24 * time.Hour
	// feedCheckEvery is how often the publisher looks at its queries'
	// failures and prunes gone markers.
	feedCheckEvery = 5 * time.Second
)

// errServicesHidden is the service list's failure when the token may not
// read every service.
var errServicesHidden = errors.New("services hidden by ACLs")

// noInstance is a filter no instance matches: a health query with it
// returns the service's index alone, an empty list.
const noInstance = `Service.ID == "" and Service.ID != ""`

// Publisher is hiera-services --publish: the datacenter's catalog change
// feed. Under the lock store.HieraFeedLeaderKey it holds one blocking
// query per service in the catalog (each returns the service's index
// alone) and records each change's index in store.HieraFeedDir, so that
// the nodes' hiera-services --watch read again only the service that
// changed. One blocking query per service needs the publisher's agent to
// accept that many connections from it: raise
// limits.http_max_conns_per_client on that agent (docs/hiera-services.md).
type Publisher struct {
	// Client reaches the publisher's agent; its transport should keep
	// many idle connections (NewPublisherClient).
	Client *api.Client
	Store  *store.Store
	// ID names this instance in the lock's value.
	ID  string
	Log *slog.Logger
	// FailAfter and Retention default to feedFailAfter and feedRetention.
	FailAfter, Retention time.Duration
}

// Run takes the lock and publishes while it holds it, waiting for it
// again when lost, until ctx ends.
func (p *Publisher) Run(ctx context.Context) error {
	if p.FailAfter <= 0 {
		p.FailAfter = feedFailAfter
	}
	if p.Retention <= 0 {
		p.Retention = feedRetention
	}
	backoff := retryBackoff
	for ctx.Err() == nil {
		err := p.holdLock(ctx)
		if ctx.Err() != nil {
			return nil
		}
		if err == nil {
			backoff = retryBackoff
			continue
		}
		p.Log.Warn("publisher lock", "err", err, "retry_in", backoff)
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(backoff):
		}
		backoff = min(2*backoff, retryMaxBackoff)
	}
	return nil
}

// holdLock makes a session, waits for the lock, publishes while it holds
// it, then releases it and destroys the session.
func (p *Publisher) holdLock(ctx context.Context) error {
	sessions := p.Client.Session()
	id, _, err := sessions.Create(&api.SessionEntry{
		Name: "hiera-services publisher " + p.ID, TTL: feedSessionTTL.String(),
		LockDelay: feedLockDelay, Behavior: api.SessionBehaviorRelease,
	}, (&api.WriteOptions{}).WithContext(ctx))
	if err != nil {
		return fmt.Errorf("create session: %w", err)
	}
	renewDone := make(chan struct{})
	renewEnded := make(chan struct{})
	go func() {
		defer close(renewEnded)
		_ = sessions.RenewPeriodic(feedSessionTTL.String(), id, (&api.WriteOptions{}).WithContext(ctx), renewDone)
	}()
	defer func() {
		close(renewDone)
		<-renewEnded
		cctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_, _ = sessions.Destroy(id, (&api.WriteOptions{}).WithContext(cctx))
	}()
	// The lock's value is the head: empty and not ready until this
	// publisher has heard from every service.
	lock, err := p.Client.LockOpts(&api.LockOptions{
		Key: store.HieraFeedLeaderKey(p.Store.Prefix()), Value: []byte(`{"ready": false}`), Session: id,
		MonitorRetries: 3, MonitorRetryTime: 2 * time.Second, LockWaitTime: 10 * time.Second,
	})
	if err != nil {
		return err
	}
	stopCh := make(chan struct{})
	go func() {
		select {
		case <-ctx.Done():
		case <-renewEnded:
		}
		close(stopCh)
	}()
	lostCh, err := lock.Lock(stopCh)
	if err != nil || lostCh == nil {
		return err
	}
	p.Log.Info("publishing the catalog change feed", "key", store.HieraFeedLeaderKey(p.Store.Prefix()))
	lctx, cancel := context.WithCancel(ctx)
	go func() {
		select {
		case <-lostCh:
		case <-lctx.Done():
		}
		cancel()
	}()
	err = p.publish(lctx, id)
	cancel()
	if ctx.Err() == nil {
		p.Log.Warn("stopped publishing the catalog change feed", "err", err)
	}
	_ = lock.Unlock()
	if errors.Is(err, store.ErrNotFeedLeader) || errors.Is(err, context.Canceled) {
		return nil
	}
	return err
}

// feedIndex is one service's index as its query returned it.
type feedIndex struct {
	name  string
	index uint64
}

// publication is one term's state: the watchers and what was written.
type publication struct {
	p       *Publisher
	session string
	idxCh   chan feedIndex
	// watchers holds each service's query, by name.
	watchers map[string]context.CancelFunc
	wg       sync.WaitGroup
	// written is the feed as stored; pending what to write next.
	written, pending map[string]store.FeedService
	// head is the head as last written (or to write); seq the last
	// entry's number.
	head store.FeedHead
	seq  uint64
	// unseen are services whose first index has not come yet: the feed
	// is not ready before every one has.
	unseen map[string]bool
	// tags holds each service's tags from the latest service list.
	tags  map[string][]string
	ready bool

	aclOnce sync.Once

	mu sync.Mutex
	// failing holds, per query ("" for the service list), when it began
	// to fail. Guarded by mu.
	failing map[string]time.Time
}

// publish runs one term: the list's query, a query per service, and the
// writes, until ctx ends or a write finds the lock lost.
func (p *Publisher) publish(ctx context.Context, session string) error {
	written, err := p.Store.FeedServices(ctx)
	if err != nil {
		return err
	}
	pub := &publication{p: p, session: session, idxCh: make(chan feedIndex, 256),
		watchers: map[string]context.CancelFunc{}, written: written,
		pending: map[string]store.FeedService{}, unseen: map[string]bool{}, tags: map[string][]string{}, failing: map[string]time.Time{}}
	defer pub.wg.Wait()
	wctx, cancel := context.WithCancel(ctx)
	defer cancel()
	listCh := make(chan listResult, 1)
	pub.wg.Add(1)
	go func() { defer pub.wg.Done(); pub.watchList(wctx, listCh) }()
	tick := time.NewTicker(feedCheckEvery)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case l := <-listCh:
			pub.reconcile(wctx, l)
		case fi := <-pub.idxCh:
			pub.note(fi)
		drain:
			for {
				select {
				case fi := <-pub.idxCh:
					pub.note(fi)
				default:
					break drain
				}
			}
		case <-tick.C:
			if err := pub.check(ctx); err != nil {
				return err
			}
			continue
		}
		if err := pub.flush(ctx); err != nil {
			return err
		}
	}
}

// listResult is one answer of the service list's query: each service's
// tags, sorted.
type listResult struct {
	names map[string][]string
	index uint64
}

// watchList follows the catalog's service list.
func (pub *publication) watchList(ctx context.Context, out chan<- listResult) {
	pub.block(ctx, "", func(o *api.QueryOptions) (uint64, error) {
		svcs, meta, err := pub.p.Client.Catalog().Services(o)
		if err != nil {
			return 0, err
		}
		if meta.ResultsFilteredByACLs {
			// A feed of part of the catalog would leave the nodes deaf to
			// the rest: it never becomes ready.
			pub.aclOnce.Do(func() {
				pub.p.Log.Error("this token may not read every service: the feed stays not ready and the nodes watch the catalog themselves; give the publisher's token service_prefix \"\" read (hiera-publisher.hcl)")
			})
			return 0, errServicesHidden
		}
		names := make(map[string][]string, len(svcs))
		for n, tags := range svcs {
			tags = slices.Clone(tags)
			slices.Sort(tags)
			names[n] = slices.Compact(tags)
		}
		select {
		case out <- listResult{names: names, index: meta.LastIndex}:
		case <-ctx.Done():
		}
		return meta.LastIndex, nil
	})
}

// reconcile starts a query for each service new to the list and records
// the services that left it.
func (pub *publication) reconcile(ctx context.Context, l listResult) {
	now := time.Now().UTC().Format(time.RFC3339)
	for name, tags := range l.names {
		pub.tags[name] = tags
		if _, ok := pub.watchers[name]; ok {
			// Tags changed: recorded with the latest index known.
			last, ok := pub.pending[name]
			if !ok {
				last = pub.written[name]
			}
			if !pub.unseen[name] && !slices.Equal(last.Tags, tags) {
				pub.pending[name] = store.FeedService{Index: last.Index, Tags: tags, Time: now}
			}
			continue
		}
		sctx, cancel := context.WithCancel(ctx)
		pub.watchers[name] = cancel
		pub.unseen[name] = true
		pub.wg.Add(1)
		go func() { defer pub.wg.Done(); pub.watchService(sctx, name) }()
	}
	for name, cancel := range pub.watchers {
		if _, ok := l.names[name]; ok {
			continue
		}
		cancel()
		delete(pub.watchers, name)
		delete(pub.unseen, name)
		delete(pub.tags, name)
		pub.mu.Lock()
		delete(pub.failing, name)
		pub.mu.Unlock()
		pub.pending[name] = store.FeedService{Index: l.index, Gone: true, Time: now}
	}
	// A service gone while no publisher ran has a record but no watcher.
	for name, v := range pub.written {
		if _, ok := pub.watchers[name]; !ok && !v.Gone {
			pub.pending[name] = store.FeedService{Index: l.index, Gone: true, Time: now}
		}
	}
}

// watchService follows one service's index.
func (pub *publication) watchService(ctx context.Context, name string) {
	pub.block(ctx, name, func(o *api.QueryOptions) (uint64, error) {
		o.Filter = noInstance
		_, meta, err := pub.p.Client.Health().Service(name, "", false, o)
		if err != nil {
			return 0, err
		}
		select {
		case pub.idxCh <- feedIndex{name: name, index: meta.LastIndex}:
		case <-ctx.Done():
		}
		return meta.LastIndex, nil
	})
}

// note takes one service's index; a service no longer watched is ignored.
func (pub *publication) note(fi feedIndex) {
	if _, ok := pub.watchers[fi.name]; !ok {
		return
	}
	delete(pub.unseen, fi.name)
	tags := pub.tags[fi.name]
	if w, ok := pub.written[fi.name]; ok && !w.Gone && w.Index == fi.index && slices.Equal(w.Tags, tags) {
		return
	}
	pub.pending[fi.name] = store.FeedService{Index: fi.index, Tags: tags, Time: time.Now().UTC().Format(time.RFC3339)}
}

// flush writes what is pending, with its entries in the head, and
// marks the feed ready once every service has reported.
func (pub *publication) flush(ctx context.Context) error {
	becomeReady := !pub.ready && len(pub.unseen) == 0 && len(pub.watchers) > 0 && !pub.failed(time.Now())
	if len(pub.pending) == 0 && !becomeReady {
		return nil
	}
	head := pub.head
	head.Ready = head.Ready || becomeReady
	names := make([]string, 0, len(pub.pending))
	for n := range pub.pending {
		names = append(names, n)
	}
	slices.Sort(names)
	seq := pub.seq
	for _, n := range names {
		seq++
		e := pub.pending[n]
		e.Service, e.Seq, e.Time = n, seq, ""
		head.Entries = append(head.Entries[:len(head.Entries):len(head.Entries)], e)
	}
	if over := len(head.Entries) - store.FeedHeadEntries; over > 0 {
		head.Dropped = head.Entries[over-1].Seq
		head.Entries = head.Entries[over:]
	}
	if err := pub.p.Store.PublishFeed(ctx, pub.session, head, pub.pending); err != nil {
		if errors.Is(err, store.ErrNotFeedLeader) || ctx.Err() != nil {
			return err
		}
		// Kept pending: written with the next change or check.
		pub.p.Log.Warn("write the change feed", "err", err)
		return nil
	}
	for n, v := range pub.pending {
		pub.written[n] = v
	}
	pub.pending = map[string]store.FeedService{}
	pub.head, pub.seq = head, seq
	if becomeReady {
		pub.ready = true
		pub.p.Log.Info("the catalog change feed is ready", "services", len(pub.watchers))
	}
	return nil
}

// check withdraws the ready record while queries fail, writes what is
// still pending, and prunes gone markers past their retention.
func (pub *publication) check(ctx context.Context) error {
	now := time.Now()
	if pub.ready && pub.failed(now) {
		head := pub.head
		head.Ready = false
		if err := pub.p.Store.PublishFeed(ctx, pub.session, head, nil); err != nil {
			return err
		}
		pub.ready, pub.head = false, head
		pub.p.Log.Warn("queries have failed for too long: the nodes watch the catalog themselves until they answer again", "after", pub.p.FailAfter)
	}
	var prune []string
	for name, v := range pub.written {
		t, err := time.Parse(time.RFC3339, v.Time)
		if v.Gone && (err != nil || now.Sub(t) > pub.p.Retention) {
			prune = append(prune, name)
		}
	}
	if len(prune) > 0 {
		if err := pub.p.Store.DeleteFeedServices(ctx, pub.session, prune); err != nil {
			return err
		}
		for _, n := range prune {
			delete(pub.written, n)
		}
	}
	return pub.flush(ctx)
}

// failed reports whether a query has been failing for FailAfter.
func (pub *publication) failed(now time.Time) bool {
	pub.mu.Lock()
	defer pub.mu.Unlock()
	for _, since := range pub.failing {
		if now.Sub(since) >= pub.p.FailAfter {
			return true
		}
	}
	return false
}

// block runs one blocking query loop (see bulkWatch.block), recording
// when the query began to fail.
func (pub *publication) block(ctx context.Context, name string, q func(*api.QueryOptions) (uint64, error)) {
	var idx uint64
	backoff := retryBackoff
	for ctx.Err() == nil {
		next, err := q((&api.QueryOptions{WaitIndex: idx, WaitTime: blockWait}).WithContext(ctx))
		if err != nil {
			if ctx.Err() != nil {
				return
			}
			pub.mu.Lock()
			if _, ok := pub.failing[name]; !ok {
				pub.failing[name] = time.Now()
				pub.p.Log.Debug("feed query failing", "service", name, "err", err)
			}
			pub.mu.Unlock()
			select {
			case <-ctx.Done():
				return
			case <-time.After(backoff):
			}
			backoff = min(2*backoff, retryMaxBackoff)
			continue
		}
		pub.mu.Lock()
		delete(pub.failing, name)
		pub.mu.Unlock()
		backoff = retryBackoff
		if next < idx {
			next = 0
		}
		idx = next
	}
}

// runPublish runs hiera-services --publish until ctx ends.
func runPublish(ctx context.Context, c *Config, fs *pflag.FlagSet, stdio IO) error {
	for _, f := range []string{"out", "template", "service", "service-regex", "dependencies", "expect-service", "watch", "wait", "exec", "reads", "reads-regex", "splay", "lock-file", "pass-env", "feed", "datacenter"} {
		if fs.Lookup(f) != nil && fs.Changed(f) {
			return exitcode.Usagef("--publish writes the change feed, not a file: --%s does not apply", f)
		}
	}
	if fs.NArg() > 0 {
		return exitcode.Usagef("unexpected argument %q (hiera-services takes flags only)", fs.Arg(0))
	}
	logger, err := c.Log.New(stdio.Stderr)
	if err != nil {
		return err
	}
	cfg, err := c.Consul.Config()
	if err != nil {
		return err
	}
	// One blocking query per service: keep their connections between
	// answers instead of opening one per answer.
	tr := cleanhttp.DefaultPooledTransport()
	tr.MaxIdleConnsPerHost = 1 << 16
	cfg.Transport = tr
	client, err := consulclient.NewClient(cfg)
	if err != nil {
		return err
	}
	st, err := store.New(client, c.Prefix)
	if err != nil {
		return exitcode.Usagef("--prefix: %v", err)
	}
	host, _ := os.Hostname()
	p := &Publisher{Client: client, Store: st, ID: host, Log: logger}
	return p.Run(ctx)
}
