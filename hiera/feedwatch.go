package hiera

import (
	"context"
	"slices"
	"sync"
	"time"

	dep "github.com/hashicorp/consul-template/dependency"
	"github.com/hashicorp/consul/api"

	"github.com/jiocloud/orchestrate/internal/store"
)

// The catalog change feed, seen from a node (see Publisher): while a
// publisher holds the feed's lock and vouches for it, --watch follows the
// feed with one blocking query and reads again only the services whose
// recorded index is newer than the one it read; its three datacenter-wide
// watches are stopped. Without a live feed (no publisher, one that died
// or whose queries fail) they run as before, and the first render after
// the switch reads everything the template uses: changes the feed saw
// while nobody watched the catalog are not lost.

// feedReadFailAfter is how long a node that follows the feed keeps
// following it while its query fails. A failure shared by the whole
// fleet (a Consul leader election) must not make every node read the
// whole catalog again at once: the head, or the records when it fell
// behind, bring every change made meanwhile once the query answers. A
// failure that lasts (a token that lost its read) ends in the node
// watching the catalog itself.
const feedReadFailAfter = 30 * time.Second

// feedState is what the node knows of the feed. Owned by watchFeed.
type feedState struct {
	// session holds the lock and vouches for the head ("" when the feed
	// is not live).
	session string
	// seen is the Seq of the last head entry acted on.
	seen uint64
}

// directWatch runs the three datacenter-wide watches (services, checks,
// nodes) until stopped.
type directWatch struct {
	cancel context.CancelFunc
	wg     sync.WaitGroup
}

// startDirect starts the datacenter-wide watches; each sends on ready
// after its first answer.
func (w *bulkWatch) startDirect(ctx context.Context, ready chan<- struct{}) *directWatch {
	dctx, cancel := context.WithCancel(ctx)
	d := &directWatch{cancel: cancel}
	for _, f := range []func(context.Context, chan<- struct{}){w.watchServices, w.watchChecks, w.watchNodes} {
		d.wg.Add(1)
		go func() { defer d.wg.Done(); f(dctx, ready) }()
	}
	return d
}

func (d *directWatch) stop() {
	if d != nil {
		d.cancel()
		d.wg.Wait()
	}
}

// watchFeed follows the feed's head until ctx ends, running the direct
// watches while the feed is not live. initCh is closed once changes are
// watched: by the feed, or by the direct watches after their first
// answers.
func (w *bulkWatch) watchFeed(ctx context.Context, initCh chan<- struct{}) {
	f := &feedFollower{w: w, initCh: initCh}
	defer func() { f.direct.stop() }()
	once := make(chan struct{}, 1)
	w.blockOr(ctx, once, "hierafeed", func(o *api.QueryOptions) (uint64, error) {
		return f.answer(ctx, o)
	}, func() { f.failed(ctx) })
}

// feedFollower is watchFeed's state, used by its loop's goroutine only.
type feedFollower struct {
	w  *bulkWatch
	st feedState
	// direct runs while the feed is not followed (nil otherwise).
	direct *directWatch
	// initialized: initCh is closed.
	initialized bool
	initCh      chan<- struct{}
	// failingSince is when the feed's query began to fail while the
	// feed was followed.
	failingSince time.Time
}

func (f *feedFollower) signal() {
	if !f.initialized {
		f.initialized = true
		close(f.initCh)
	}
}

// answer reads the head once (the blocking query of watchFeed's loop)
// and follows it, or leaves it for the direct watches.
func (f *feedFollower) answer(ctx context.Context, o *api.QueryOptions) (uint64, error) {
	w := f.w
	pair, meta, err := w.consul.KV().Get(store.HieraFeedLeaderKey(w.feedPrefix), o)
	if err != nil {
		return 0, err
	}
	f.failingSince = time.Time{}
	head, session, err := store.ParseFeedHead(pair)
	if err != nil {
		w.r.Log.Debug("change feed: head ignored", "err", err)
		session = ""
	}
	if !head.Ready {
		session = ""
	}
	wasLive := f.st.session != ""
	switch {
	case session != "" && (session != f.st.session || head.Dropped > f.st.seen):
		// A new publisher, or changes the head no longer holds:
		// compare every record with what was read.
		if err := w.feedResync(ctx); err != nil {
			return 0, err
		}
		if !wasLive {
			f.direct.stop()
			f.direct = nil
			w.r.Log.Info("following the catalog change feed")
		}
		f.st.session, f.st.seen = session, lastSeq(head)
		f.signal()
	case session != "":
		var changed []store.FeedService
		for _, e := range head.Entries {
			if e.Seq > f.st.seen {
				changed = append(changed, e)
			}
		}
		w.markFeed(changed)
		f.st.seen = max(f.st.seen, lastSeq(head))
	default:
		if err := f.goDirect(ctx); err != nil {
			return 0, err
		}
	}
	return meta.LastIndex, nil
}

// failed follows a failed query of the head: before the first render
// the node watches the catalog at once (a token that may not read the
// feed must not keep it from rendering); while it follows the feed,
// after feedReadFailAfter.
func (f *feedFollower) failed(ctx context.Context) {
	switch {
	case !f.initialized:
		_ = f.goDirect(ctx)
	case f.st.session == "":
	case f.failingSince.IsZero():
		f.failingSince = time.Now()
	case time.Since(f.failingSince) >= feedReadFailAfter:
		_ = f.goDirect(ctx)
	}
}

// goDirect starts the direct watches, unless they run already, and
// waits for their first answers.
func (f *feedFollower) goDirect(ctx context.Context) error {
	w := f.w
	wasLive := f.st.session != ""
	if !wasLive && f.initialized {
		return nil
	}
	f.st.session = ""
	if f.initialized {
		w.r.Log.Warn("the catalog change feed is not live: watching the catalog directly")
		w.markAll()
	}
	ready := make(chan struct{}, 3)
	f.direct = w.startDirect(ctx, ready)
	for range 3 {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-ready:
		}
	}
	f.signal()
	return nil
}

// lastSeq is the Seq of the head's newest entry, or Dropped.
func lastSeq(h store.FeedHead) uint64 {
	if n := len(h.Entries); n > 0 {
		return h.Entries[n-1].Seq
	}
	return h.Dropped
}

// feedResync reads every service's record and marks what changed since
// it was read; before the first render (nothing read yet) it reads
// nothing: that render reads everything.
func (w *bulkWatch) feedResync(ctx context.Context) error {
	w.mu.Lock()
	first := len(w.used) == 0
	w.mu.Unlock()
	if first {
		w.markAll()
		return nil
	}
	dir := store.HieraFeedServicesDir(w.feedPrefix)
	pairs, _, err := w.consul.KV().List(dir, (&api.QueryOptions{}).WithContext(ctx))
	if err != nil {
		return err
	}
	records, problems := store.ParseFeedServices(w.feedPrefix, pairs)
	for _, p := range problems {
		w.r.Log.Debug("change feed: record ignored", "problem", p)
	}
	all := make([]store.FeedService, 0, len(records))
	for _, r := range records {
		all = append(all, r)
	}
	w.markFeed(all)
	return nil
}

// markFeed marks what the feed's changes say changed since it was read:
// a service's health queries whose index is older than the record's, and
// the service list's queries when a service entered or left it or its
// tags changed. Before the first render (nothing read yet) everything
// is read again.
func (w *bulkWatch) markFeed(records []store.FeedService) {
	w.mu.Lock()
	if len(w.used) == 0 {
		w.all = true
		w.mu.Unlock()
		w.wake()
		return
	}
	var marks []string
	list := false
	for _, s := range records {
		name := s.Service
		for _, k := range w.services[name] {
			if s.Gone || s.Index > w.index[k] {
				marks = append(marks, k)
			}
		}
		tags, listed := w.listed[name]
		if listed == s.Gone || listed && !slices.Equal(tags, s.Tags) {
			list = true
		}
	}
	if list {
		for k, d := range w.used {
			if _, ok := d.(*dep.CatalogServicesQuery); ok {
				marks = append(marks, k)
			}
		}
	}
	w.mu.Unlock()
	w.mark(marks)
}

// markAll reads everything again at the next render.
func (w *bulkWatch) markAll() {
	w.mu.Lock()
	w.all = true
	w.mu.Unlock()
	w.wake()
}
