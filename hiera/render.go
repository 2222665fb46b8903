package hiera

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log"
	"log/slog"
	"strings"
	"sync"
	"text/template"
	"time"

	"github.com/hashicorp/consul-template/config"
	"github.com/hashicorp/consul-template/manager"
	ctrenderer "github.com/hashicorp/consul-template/renderer"
	cttemplate "github.com/hashicorp/consul-template/template"
	"github.com/hashicorp/consul/api"
	"gopkg.in/yaml.v3"

	"github.com/jiocloud/orchestrate/internal/exitcode"
	"github.com/jiocloud/orchestrate/watch"
)

// Backoff bounds for --watch while Consul is unreachable: consul-template
// retries its queries from 250ms doubling up to 30s, so a node notices a
// recovered agent within half a minute without hammering a dead one.
const (
	retryBackoff    = 250 * time.Millisecond
	retryMaxBackoff = 30 * time.Second
)

// Renderer renders the hiera data with consul-template's manager.Runner and
// writes it with WriteFile.
type Renderer struct {
	Config    *Config
	Template  string
	Deps      Dependencies
	APIConfig *api.Config
	Log       *slog.Logger
	// Stdout and Stderr receive the --exec command's output.
	Stdout, Stderr io.Writer

	// changedCh gets a value after a write that changed the file; it
	// holds one, so changes during a running --exec command coalesce into
	// one more run.
	changedCh chan struct{}
	// funcs are the template functions of the running render.
	funcs *Funcs
	// holdsLock: the caller holds the lock (once mode), so writes do not
	// take it again.
	holdsLock bool

	mu      sync.Mutex
	changed bool  // guarded by mu: a write changed the file
	lastErr error // guarded by mu: the last render or write error
}

func readPayload(r io.Reader) ([]byte, error) { return watch.ReadPayload(r) }

// Once renders one time: write if changed, then run --exec if it changed.
func (r *Renderer) Once(ctx context.Context) error {
	client, err := api.NewClient(r.APIConfig)
	if err != nil {
		return exitcode.Wrap(exitcode.Usage, fmt.Errorf("consul client: %w", err))
	}
	sel, err := r.selection(ctx, client)
	if err != nil {
		return err
	}
	unlock, err := watch.Lock(ctx, r.Config.LockFile, true)
	if err != nil {
		if ctx.Err() != nil {
			return exitcode.Wrap(exitcode.Unavailable, err)
		}
		// The lock file cannot be made: the operator's --lock-file (or
		// --out's directory), not Consul.
		return exitcode.Wrap(exitcode.Usage, fmt.Errorf("--lock-file: %w", err))
	}
	defer unlock()
	r.holdsLock = true
	r.changedCh = make(chan struct{}, 1)

	restore := r.captureLog()
	defer restore()
	runner, err := r.newRunner(sel, true)
	if err != nil {
		return err
	}
	go runner.Start()
	defer runner.Stop()
	select {
	case <-runner.DoneCh:
	case err := <-runner.ErrCh:
		return r.classify(err)
	case <-ctx.Done():
		return exitcode.Wrap(exitcode.Unavailable, fmt.Errorf("render %s: %w", r.Config.Out, ctx.Err()))
	}
	r.mu.Lock()
	changed, lastErr := r.changed, r.lastErr
	r.mu.Unlock()
	if lastErr != nil {
		return r.classify(lastErr)
	}
	if !changed {
		return nil
	}
	if r.Config.Exec != "" {
		if code := r.exec(ctx); code != 0 {
			return exitcode.Nof("--exec command exited %d", code)
		}
	}
	return nil
}

// WatchLoop renders on every catalog change until ctx ends, running --exec
// after each real change. Consul being unreachable is logged once per
// change of state; the last good file stays meanwhile.
func (r *Renderer) WatchLoop(ctx context.Context) error {
	client, err := api.NewClient(r.APIConfig)
	if err != nil {
		return exitcode.Wrap(exitcode.Usage, fmt.Errorf("consul client: %w", err))
	}
	var sel *Selection
	for backoff := retryBackoff; ; backoff = min(2*backoff, retryMaxBackoff) {
		sel, err = r.selection(ctx, client)
		if err == nil {
			break
		}
		if exitcode.Code(err) != exitcode.Unavailable || ctx.Err() != nil {
			return err
		}
		if backoff == retryBackoff {
			r.Log.Warn("consul unreachable, retrying; the existing file stays as it is", "err", err)
		}
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(backoff):
		}
	}
	r.changedCh = make(chan struct{}, 1)
	restore := r.captureLog()
	defer restore()
	runner, err := r.newRunner(sel, false)
	if err != nil {
		return err
	}
	go runner.Start()
	defer runner.Stop()
	go r.watchConsul(ctx, client)
	r.Log.Info("watching the catalog", "file", r.Config.Out, "datacenter", sel.Datacenter)
	for {
		select {
		case <-ctx.Done():
			return nil
		case err := <-runner.ErrCh:
			return r.classify(err)
		case <-r.changedCh:
			if r.Config.Exec != "" {
				r.exec(ctx)
			}
		}
	}
}

// watchConsul logs when the agent stops answering and when it answers
// again, once per change: consul-template's own retries are debug lines.
func (r *Renderer) watchConsul(ctx context.Context, client *api.Client) {
	up := true
	for {
		select {
		case <-ctx.Done():
			return
		case <-time.After(2 * time.Second):
		}
		_, err := client.Status().Leader()
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

func (r *Renderer) exec(ctx context.Context) int {
	r.Log.Info("running --exec after a change", "file", r.Config.Out)
	start := time.Now()
	code, err := watch.RunCommand(ctx, r.Config.Exec, r.Stdout, r.Stderr, nil)
	if err != nil {
		r.Log.Error("--exec command failed", "err", err)
		return 1
	}
	lvl := slog.LevelInfo
	if code != 0 {
		lvl = slog.LevelError
	}
	r.Log.Log(ctx, lvl, "--exec command finished", "exit_code", code, "duration", time.Since(start).Round(time.Millisecond))
	return code
}

// selection resolves the datacenter the data comes from: --datacenter, else
// the agent's own. An agent that refuses (ACL) leaves it unnamed; one that
// cannot be reached is exit 3.
func (r *Renderer) selection(ctx context.Context, client *api.Client) (*Selection, error) {
	sel := &Selection{
		Services:     r.Config.Services,
		ServiceRegex: r.Config.serviceRe,
		Dependencies: r.Deps,
	}
	// A token that may not read every service gets a catalog silently
	// filtered by ACLs: rendering it would hand Puppet a partial (often
	// empty) services.yaml. Refuse instead, unless the operator selected
	// services explicitly.
	if len(sel.Services) == 0 && sel.ServiceRegex == nil {
		q := (&api.QueryOptions{Datacenter: r.Config.Consul.Datacenter}).WithContext(ctx)
		svcs, meta, err := client.Catalog().Services(q)
		if err != nil {
			return nil, exitcode.Wrap(exitcode.Unavailable, fmt.Errorf("consul: %w", err))
		}
		// Every datacenter's catalog holds at least the servers' "consul"
		// service; an empty one means the token sees nothing (Consul does
		// not flag filtering for the anonymous token).
		if meta.ResultsFilteredByACLs || len(svcs) == 0 {
			return nil, exitcode.Wrap(exitcode.Unavailable, errors.New("consul: the token may not read every service (catalog filtered by ACLs); refusing to write partial hiera data (give the token service_prefix \"\" read and node_prefix \"\" read, or select services with --service)"))
		}
	}
	if dc := r.Config.Consul.Datacenter; dc != "" {
		sel.Datacenter, sel.QueryDatacenter = dc, true
		return sel, nil
	}
	self, err := client.Agent().Self()
	if err != nil {
		var se api.StatusError
		if errors.As(err, &se) && se.Code == 403 {
			r.Log.Debug("agent self refused, header names no datacenter", "err", err)
			return sel, nil
		}
		return nil, exitcode.Wrap(exitcode.Unavailable, fmt.Errorf("consul: %w", err))
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

// newRunner builds consul-template's configuration in code, as its
// manager/example_manager_test.go does, with our renderer and functions.
func (r *Renderer) newRunner(sel *Selection, once bool) (*manager.Runner, error) {
	funcs := NewFuncs(sel, r.Log)
	r.funcs = funcs
	tc := config.DefaultTemplateConfig()
	tc.Contents = config.String(r.Template)
	tc.Destination = config.String(r.Config.Out)
	tc.ExtFuncMap = funcs.FuncMap()
	tc.CreateDestDirs = config.Bool(true)
	// In --watch a failed render or write is logged and retried at the next
	// change, keeping the last good file; once mode reports it and exits.
	tc.ErrFatal = config.Bool(once)
	tc.Finalize()

	cfg := config.DefaultConfig()
	cfg.Once = once
	cfg.Templates = &config.TemplateConfigs{tc}
	cfg.RendererFunc = r.render
	cfg.Vault.Address = config.String("")
	cfg.Nomad.Address = config.String("")
	if !once && r.Config.wait != nil {
		cfg.Wait = r.Config.wait
	}
	cc := cfg.Consul
	ac := r.APIConfig
	cc.Address = config.String(ac.Address)
	cc.Token = config.String(ac.Token)
	cc.TokenFile = config.String(ac.TokenFile)
	if ac.Scheme == "https" && !strings.Contains(ac.Address, "://") {
		cc.Address = config.String("https://" + ac.Address)
	}
	if ac.Scheme == "https" || strings.HasPrefix(ac.Address, "https://") {
		cc.SSL.Enabled = config.Bool(true)
		cc.SSL.Verify = config.Bool(!ac.TLSConfig.InsecureSkipVerify)
		cc.SSL.CaCert = config.String(ac.TLSConfig.CAFile)
		cc.SSL.CaPath = config.String(ac.TLSConfig.CAPath)
		cc.SSL.Cert = config.String(ac.TLSConfig.CertFile)
		cc.SSL.Key = config.String(ac.TLSConfig.KeyFile)
		cc.SSL.ServerName = config.String(ac.TLSConfig.Address)
	}
	if once {
		// A watch handler runs again at the next change: fail fast.
		cc.Retry.Enabled = config.Bool(false)
	} else {
		cc.Retry.Enabled = config.Bool(true)
		cc.Retry.Attempts = config.Int(0) // unlimited
		cc.Retry.Backoff = config.TimeDuration(retryBackoff)
		cc.Retry.MaxBackoff = config.TimeDuration(retryMaxBackoff)
	}
	cfg.Finalize()
	runner, err := manager.NewRunner(cfg, false)
	if err != nil {
		// NewRunner parses the template: a broken --template is input.
		return nil, exitcode.Wrap(exitcode.Usage, fmt.Errorf("template: %w", err))
	}
	return runner, nil
}

// render is consul-template's RendererFunc: it checks the output is a YAML
// mapping, then writes it with WriteFile. Invalid output never reaches the
// file.
func (r *Renderer) render(in *ctrenderer.RenderInput) (*ctrenderer.RenderResult, error) {
	contents, trusted, err := r.funcs.Expand(in.Contents)
	if err == nil && !trusted {
		err = checkYAML(contents)
	}
	if err == nil && !r.holdsLock {
		var unlock func()
		unlock, err = watch.Lock(context.Background(), r.Config.LockFile, true)
		if err == nil {
			defer unlock()
		}
	}
	changed := false
	if err == nil {
		changed, err = WriteFile(in.Path, contents)
		if err != nil {
			// A file that cannot be written is the operator's --out,
			// not Consul.
			err = &InputError{Err: fmt.Errorf("--out: %w", err)}
		}
	}
	r.mu.Lock()
	r.lastErr = err
	if changed {
		r.changed = true
	}
	r.mu.Unlock()
	if err != nil {
		r.Log.Error("render failed, the file stays as it was", "file", in.Path, "err", err)
		return nil, err
	}
	if !changed {
		r.Log.Debug("hiera data rendered, content unchanged, file not touched", "file", in.Path)
	} else {
		r.Log.Info("hiera data written", "file", in.Path, "bytes", len(contents))
		select {
		case r.changedCh <- struct{}{}:
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

// classify maps a runner error: bad template output or input is exit 2,
// anything else came from talking to Consul (exit 3).
func (r *Renderer) classify(err error) error {
	var ie *InputError
	if errors.As(err, &ie) {
		return exitcode.Wrap(exitcode.Usage, err)
	}
	if exitcode.Code(err) != exitcode.Unavailable {
		return err
	}
	return exitcode.Wrap(exitcode.Unavailable, fmt.Errorf("render %s: %w", r.Config.Out, err))
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
		log.SetOutput(prevOut)
		log.SetFlags(prevFlags)
	}
}
