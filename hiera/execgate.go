package hiera

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"math/rand/v2"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"time"

	"github.com/jiocloud/orchestrate/internal/fault"
	"github.com/jiocloud/orchestrate/internal/fileutil"
	"github.com/jiocloud/orchestrate/watch"
)

// DefaultSplay is the default window of --splay: a fleet's nodes start
// the --exec a change makes due spread over five seconds instead of in the
// same second, which costs one node at most five seconds.
const DefaultSplay = 5 * time.Second

// MaxSplay bounds --splay: a watch handler waits out its delay while its
// watch cannot fire again, and a longer window only delays Puppet.
const MaxSplay = 10 * time.Minute

// execGate decides when --exec runs: when the digest of what the node
// reads in --out (ExecDigest) differs from the one recorded in the state
// file after the last --exec. Recording after the run, not comparing with
// the file's previous content, means a run killed between writing the
// file and running --exec leaves it due for the next run, and lets one
// run take over the changes other runs wrote during its splay.
type execGate struct {
	out string
	// state holds the digest the last --exec ran on.
	state string
	// pending is the lock held by the run that will run --exec next,
	// from its first look through the splay to the end of --exec.
	pending string
	reads   *ReadSet // nil: the whole file
	splay   time.Duration
	log     *slog.Logger
}

// newExecGate returns the gate of --exec for the configuration.
func newExecGate(c *Config, deps Dependencies, log *slog.Logger) *execGate {
	g := &execGate{
		out:     c.Out,
		state:   filepath.Join(filepath.Dir(c.Out), "."+filepath.Base(c.Out)+".exec-state"),
		pending: c.LockFile + ".pending",
		splay:   c.Splay,
		log:     log,
	}
	if c.ReadsDeclared {
		g.reads = NewReadSet(c.Reads, c.readsRe, deps, c.Expect)
	}
	return g
}

// current is the digest of --out as it is now; a missing file digests as
// empty data.
func (g *execGate) current() (string, error) {
	data, err := os.ReadFile(g.out)
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		return "", fault.Input(fmt.Errorf("--out: %w", err))
	}
	d, err := ExecDigest(g.reads, data)
	if err != nil {
		return "", fault.Input(fmt.Errorf("--out %s: %w", g.out, err))
	}
	return d, nil
}

// init records the digest of --out as it is, when no state exists yet
// (the first run, or the first after an upgrade): --exec then runs when
// this run changes what the node reads, as it did before the state
// existed, and when it creates the file. Call holding the file lock.
func (g *execGate) init() error {
	fi, err := os.Lstat(g.state)
	if err == nil && !fi.Mode().IsRegular() {
		return fault.Inputf("--out's directory holds %s, which is not a regular file: hiera-services keeps the digest of what --exec last ran on there", g.state)
	}
	if !errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	d, err := g.current()
	if err != nil {
		return err
	}
	return g.record(d)
}

// validDigest matches what ExecDigest returns.
var validDigest = regexp.MustCompile(`\Asha256:[0-9a-f]{64}\z`)

// due reports whether --exec must run: the digest of --out now differs
// from the one the last --exec ran on. A state file that is missing or
// unreadable makes it due (with a warning): a run too many, never one
// lost. Call holding the file lock.
func (g *execGate) due() (digest string, due bool, err error) {
	d, err := g.current()
	if err != nil {
		return "", false, err
	}
	last, err := fileutil.ReadLimited(g.state, 1024)
	if err == nil && !validDigest.MatchString(strings.TrimSpace(string(last))) {
		err = errors.New("not a digest")
	}
	if err != nil {
		g.log.Warn("the record of the last --exec is unreadable: running --exec", "file", g.state, "err", err)
		return d, true, nil
	}
	return d, strings.TrimSpace(string(last)) != d, nil
}

// record notes that --exec ran on data of this digest.
func (g *execGate) record(digest string) error {
	if _, err := WriteFile(g.state, []byte(digest+"\n")); err != nil {
		return fault.Input(fmt.Errorf("--out's directory: %w", err))
	}
	return nil
}

// delay is a random delay within the splay window.
func (g *execGate) delay() time.Duration {
	if g.splay <= 0 {
		return 0
	}
	return rand.N(g.splay)
}

// claim takes the pending lock without waiting. ok is false when another
// run holds it: that run looks at the file again after this one wrote it,
// and runs --exec on the latest data.
func (g *execGate) claim(ctx context.Context) (release func(), ok bool, err error) {
	release, err = watch.Lock(ctx, g.pending, false)
	switch {
	case errors.Is(err, watch.ErrLocked):
		return nil, false, nil
	case err != nil:
		return nil, false, fault.Input(fmt.Errorf("--lock-file: %w", err))
	}
	return release, true, nil
}

// fileLock is --lock-file, which a run takes, may give up during the
// splay, and takes again.
type fileLock struct {
	path   string
	unlock func()
}

// take waits for the lock. Failing to make the lock file is the
// operator's --lock-file (or --out's directory); ctx ending first is
// unavailable, as a render cut short.
func (l *fileLock) take(ctx context.Context) error {
	unlock, err := watch.Lock(ctx, l.path, true)
	if err != nil {
		if ctx.Err() != nil {
			return fault.Unavailable(err)
		}
		return fault.Input(fmt.Errorf("--lock-file: %w", err))
	}
	l.unlock = unlock
	return nil
}

// release gives the lock up; it does nothing when the lock is not held.
func (l *fileLock) release() {
	if l.unlock != nil {
		l.unlock()
		l.unlock = nil
	}
}
