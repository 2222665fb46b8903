package hiera

import (
	"context"
	"fmt"
	"os"
	"strings"
	"sync"
	"time"

	"github.com/hashicorp/consul-template/manager"
	ctrenderer "github.com/hashicorp/consul-template/renderer"
	cttemplate "github.com/hashicorp/consul-template/template"
	"github.com/hashicorp/consul/api"

	dep "github.com/hashicorp/consul-template/dependency"

	"github.com/jiocloud/orchestrate/internal/fault"
	"github.com/jiocloud/orchestrate/templates"
)

// watchConns bounds --watch's connections to the agent: one blocking
// query on the catalog change feed, three that cover the whole
// datacenter (the service list, the checks that are not passing, the node
// list; stopped while the feed is live) and three for targeted reads
// (four without the feed). With the renderer's own client, which checks
// every 2 s that the agent answers, a node holds at most 8, whatever the
// catalog's size.
const watchConns = 7

// fetchConns is how many targeted reads run at once.
func (w *bulkWatch) fetchConns() int {
	if w.fetchers > 0 {
		return w.fetchers
	}
	if w.feedPrefix != "" {
		return watchConns - 4
	}
	return watchConns - 3
}

// blockWait is how long each blocking query waits for a change.
const blockWait = 5 * time.Minute

// bulkWatch is --watch without one blocking query per service. It keeps
// consul-template's template engine and its data types: the template runs
// against a Brain this watch fills itself. Three blocking queries say what
// changed anywhere in the datacenter, and only the services concerned are
// read again:
//
//   - a check changing state: the checks that are not passing (one
//     filtered query) differ; the services of the checks that changed, or
//     every service on a node whose node check changed, are read again;
//   - a registration (an instance added, removed or changed): the service
//     list's index moves; each used service's own index is probed with a
//     query that returns no data (its index header alone), and the services
//     whose index moved are read again;
//   - a node's address or tagged addresses changing (the service list does
//     not move): the node list differs; that node's services are read
//     again.
//
// Queries of other kinds a custom template uses (a key, say) are read
// again at every render, not watched.
type bulkWatch struct {
	r       *Renderer
	p       *pass
	clients *dep.ClientSet
	consul  *api.Client
	tmpl    *cttemplate.Template
	brain   *cttemplate.Brain
	dc      string
	trouble *queryTrouble

	mu sync.Mutex
	// dirty holds the used dependencies to read again before the next
	// render; all, every one. Guarded by mu.
	dirty map[string]bool
	all   bool
	// wakeCh gets a value when dirty gained something.
	wakeCh chan struct{}

	// Written by the render loop only, read under mu by the watchers.
	used     map[string]dep.Dependency // used dependencies by String()
	index    map[string]uint64         // last index read per used dependency
	services map[string][]string       // service name -> used health deps
	nodeDeps map[string]map[string]bool
	// listed holds the last service list read (the datacenter's own),
	// each service's tags, for the change feed.
	listed map[string][]string
	// depNodes holds, per used health query, the nodes of its
	// instances, as nodeDeps lists them.
	depNodes map[string][]string
	// always are the used queries of other kinds (a key, say): read
	// again at every render.
	always []dep.Dependency
	// builtin: the template is the built-in one, executed in Go
	// (executeBuiltin) rather than by text/template.
	builtin bool
	// queries caches the built-in template's health queries by name.
	queries map[string]*dep.HealthServiceQuery

	// feedPrefix is the KV prefix of the catalog change feed; "" when
	// not followed.
	feedPrefix string
	// fetchers, when set, is how many reads run at once (once mode).
	fetchers int
}

// newBulkWatch returns the render engine of --watch and once mode, whose
// queries hold at most conns connections.
func (r *Renderer) newBulkWatch(p *pass, sel *Selection, conns int) (*bulkWatch, error) {
	cfg := r.ctConfig(conns)
	cfg.Finalize()
	clients, err := manager.NewClientSet(cfg)
	if err != nil {
		return nil, fault.Input(fmt.Errorf("consul client: %w", err))
	}
	tmpl, err := cttemplate.NewTemplate(&cttemplate.NewTemplateInput{Contents: r.Template, Destination: r.Dest, ExtFuncMap: p.funcs.FuncMap()})
	if err != nil {
		return nil, fault.Input(fmt.Errorf("template: %w", err))
	}
	dc, feed := "", r.FeedPrefix
	if sel.QueryDatacenter {
		// The feed is the publisher's own datacenter's.
		dc, feed = sel.Datacenter, ""
	}
	return &bulkWatch{r: r, p: p, clients: clients, consul: clients.Consul(), tmpl: tmpl, brain: cttemplate.NewBrain(), dc: dc, feedPrefix: feed,
		trouble: p.trouble, dirty: map[string]bool{}, wakeCh: make(chan struct{}, 1),
		used: map[string]dep.Dependency{}, index: map[string]uint64{}, services: map[string][]string{}, nodeDeps: map[string]map[string]bool{},
		depNodes: map[string][]string{}, builtin: r.Template == templates.ServicesYAML, queries: map[string]*dep.HealthServiceQuery{}}, nil
}

// run renders until ctx ends, calling onChange after each render that
// changed the sink's data.
func (w *bulkWatch) run(ctx context.Context, onChange func(context.Context)) error {
	var wg sync.WaitGroup
	defer wg.Wait()
	wctx, cancel := context.WithCancel(ctx)
	defer cancel()
	// The watchers take their first look before the first render reads
	// anything, so no change falls between the two.
	if w.feedPrefix == "" {
		ready := make(chan struct{}, 3)
		d := w.startDirect(wctx, ready)
		defer d.stop()
		for range 3 {
			select {
			case <-ctx.Done():
				return nil
			case <-ready:
			}
		}
	} else {
		initCh := make(chan struct{})
		wg.Add(1)
		go func() { defer wg.Done(); w.watchFeed(wctx, initCh) }()
		select {
		case <-ctx.Done():
			return nil
		case <-initCh:
		}
	}
	w.wake()
	retry := retryBackoff
	var retryCh <-chan time.Time
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-w.wakeCh:
		case <-retryCh:
			retryCh = nil
		case <-w.p.changedCh:
			if onChange != nil {
				onChange(ctx)
			}
			continue
		}
		if !w.settle(ctx) {
			return nil
		}
		err := w.render(ctx)
		switch {
		case ctx.Err() != nil:
			return nil
		case err == nil:
			retry = retryBackoff
		case fault.IsInput(err):
			// Bad output (logged by the sink's check): the last good file
			// stays; the next change renders again.
		default:
			// A query failed (logged once per cause): the queries that
			// failed stay marked; try again with backoff, since no change
			// may come to wake us.
			retryCh = time.After(retry)
			retry = min(2*retry, retryMaxBackoff)
		}
	}
}

// settle waits out --wait, as consul-template's -wait: the render comes
// once no change arrived for MIN, or MAX after the first change at the
// latest. It reports false when ctx ended.
func (w *bulkWatch) settle(ctx context.Context) bool {
	wc := w.r.Wait
	if wc == nil || wc.Min == nil || *wc.Min <= 0 {
		return ctx.Err() == nil
	}
	quiet := *wc.Min
	deadline := time.Now().Add(4 * quiet)
	if wc.Max != nil && *wc.Max > 0 {
		deadline = time.Now().Add(*wc.Max)
	}
	for {
		wait := min(quiet, time.Until(deadline))
		if wait <= 0 {
			return true
		}
		select {
		case <-ctx.Done():
			return false
		case <-time.After(wait):
			return true
		case <-w.wakeCh:
			// Another change: wait again for quiet, up to MAX.
		}
	}
}

// mark makes the next render read the given dependencies again.
func (w *bulkWatch) mark(keys []string) {
	if len(keys) == 0 {
		return
	}
	w.mu.Lock()
	for _, k := range keys {
		w.dirty[k] = true
	}
	w.mu.Unlock()
	w.wake()
}

// changedDuringFirstRender: before the first render remembered what it
// used, a change cannot be traced to a query; read everything again.
func (w *bulkWatch) changedDuringFirstRender() bool {
	w.mu.Lock()
	first := len(w.used) == 0
	if first {
		w.all = true
	}
	w.mu.Unlock()
	if first {
		w.wake()
	}
	return first
}

func (w *bulkWatch) wake() {
	select {
	case w.wakeCh <- struct{}{}:
	default:
	}
}

// render reads the dirty dependencies again, executes the template until
// nothing it uses is missing, and hands the result to the sink.
func (w *bulkWatch) render(ctx context.Context) error {
	w.mu.Lock()
	var refresh []dep.Dependency
	if w.all {
		for _, d := range w.used {
			refresh = append(refresh, d)
		}
	} else {
		for k := range w.dirty {
			if d, ok := w.used[k]; ok {
				refresh = append(refresh, d)
			}
		}
		refresh = append(refresh, w.always...)
	}
	w.dirty, w.all = map[string]bool{}, false
	w.mu.Unlock()
	if err := w.fetch(ctx, refresh); err != nil {
		return err
	}
	fetched := refresh
	for round := 0; ; round++ {
		out, used, missing, err := w.execute()
		if err != nil {
			return fault.Input(fmt.Errorf("template: %w", err))
		}
		if len(missing) == 0 {
			w.remember(used, fetched)
			_, err := w.p.render(&ctrenderer.RenderInput{Path: w.r.Dest, Contents: out})
			return err
		}
		if round == 10 {
			return fmt.Errorf("template still misses %d queries after 10 rounds", len(missing))
		}
		if err := w.fetch(ctx, missing); err != nil {
			return err
		}
		fetched = append(fetched, missing...)
	}
}

// execute runs the template on the brain: its output, the queries it
// used and those it misses.
func (w *bulkWatch) execute() ([]byte, []dep.Dependency, []dep.Dependency, error) {
	if w.builtin {
		return w.executeBuiltin()
	}
	res, err := w.tmpl.Execute(&cttemplate.ExecuteInput{Brain: w.brain, Env: os.Environ()})
	if err != nil {
		return nil, nil, nil, err
	}
	return res.Output, res.Used.List(), res.Missing.List(), nil
}

// remember records what the last render used: the dependencies, and for
// each health query its service and the nodes its instances run on. When
// the render used the same queries as the last one, only those in
// fetched are looked at again: a change to one service of thousands
// costs one.
func (w *bulkWatch) remember(used, fetched []dep.Dependency) {
	w.mu.Lock()
	defer w.mu.Unlock()
	same := len(used) == len(w.used)
	for _, d := range used {
		if !same {
			break
		}
		_, same = w.used[d.String()]
	}
	if same {
		for _, d := range fetched {
			w.learn(d.String(), d)
		}
		return
	}
	now := make(map[string]bool, len(used))
	for _, d := range used {
		now[d.String()] = true
	}
	for k, d := range w.used {
		if !now[k] {
			// A service that went away: its data goes too.
			w.brain.Forget(d)
			delete(w.index, k)
		}
	}
	for name, q := range w.queries {
		if !now[q.String()] {
			delete(w.queries, name)
		}
	}
	w.used = make(map[string]dep.Dependency, len(used))
	w.services = map[string][]string{}
	w.nodeDeps = map[string]map[string]bool{}
	w.depNodes = map[string][]string{}
	w.listed = map[string][]string{}
	w.always = nil
	for _, d := range used {
		k := d.String()
		w.used[k] = d
		switch d.(type) {
		case *dep.HealthServiceQuery:
			name := w.learn(k, d)
			w.services[name] = append(w.services[name], k)
		case *dep.CatalogServicesQuery:
			w.learn(k, d)
		default:
			w.always = append(w.always, d)
		}
	}
}

// learn records what one used query's data says: for a health query the
// nodes its instances run on, returning its service; for the datacenter's
// own service list, each service's tags. Call holding mu.
func (w *bulkWatch) learn(k string, d dep.Dependency) string {
	switch q := d.(type) {
	case *dep.CatalogServicesQuery:
		if k == "catalog.services" {
			data, _ := w.brain.Recall(q)
			list, _ := data.([]*dep.CatalogSnippet)
			w.listed = make(map[string][]string, len(list))
			for _, s := range list {
				w.listed[s.Name] = s.Tags
			}
		}
	case *dep.HealthServiceQuery:
		for _, n := range w.depNodes[k] {
			delete(w.nodeDeps[n], k)
			if len(w.nodeDeps[n]) == 0 {
				delete(w.nodeDeps, n)
			}
		}
		data, _ := w.brain.Recall(q)
		entries, _ := data.([]*dep.HealthService)
		nodes := make([]string, 0, len(entries))
		for _, e := range entries {
			if w.nodeDeps[e.Node] == nil {
				w.nodeDeps[e.Node] = map[string]bool{}
			}
			w.nodeDeps[e.Node][k] = true
			nodes = append(nodes, e.Node)
		}
		w.depNodes[k] = nodes
		return healthDepService(k, entries)
	}
	return ""
}

// healthDepService is the service a health query reads: its instances'
// name, or, with none, the name in the query (health.service(name@dc|f)).
func healthDepService(key string, entries []*dep.HealthService) string {
	if len(entries) > 0 {
		return entries[0].Name
	}
	s := strings.TrimSuffix(strings.TrimPrefix(key, "health.service("), ")")
	s, _, _ = strings.Cut(s, "|")
	s, _, _ = strings.Cut(s, "@")
	return s
}

// fetch reads deps (not blocking) over the bounded transport, four at a
// time, and stores each in the brain with its index.
func (w *bulkWatch) fetch(ctx context.Context, deps []dep.Dependency) error {
	type result struct {
		d    dep.Dependency
		data any
		idx  uint64
		err  error
	}
	results := make(chan result, len(deps))
	sem := make(chan struct{}, w.fetchConns())
	for _, d := range deps {
		go func() {
			select {
			case sem <- struct{}{}:
			case <-ctx.Done():
				results <- result{d: d, err: ctx.Err()}
				return
			}
			defer func() { <-sem }()
			data, meta, err := d.Fetch(w.clients, &dep.QueryOptions{})
			r := result{d: d, data: data, err: err}
			if meta != nil {
				r.idx = meta.LastIndex
			}
			results <- r
		}()
	}
	var first error
	for range deps {
		r := <-results
		if r.err != nil {
			w.trouble.fail(fmt.Errorf("%s: %w", r.d, r.err))
			if first == nil {
				first = fmt.Errorf("%s: %w", r.d, r.err)
			}
			w.mu.Lock()
			w.dirty[r.d.String()] = true // read again at the retry
			w.mu.Unlock()
			continue
		}
		w.brain.Remember(r.d, r.data)
		w.mu.Lock()
		w.index[r.d.String()] = r.idx
		w.mu.Unlock()
	}
	return first
}

// block runs one blocking query loop: q is asked with the last index and
// returns the new one; on returns with each changed result. Errors back
// off from 250 ms to 30 s and are reported once per cause.
func (w *bulkWatch) block(ctx context.Context, ready chan<- struct{}, name string, q func(*api.QueryOptions) (uint64, error)) {
	w.blockOr(ctx, ready, name, q, nil)
}

// blockOr is block, calling onErr (when set) after each failed query,
// in the loop's goroutine.
func (w *bulkWatch) blockOr(ctx context.Context, ready chan<- struct{}, name string, q func(*api.QueryOptions) (uint64, error), onErr func()) {
	var idx uint64
	backoff := retryBackoff
	once := sync.Once{}
	for ctx.Err() == nil {
		// Not stale: a wake from one server followed by a read from
		// another that lags would miss the change until the next one.
		opts := (&api.QueryOptions{Datacenter: w.dc, WaitIndex: idx, WaitTime: blockWait}).WithContext(ctx)
		next, err := q(opts)
		if err != nil {
			if ctx.Err() != nil {
				return
			}
			w.trouble.fail(fmt.Errorf("%s: %w", name, err))
			if onErr != nil {
				onErr()
			}
			select {
			case <-ctx.Done():
				return
			case <-time.After(backoff):
			}
			backoff = min(2*backoff, retryMaxBackoff)
			continue
		}
		backoff = retryBackoff
		once.Do(func() { ready <- struct{}{} })
		// An index that went backwards (a server restored from a
		// snapshot) starts over, as Consul's blocking query rules say.
		if next < idx {
			next = 0
		}
		idx = next
	}
}

// watchServices follows the service list: a registration anywhere moves
// its index; the used services whose own index moved are read again.
func (w *bulkWatch) watchServices(ctx context.Context, ready chan<- struct{}) {
	first := true
	w.block(ctx, ready, "catalog.services", func(o *api.QueryOptions) (uint64, error) {
		_, meta, err := w.consul.Catalog().Services(o)
		if err != nil {
			return 0, err
		}
		if first || w.changedDuringFirstRender() {
			first = false
			return meta.LastIndex, nil
		}
		if err := w.probe(ctx); err != nil {
			return 0, err
		}
		return meta.LastIndex, nil
	})
}

// probe asks each used service for its index alone (a filter no instance
// matches) and marks those whose index moved, and the service list itself
// (a service added or removed).
func (w *bulkWatch) probe(ctx context.Context) error {
	w.mu.Lock()
	type probeDep struct {
		key, name string
		idx       uint64
	}
	var deps []probeDep
	var marks []string
	for name, keys := range w.services {
		for _, k := range keys {
			deps = append(deps, probeDep{key: k, name: name, idx: w.index[k]})
		}
	}
	for k, d := range w.used {
		if _, ok := d.(*dep.CatalogServicesQuery); ok {
			marks = append(marks, k)
		}
	}
	w.mu.Unlock()
	var mu sync.Mutex
	var wg sync.WaitGroup
	var firstErr error
	sem := make(chan struct{}, w.fetchConns())
	for _, d := range deps {
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer wg.Done()
			defer func() { <-sem }()
			q := (&api.QueryOptions{Datacenter: w.dc, Filter: `Service.ID == "" and Service.ID != ""`}).WithContext(ctx)
			_, meta, err := w.consul.Health().Service(d.name, "", false, q)
			mu.Lock()
			defer mu.Unlock()
			switch {
			case err != nil:
				if firstErr == nil {
					firstErr = err
				}
			case meta.LastIndex != d.idx:
				marks = append(marks, d.key)
			}
		}()
	}
	wg.Wait()
	w.mark(marks)
	return firstErr
}

// checkState is what the filtered checks query says of one check.
type checkState struct{ status, service, serviceID string }

// watchChecks follows the checks that are not passing: a check turning
// critical or warning appears, one passing again disappears.
func (w *bulkWatch) watchChecks(ctx context.Context, ready chan<- struct{}) {
	var last map[string]checkState
	w.block(ctx, ready, "health.state(not passing)", func(o *api.QueryOptions) (uint64, error) {
		o.Filter = `Status != "passing"`
		checks, meta, err := w.consul.Health().State(api.HealthAny, o)
		if err != nil {
			return 0, err
		}
		now := make(map[string]checkState, len(checks))
		for _, c := range checks {
			now[c.Node+"\x00"+c.CheckID] = checkState{status: c.Status, service: c.ServiceName, serviceID: c.ServiceID}
		}
		if last != nil && !w.changedDuringFirstRender() {
			var changed []string
			for k, s := range now {
				if last[k] != s {
					changed = append(changed, k)
				}
			}
			for k := range last {
				if _, ok := now[k]; !ok {
					changed = append(changed, k)
				}
			}
			w.markChecks(changed, last, now)
		}
		last = now
		return meta.LastIndex, nil
	})
}

// markChecks marks the health queries a changed check concerns: its
// service's, or, for a node check, those of every service on the node.
func (w *bulkWatch) markChecks(changed []string, before, after map[string]checkState) {
	w.mu.Lock()
	var marks []string
	for _, k := range changed {
		s, ok := after[k]
		if !ok {
			s = before[k]
		}
		node, _, _ := strings.Cut(k, "\x00")
		if s.serviceID == "" {
			for d := range w.nodeDeps[node] {
				marks = append(marks, d)
			}
			continue
		}
		marks = append(marks, w.services[s.service]...)
	}
	w.mu.Unlock()
	w.mark(marks)
}

// watchNodes follows the node list: a node's address, tagged addresses or
// meta changing does not move the service list; its services are read
// again.
func (w *bulkWatch) watchNodes(ctx context.Context, ready chan<- struct{}) {
	var last map[string]string
	w.block(ctx, ready, "catalog.nodes", func(o *api.QueryOptions) (uint64, error) {
		nodes, meta, err := w.consul.Catalog().Nodes(o)
		if err != nil {
			return 0, err
		}
		now := make(map[string]string, len(nodes))
		for _, n := range nodes {
			now[n.Node] = fmt.Sprintf("%s %v %v", n.Address, n.TaggedAddresses, n.Meta)
		}
		if last != nil && !w.changedDuringFirstRender() {
			w.mu.Lock()
			var marks []string
			for name, v := range now {
				if old, ok := last[name]; ok && old != v {
					for d := range w.nodeDeps[name] {
						marks = append(marks, d)
					}
				}
			}
			w.mu.Unlock()
			w.mark(marks)
		}
		last = now
		return meta.LastIndex, nil
	})
}
