package hiera

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"os"
	"time"

	"github.com/jiocloud/orchestrate/internal/consulclient"
	"github.com/jiocloud/orchestrate/internal/consulclient/ctconfig"
	"github.com/jiocloud/orchestrate/internal/exitcode"
	"github.com/jiocloud/orchestrate/internal/fault"
	"github.com/jiocloud/orchestrate/watch"
)

// fileRun is one run of hiera-services: a Renderer whose sink is --out,
// with --exec run after each change.
type fileRun struct {
	c    *Config
	r    *Renderer
	sink *FileSink
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
	return &fileRun{c: c, r: r, sink: sink, log: logger, stdout: stdio.Stdout, stderr: stdio.Stderr}, nil
}

func readPayload(r io.Reader) ([]byte, error) { return watch.ReadPayload(r) }

// once renders one time under --lock-file: write if changed, then run
// --exec if it changed.
func (f *fileRun) once(ctx context.Context) error {
	sel, err := f.r.Selection(ctx)
	if err != nil {
		return err
	}
	unlock, err := watch.Lock(ctx, f.c.LockFile, true)
	if err != nil {
		if ctx.Err() != nil {
			return fault.Unavailable(err)
		}
		// The lock file cannot be made: the operator's --lock-file (or
		// --out's directory), not Consul.
		return fault.Input(fmt.Errorf("--lock-file: %w", err))
	}
	defer unlock()
	f.sink.Locked = true
	changed, err := f.r.Once(ctx, sel)
	if err != nil || !changed || f.c.Exec == "" {
		return err
	}
	if code := f.exec(ctx); code != 0 {
		return exitcode.Nof("--exec command exited %d", code)
	}
	return nil
}

// watch renders on every catalog change until ctx ends, running --exec
// after each real change; the last good file stays while Consul is
// unreachable.
func (f *fileRun) watch(ctx context.Context) error {
	var onChange func(context.Context)
	if f.c.Exec != "" {
		onChange = func(ctx context.Context) { f.exec(ctx) }
	}
	return f.r.Watch(ctx, onChange)
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
