package hiera

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jiocloud/orchestrate/internal/consulclient"
	"github.com/jiocloud/orchestrate/internal/consulclient/ctconfig"
	"github.com/jiocloud/orchestrate/internal/exitcode"
	"github.com/jiocloud/orchestrate/internal/fault"
	"github.com/jiocloud/orchestrate/watch"
)

// fileRun is one run of hiera-services: a Renderer whose sink is --out,
// with --exec run when what the node reads changed.
type fileRun struct {
	c    *Config
	r    *Renderer
	sink *FileSink
	// gate decides when --exec runs; nil without --exec.
	gate *execGate
	log  *slog.Logger
	// stdout and stderr receive the --exec command's output.
	stdout, stderr io.Writer
}

// newFileRun wires a Renderer to the configuration's Consul connection,
// selection and output file.
func newFileRun(c *Config, tmpl string, deps Dependencies, logger *slog.Logger, stdio IO) (*fileRun, error) {
	apiCfg, err := c.Consul.Config()
	if err != nil {
		return nil, err
	}
	client, err := consulclient.NewClient(apiCfg)
	if err != nil {
		return nil, err
	}
	sink := &FileSink{Path: c.Out, LockFile: c.LockFile}
	r := &Renderer{
		Template:     tmpl,
		Services:     c.Services,
		ServiceRegex: c.serviceRe,
		Dependencies: deps,
		Expect:       c.Expect,
		Datacenter:   c.Consul.Datacenter,
		Client:       client,
		Consul:       ctconfig.Consul(apiCfg),
		Wait:         c.wait,
		Sink:         sink,
		Dest:         c.Out,
		Log:          logger,
	}
	if c.Feed {
		r.FeedPrefix = c.Prefix
	}
	f := &fileRun{c: c, r: r, sink: sink, log: logger, stdout: stdio.Stdout, stderr: stdio.Stderr}
	if c.Exec != "" {
		f.gate = newExecGate(c, deps, logger)
	}
	return f, nil
}

func readPayload(r io.Reader) ([]byte, error) { return watch.ReadPayload(r) }

// once renders one time under --lock-file and writes the file if it
// changed; then --exec runs if it is due (see execWhenDue), the splay
// ending with a second render so that it runs on the latest data.
func (f *fileRun) once(ctx context.Context) error {
	sel, err := f.r.Selection(ctx)
	if err != nil {
		return err
	}
	lk := &fileLock{path: f.c.LockFile}
	if err := lk.take(ctx); err != nil {
		return err
	}
	defer lk.release()
	f.sink.Locked = true
	if f.gate != nil {
		if err := f.gate.init(); err != nil {
			return err
		}
	}
	if _, err := f.r.Once(ctx, sel); err != nil || f.gate == nil {
		return err
	}
	return f.execWhenDue(ctx, lk, func(ctx context.Context) error {
		_, err := f.r.Once(ctx, sel)
		return err
	})
}

// execWhenDue runs --exec when what the node reads changed since the last
// --exec (execGate.due). With a splay it first waits a random delay within
// the window, holding the pending lock but not lk, so that runs for other
// changes write the file meanwhile and leave --exec to this one (they find
// the pending lock taken); then refresh (nil: none) brings the file up to
// date and --exec runs, holding lk, on the latest data. A run that finds
// the pending lock taken returns at once. Call holding lk; it is held
// again on return.
func (f *fileRun) execWhenDue(ctx context.Context, lk *fileLock, refresh func(context.Context) error) error {
	g := f.gate
	digest, due, err := g.due()
	if err != nil || !due {
		return err
	}
	var refreshErr error
	if g.splay > 0 {
		release, ok, err := g.claim(ctx)
		if err != nil {
			return err
		}
		if !ok {
			f.log.Debug("--exec is due; the run already waiting its splay runs it on this data or newer")
			return nil
		}
		// Deferred after the caller's unlock of lk, so released first,
		// while lk is held: a run that writes the file after this one's
		// last look finds the pending lock free and runs --exec itself.
		defer release()
		lk.release()
		delay := g.delay()
		f.log.Info("--exec is due: waiting the splay", "delay", delay.Round(time.Millisecond), "splay", g.splay)
		select {
		case <-ctx.Done():
			return fault.Unavailable(fmt.Errorf("stopped before --exec: %w", ctx.Err()))
		case <-time.After(delay):
		}
		if err := lk.take(ctx); err != nil {
			return err
		}
		if refresh != nil {
			if refreshErr = refresh(ctx); refreshErr != nil && ctx.Err() == nil {
				f.log.Warn("render after the splay failed: --exec runs on the data written before it", "err", refreshErr)
			}
		}
		if ctx.Err() != nil {
			return fault.Unavailable(fmt.Errorf("stopped before --exec: %w", ctx.Err()))
		}
		if digest, due, err = g.due(); err != nil || !due {
			return errors.Join(err, refreshErr)
		}
	}
	code := f.exec(ctx)
	if ctx.Err() != nil {
		// Not recorded: the next run finds --exec still due.
		return fault.Unavailable(fmt.Errorf("--exec stopped: %w", ctx.Err()))
	}
	// Recorded whatever its exit code, as a failed run was before: a
	// failing eventual step runs again at the next relevant change, not
	// at every render.
	if err := g.record(digest); err != nil {
		return err
	}
	if code != 0 {
		return exitcode.Nof("--exec command exited %d", code)
	}
	return refreshErr
}

// watch renders on every catalog change until ctx ends; the last good
// file stays while Consul is unreachable. With --exec, a goroutine runs
// it when due after each render that changed the file (and after the
// first render), so renders go on during the splay.
func (f *fileRun) watch(ctx context.Context) error {
	if f.gate == nil {
		return f.r.Watch(ctx, nil)
	}
	lk := &fileLock{path: f.c.LockFile}
	if err := lk.take(ctx); err != nil {
		return err
	}
	err := f.gate.init()
	lk.release()
	if err != nil {
		return err
	}
	kickCh := make(chan struct{}, 1)
	f.r.Sink = &kickSink{FileSink: f.sink, kickCh: kickCh}
	execCtx, cancel := context.WithCancel(ctx)
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		f.runExecs(execCtx, kickCh)
	}()
	err = f.r.Watch(ctx, nil)
	cancel()
	wg.Wait()
	return err
}

// runExecs runs --exec when due each time kickCh fires, until ctx ends.
// A failure is logged; it never stops the watch.
func (f *fileRun) runExecs(ctx context.Context, kickCh <-chan struct{}) {
	for {
		select {
		case <-ctx.Done():
			return
		case <-kickCh:
		}
		lk := &fileLock{path: f.c.LockFile}
		err := lk.take(ctx)
		if err == nil {
			err = f.execWhenDue(ctx, lk, nil)
			lk.release()
		}
		// A failing command was logged with its exit code already.
		if err != nil && ctx.Err() == nil && exitcode.Code(err) != exitcode.No {
			f.log.Error("--exec not run", "err", err)
		}
	}
}

// kickSink is --watch's sink with --exec: it signals kickCh after the
// first publish and after each one that changed the file.
type kickSink struct {
	*FileSink
	kickCh    chan struct{}
	published atomic.Bool
}

// Publish writes data as FileSink does, then signals.
func (s *kickSink) Publish(ctx context.Context, data []byte) (bool, error) {
	changed, err := s.FileSink.Publish(ctx, data)
	if first := !s.published.Swap(true); err == nil && (changed || first) {
		select {
		case s.kickCh <- struct{}{}:
		default:
		}
	}
	return changed, err
}

// exec runs --exec and returns its exit code, 1 when it could not start.
func (f *fileRun) exec(ctx context.Context) int {
	f.log.Info("running --exec after a change", "file", f.c.Out)
	start := time.Now()
	code, err := watch.RunCommand(ctx, f.c.Exec, f.stdout, f.stderr, watch.ChildEnv(os.Environ(), f.c.PassEnv))
	if err != nil {
		f.log.Error("--exec command failed", "err", err)
		return 1
	}
	lvl := slog.LevelInfo
	if code != 0 {
		lvl = slog.LevelError
	}
	f.log.Log(ctx, lvl, "--exec command finished", "exit_code", code, "duration", time.Since(start).Round(time.Millisecond))
	return code
}
