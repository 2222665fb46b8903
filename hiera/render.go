package hiera

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log"
	"log/slog"
	"regexp"
	"strings"
	"sync"
	"text/template"
	"time"

	"github.com/hashicorp/consul-template/config"
	ctrenderer "github.com/hashicorp/consul-template/renderer"
	cttemplate "github.com/hashicorp/consul-template/template"
	"github.com/hashicorp/consul/api"
	"gopkg.in/yaml.v3"

	"github.com/jiocloud/orchestrate/internal/exitcode"
	"github.com/jiocloud/orchestrate/internal/fault"
)

// onceConns bounds consul-template's connections to the agent in a
// once-mode render: its queries do not block, so a few connections serve
// them all. With the renderer's own client (the service list, the
// agent's datacenter) a render holds at most 8.
const onceConns = 6

// Backoff bounds for --watch while Consul is unreachable: consul-template
// retries its queries from 250ms doubling up to 30s, so a node notices a
// recovered agent within half a minute without hammering a dead one.
const (
	retryBackoff    = 250 * time.Millisecond
	retryMaxBackoff = 30 * time.Second
)

// A Sink receives the hiera data of every complete render: a file writer
// for hiera-services (FileSink), or a publisher to Consul KV.
type Sink interface {
	// Publish stores data and reports whether it differs from what the
	// sink held; when it does not, the sink leaves its target untouched.
	// An *InputError means the caller's configuration of the sink is wrong
	// (exit 2); any other error, that the target could not be reached.
	Publish(ctx context.Context, data []byte) (changed bool, err error)
}

// Renderer renders hiera data from the Consul catalog with consul-template's
// template engine and query code and hands every complete render, checked to be a YAML
// mapping, to its Sink. It writes no file and runs no command itself: what
// follows a change is the caller's.
type Renderer struct {
	// Template is the consul-template template to render.
	Template string
	// Services, ServiceRegex, Dependencies and Expect select what a render
	// holds (see Selection).
	Services     []string
	ServiceRegex *regexp.Regexp
	Dependencies Dependencies
	Expect       []string
	// Datacenter is the datacenter to read; empty: the agent's own.
	Datacenter string
	// Client reads the catalog and the agent outside consul-template.
	Client *api.Client
	// Consul is the same connection for consul-template (ctconfig.Consul);
	// each render sets its retries on a copy.
	Consul *config.ConsulConfig
	// Wait is the quiescence of Watch; nil: consul-template's default.
	Wait *config.WaitConfig
	// Sink receives the rendered data; Dest names what it writes, in logs
	// and errors.
	Sink Sink
	Dest string
	Log  *slog.Logger
	// FeedPrefix is the KV prefix whose catalog change feed (Publisher)
	// Watch follows while it is live; "" never follows one.
	FeedPrefix string
}

// pass is the state of one Once or Watch: its template functions and what
// its renders did.
type pass struct {
	r   *Renderer
	sel *Selection
	// ctx is the Once or Watch context, for the sink: consul-template
	// calls the renderer function without one.
	ctx   context.Context
	funcs *Funcs
	// changedCh gets a value after a render that changed the sink's data;
	// it holds one, so changes while the caller handles one coalesce into
	// one more.
	changedCh chan struct{}

	// trouble logs failing queries of --watch once per cause.
	trouble *queryTrouble

	mu      sync.Mutex
	changed bool  // guarded by mu: a render changed the sink's data
	lastErr error // guarded by mu: the last render or publish error
}

func (r *Renderer) newPass(ctx context.Context, sel *Selection) *pass {
	return &pass{r: r, sel: sel, ctx: ctx, funcs: NewFuncs(sel, r.Log), changedCh: make(chan struct{}, 1), trouble: &queryTrouble{log: r.Log}}
}

// Once renders one time from sel (see Selection) and reports whether the
// sink's data changed.
func (r *Renderer) Once(ctx context.Context, sel *Selection) (changed bool, err error) {
	p := r.newPass(ctx, sel)
	// Query failures end a once-mode render with its error: nothing is
	// retried, so nothing is logged as retrying.
	p.trouble = &queryTrouble{log: slog.New(slog.DiscardHandler)}
	restore := r.captureLog()
	defer restore()
	w, err := r.newBulkWatch(p, sel, onceConns)
	if err != nil {
		return false, err
	}
	// Its connections close with it: a run that renders twice (around
	// a splay) holds one render's at a time.
	defer w.clients.Stop()
	// Not blocking, so as many reads at once as once mode may hold
	// connections.
	w.fetchers = onceConns
	w.feedPrefix = ""
	if err := w.render(ctx); err != nil {
		if ctx.Err() != nil {
			return false, fault.Unavailable(fmt.Errorf("render %s: %w", r.Dest, ctx.Err()))
		}
		if fault.IsInput(err) {
			return false, err
		}
		return false, r.classify(r.explain(err))
	}
	p.mu.Lock()
	changed, lastErr := p.changed, p.lastErr
	p.mu.Unlock()
	if lastErr != nil {
		return false, r.classify(lastErr)
	}
	return changed, nil
}

// Watch renders on every catalog change until ctx ends, calling onChange
// after each render that changed the sink's data; changes while onChange
// runs coalesce into one more call. Consul being unreachable is logged
// once per change of state; the sink keeps the last good data meanwhile.
func (r *Renderer) Watch(ctx context.Context, onChange func(context.Context)) error {
	sel, err := r.selectionRetrying(ctx)
	if sel == nil {
		return err
	}
	p := r.newPass(ctx, sel)
	// consul-template's query code logs to the stdlib logger.
	restore := r.captureLog()
	defer restore()
	w, err := r.newBulkWatch(p, sel, watchConns)
	if err != nil {
		return err
	}
	go r.watchConsul(ctx)
	r.Log.Info("watching the catalog", "file", r.Dest, "datacenter", sel.Datacenter, "connections", watchConns)
	return w.run(ctx, onChange)
}

// selectionRetrying resolves the selection, retrying with backoff while
// Consul is unreachable. It returns nil and no error when ctx ends first.
func (r *Renderer) selectionRetrying(ctx context.Context) (*Selection, error) {
	for backoff := retryBackoff; ; backoff = min(2*backoff, retryMaxBackoff) {
		sel, err := r.Selection(ctx)
		if err == nil {
			return sel, nil
		}
		if exitcode.Code(err) != exitcode.Unavailable || ctx.Err() != nil {
			return nil, err
		}
		if backoff == retryBackoff {
			if _, _, kind := queryError(err); kind == causeLimit || kind == causeClosed {
				r.Log.Warn("consul refuses this client's connections, retrying; the existing file stays as it is", "err", err, "what_to_do", tooManyConns)
			} else {
				r.Log.Warn("consul unreachable, retrying; the existing file stays as it is", "err", err)
			}
		}
		select {
		case <-ctx.Done():
			return nil, nil
		case <-time.After(backoff):
		}
	}
}

// watchConsul logs when the agent stops answering and when it answers
// again, once per change: consul-template's own retries are debug lines.
func (r *Renderer) watchConsul(ctx context.Context) {
	up := true
	for {
		select {
		case <-ctx.Done():
			return
		case <-time.After(2 * time.Second):
		}
		_, err := r.Client.Status().Leader()
		switch {
		case err != nil && up && ctx.Err() == nil:
			r.Log.Warn("consul unreachable, retrying with backoff; the last good file stays", "err", err)
			up = false
		case err == nil && !up:
			r.Log.Info("consul reachable again")
			up = true
		}
	}
}

// Selection resolves what a render reads: the selected services and the
// datacenter the data comes from, Datacenter or else the agent's own. An
// agent that refuses to name its datacenter (ACL) leaves it unnamed; one
// that cannot be reached is exit 3.
func (r *Renderer) Selection(ctx context.Context) (*Selection, error) {
	sel := &Selection{
		Services:     r.Services,
		ServiceRegex: r.ServiceRegex,
		Dependencies: r.Dependencies,
		Expect:       r.Expect,
	}
	// A token that may not read every service gets a catalog silently
	// filtered by ACLs: rendering it would hand Puppet a partial (often
	// empty) services.yaml. Refuse instead, unless the operator selected
	// services explicitly.
	if len(sel.Services) == 0 && sel.ServiceRegex == nil {
		q := (&api.QueryOptions{Datacenter: r.Datacenter}).WithContext(ctx)
		svcs, meta, err := r.Client.Catalog().Services(q)
		if err != nil {
			return nil, fault.Unavailable(fmt.Errorf("consul: %w", err))
		}
		// Every datacenter's catalog holds at least the servers' "consul"
		// service; an empty one means the token sees nothing (Consul does
		// not flag filtering for the anonymous token).
		if meta.ResultsFilteredByACLs || len(svcs) == 0 {
			return nil, fault.Unavailable(errors.New("consul: the token may not read every service (catalog filtered by ACLs); refusing to write partial hiera data (give the token service_prefix \"\" read and node_prefix \"\" read, or select services with --service)"))
		}
	}
	if dc := r.Datacenter; dc != "" {
		sel.Datacenter, sel.QueryDatacenter = dc, true
		return sel, nil
	}
	self, err := r.Client.Agent().Self()
	if err != nil {
		var se api.StatusError
		if errors.As(err, &se) && se.Code == 403 {
			r.Log.Debug("agent self refused, header names no datacenter", "err", err)
			return sel, nil
		}
		return nil, fault.Unavailable(fmt.Errorf("consul: %w", err))
	}
	if cfg, ok := self["Config"]; ok {
		if dc, ok := cfg["Datacenter"].(string); ok {
			sel.Datacenter = dc
		}
	}
	return sel, nil
}

// checkTemplate parses the template the way consul-template will, so a
// template that does not parse is bad input (exit 2) before any render. It
// executes against an empty brain: every query returns nothing and nothing
// is fetched or written.
func checkTemplate(contents string, funcs template.FuncMap) error {
	t, err := cttemplate.NewTemplate(&cttemplate.NewTemplateInput{Contents: contents, ExtFuncMap: funcs})
	if err != nil {
		return &InputError{Err: fmt.Errorf("template: %w", err)}
	}
	_, err = t.Execute(&cttemplate.ExecuteInput{Brain: cttemplate.NewBrain()})
	if err != nil && strings.HasPrefix(err.Error(), "parse:") {
		return &InputError{Err: fmt.Errorf("template: %w", err)}
	}
	return nil
}

// ctConfig is consul-template's configuration for this renderer's
// queries: its Consul connection, with at most conns connections to the
// agent and no retries of its own (once mode fails fast, a watch handler
// runs again at the next change; --watch retries itself), and no Vault or
// Nomad. Callers add what they need and Finalize it.
func (r *Renderer) ctConfig(conns int) *config.Config {
	cfg := config.DefaultConfig()
	cfg.Vault.Address = config.String("")
	cfg.Nomad.Address = config.String("")
	cfg.Consul = r.Consul.Copy()
	cfg.Consul.Retry.Enabled = config.Bool(false)
	// One connection per query would run past the agent's
	// limits.http_max_conns_per_client (200 by default) on a large
	// catalog; a few carry them all.
	cfg.Consul.Transport.MaxConnsPerHost = config.Int(conns)
	cfg.Consul.Transport.MaxIdleConnsPerHost = config.Int(conns)
	return cfg
}

// render is consul-template's RendererFunc: it checks the output is a YAML
// mapping, then hands it to the sink. Invalid output never reaches the
// sink.
func (p *pass) render(in *ctrenderer.RenderInput) (*ctrenderer.RenderResult, error) {
	contents, trusted, err := p.funcs.Expand(in.Contents)
	if err == nil && !trusted {
		err = checkYAML(contents)
	}
	changed := false
	// consul-template renders once every query answered.
	p.trouble.ok()
	if err == nil {
		changed, err = p.r.Sink.Publish(p.ctx, contents)
	}
	p.mu.Lock()
	p.lastErr = err
	if changed {
		p.changed = true
	}
	p.mu.Unlock()
	if err != nil {
		p.r.Log.Error("render failed, the file stays as it was", "file", in.Path, "err", err)
		return nil, err
	}
	if !changed {
		p.r.Log.Debug("hiera data rendered, content unchanged, file not touched", "file", in.Path)
	} else {
		p.r.Log.Info("hiera data written", "file", in.Path, "bytes", len(contents))
		select {
		case p.changedCh <- struct{}{}:
		default:
		}
	}
	return &ctrenderer.RenderResult{DidRender: changed, WouldRender: true, Contents: contents}, nil
}

// checkYAML accepts a non-empty YAML mapping: hiera data, whatever template
// produced it.
func checkYAML(b []byte) error {
	var doc yaml.Node
	if err := yaml.Unmarshal(b, &doc); err != nil {
		return &InputError{Err: fmt.Errorf("rendered template is not valid YAML: %w", err)}
	}
	if len(doc.Content) == 0 || doc.Content[0].Kind != yaml.MappingNode {
		return &InputError{Err: errors.New("rendered template is not a YAML mapping (hiera data is key: value)")}
	}
	return nil
}

// classify maps a runner error: bad template output or input stays input
// (exit 2), an error that already says what it is stays so, and anything
// else came from talking to Consul or the sink's target: unavailable
// (exit 3).
func (r *Renderer) classify(err error) error {
	var ee *exitcode.Error
	if fault.IsInput(err) || fault.IsUnavailable(err) || errors.As(err, &ee) {
		return err
	}
	return fault.Unavailable(fmt.Errorf("render %s: %w", r.Dest, err))
}

// logMu guards the stdlib logger's output, which consul-template writes to.
var logMu sync.Mutex

// captureLog points the stdlib logger, which consul-template logs to, at
// slog, and returns a function restoring it.
func (r *Renderer) captureLog() func() {
	logMu.Lock()
	defer logMu.Unlock()
	prevOut, prevFlags := log.Writer(), log.Flags()
	log.SetOutput(logWriter{log: r.Log})
	log.SetFlags(0)
	return func() {
		logMu.Lock()
		defer logMu.Unlock()
		// consul-template's views log as they stop, after Stop returned:
		// its lines are dropped from here on, not printed raw.
		if _, ok := prevOut.(afterRender); !ok {
			prevOut = afterRender{prevOut}
		}
		log.SetOutput(prevOut)
		log.SetFlags(prevFlags)
	}
}

// afterRender is the stdlib logger's output once a render ended: it drops
// consul-template's lines ("[TRACE] (view) ...") and passes on the rest.
type afterRender struct{ out io.Writer }

// Write drops one consul-template line, or writes any other.
func (a afterRender) Write(p []byte) (int, error) {
	if ctLine.Match(p) {
		return len(p), nil
	}
	return a.out.Write(p)
}

// ctLine matches a consul-template log line, after the date the stdlib
// logger may put in front.
var ctLine = regexp.MustCompile(`^[0-9/: .]*\[(TRACE|DEBUG|INFO|WARN|ERR)\] \(`)

// logWriter sends consul-template's stdlib log lines ("[LEVEL] (part) msg")
// to slog. Its retries are debug: the renderer logs Consul's state changes
// itself, once each. So is its warning about watching many dependencies,
// which it repeats on every pass over the template: hiera-services watches
// one query per service by design.
type logWriter struct{ log *slog.Logger }

// Write logs one line of consul-template's output.
func (w logWriter) Write(p []byte) (int, error) {
	level := slog.LevelDebug
	line := p
	if i := bytes.IndexByte(p, ' '); i > 0 && p[0] == '[' {
		switch string(p[:i]) {
		case "[ERR]":
			level = slog.LevelError
		case "[WARN]":
			if !bytes.HasPrefix(p[i+1:], []byte("(view)")) && !bytes.HasPrefix(p[i+1:], []byte("(runner) watching")) {
				level = slog.LevelWarn
			}
		}
		switch rest := p[i+1:]; {
		case bytes.HasPrefix(rest, []byte("(runner) sending server error back to caller")):
			// The error itself comes on the runner's ServerErrCh and is
			// logged once per cause (queryTrouble); this line names none.
			level = slog.LevelDebug
		case bytes.HasPrefix(rest, []byte("(view)")), bytes.HasPrefix(rest, []byte("(runner) watcher reported error")):
			// A query that gave up: its error reaches the caller, which
			// reports it once; one line per query would be hundreds.
			level = slog.LevelDebug
		}
		line = p[i+1:]
	}
	// Most lines are debug and trace; drop them before any formatting.
	if !w.log.Enabled(context.Background(), level) {
		return len(p), nil
	}
	msg := strings.TrimSpace(string(line))
	if strings.HasPrefix(msg, "(runner) final config:") {
		// consul-template prints its whole configuration, Consul token
		// included; a token never goes into a log.
		msg = "(runner) final config: (not logged: it holds the Consul token)"
	}
	w.log.Log(context.Background(), level, msg, "from", "consul-template")
	return len(p), nil
}
