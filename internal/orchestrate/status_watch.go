package orchestrate

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"strings"
	"sync"
	"time"

	"github.com/jiocloud/orchestrate/internal/exitcode"
	"github.com/jiocloud/orchestrate/internal/term"
)

const (
	// minRedrawGap is the least time between two screens: a fleet whose
	// records change many times a second (a flapping check) redraws once
	// a second, not on every change.
	minRedrawGap = time.Second
	// maxRetryGap caps the backoff of a blocking query Consul failed: 1 s,
	// 2 s, 4 s... up to 30 s, so an agent back after a restart is seen
	// within half a minute without hammering one that is down.
	maxRetryGap = 30 * time.Second
	// blockWait is how long a blocking query waits with no change: short
	// of Consul's 10 minute cap; it only bounds an idle request.
	blockWait = 5 * time.Minute
	// clearScreen moves the cursor home and clears the terminal.
	clearScreen = "\x1b[H\x1b[2J"
)

// watchSource is one blocking query of what the screen reads: it returns
// the query's index once it moves past index.
type watchSource func(ctx context.Context, index uint64) (uint64, error)

// consulState is the last failure of any watch source, shared between
// them and the redraw loop.
type consulState struct {
	mu    sync.Mutex
	err   error // guarded by mu; nil while the sources answer
	since time.Time
}

func (c *consulState) failed(err error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.err == nil {
		c.since = time.Now()
	}
	c.err = err
}

// answered clears the failure and reports whether there was one.
func (c *consulState) answered() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	was := c.err != nil
	c.err = nil
	return was
}

func (c *consulState) get() (error, time.Time) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.err, c.since
}

// watchStatus draws the screen, then again each time what it reads
// changes in Consul (blocking queries on the KV prefix and, unless
// --no-catalog, the catalog's nodes and checks), at most once per
// minRedrawGap, until ctx ends. Consul going away puts a line saying so
// over the last screen; the queries retry with backoff.
func watchStatus(ctx context.Context, e *env, o statusOptions) error {
	ctx, cancel := context.WithCancel(ctx)
	var wg sync.WaitGroup
	defer func() { cancel(); wg.Wait() }()
	changeCh := make(chan struct{}, 1)
	cs := &consulState{}
	for _, src := range statusSources(e, o) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			runWatchSource(ctx, src, cs, changeCh)
		}()
	}
	// Warnings would tear the screen: the alerts on it say the same.
	quiet := *e
	quiet.Stderr = io.Discard
	d := &redrawer{w: e.Stdout, errw: e.Stderr, tty: term.IsTerminal(e.Stdout), json: e.json}
	for {
		err := d.draw(ctx, &quiet, o, cs)
		if d.drawn == 1 && exitcode.Code(err) == exitcode.Usage && len(d.screen) == 0 {
			return err // a bad --role or --host: no screen to watch
		}
		last := time.Now()
		select {
		case <-ctx.Done():
			return nil
		case <-changeCh:
		}
		if !sleepCtx(ctx, time.Until(last.Add(minRedrawGap))) {
			return nil
		}
	}
}

// statusSources are the blocking queries of what the screen reads.
func statusSources(e *env, o statusOptions) []watchSource {
	out := []watchSource{func(ctx context.Context, index uint64) (uint64, error) {
		return e.store.WaitChange(ctx, index, blockWait)
	}}
	if o.noCatalog {
		return out
	}
	return append(out,
		func(ctx context.Context, index uint64) (uint64, error) {
			_, next, err := catalogNodes(ctx, e.client, index)
			return next, err
		},
		func(ctx context.Context, index uint64) (uint64, error) {
			_, next, err := healthChecks(ctx, e.client, index)
			return next, err
		})
}

// runWatchSource runs one blocking query after another, signalling
// changeCh when its index moves or Consul fails or comes back.
func runWatchSource(ctx context.Context, src watchSource, cs *consulState, changeCh chan<- struct{}) {
	var index uint64
	retry := time.Second
	for first := true; ctx.Err() == nil; {
		next, err := src(ctx, index)
		if ctx.Err() != nil {
			return
		}
		if err != nil {
			cs.failed(err)
			signal(changeCh)
			if !sleepCtx(ctx, retry) {
				return
			}
			retry, index = min(2*retry, maxRetryGap), 0
			continue
		}
		retry = time.Second
		if back := cs.answered(); back || (!first && next != index) {
			signal(changeCh)
		}
		if next < index {
			next = 0 // the index went back (a snapshot restore): start over
		}
		index, first = next, false
	}
}

// signal wakes the redraw loop, once however many changes come.
func signal(ch chan<- struct{}) {
	select {
	case ch <- struct{}{}:
	default:
	}
}

// sleepCtx waits d; false when ctx ended first.
func sleepCtx(ctx context.Context, d time.Duration) bool {
	if d <= 0 {
		return ctx.Err() == nil
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-t.C:
		return true
	}
}

// redrawer puts screens on the output: over the last on a terminal,
// after a separator line otherwise.
type redrawer struct {
	w, errw io.Writer
	tty     bool
	// json: a stream of documents, one per change, nothing between them
	// (Consul's absence is said on stderr).
	json   bool
	drawn  int
	screen []byte // the last screen drawn from Consul's answers
}

// draw reads and draws the screen; when Consul does not answer, the last
// screen stays under a line saying so. The error is drawStatus's.
func (d *redrawer) draw(ctx context.Context, e *env, o statusOptions, cs *consulState) error {
	width := term.Width(d.w)
	var buf bytes.Buffer
	err := drawStatus(ctx, e, o, &buf, width)
	if ctx.Err() != nil {
		return nil
	}
	var out bytes.Buffer
	s := screen{w: &out, width: width}
	failure, since := cs.get()
	switch {
	case err != nil && exitcode.Code(err) == exitcode.Unavailable:
		if failure == nil {
			failure, since = err, time.Now()
		}
	case err == nil || buf.Len() > 0:
		d.screen = buf.Bytes()
	}
	line := ""
	if failure != nil {
		line = fmt.Sprintf("! Consul is not answering since %s (retrying): %v", since.UTC().Format("15:04:05 UTC"), failure)
	}
	if d.json {
		return d.drawJSON(buf.Bytes(), line, err)
	}
	if line != "" {
		s.wrap(0, 3, line)
	}
	out.Write(d.screen)
	if err != nil && exitcode.Code(err) == exitcode.Usage && buf.Len() == 0 {
		s.wrap(0, 3, "! "+err.Error())
	}
	if d.tty {
		fmt.Fprint(d.w, clearScreen)
	} else if d.drawn > 0 {
		sep := "--- " + time.Now().UTC().Format("2006-01-02 15:04:05 UTC") + " " + dashes(width)
		fmt.Fprintln(d.w, sep[:width])
	}
	d.w.Write(out.Bytes())
	d.drawn++
	return err
}

// drawJSON writes a new document, or Consul's absence on stderr.
func (d *redrawer) drawJSON(doc []byte, failure string, err error) error {
	if failure != "" {
		fmt.Fprintf(d.errw, "orchestrate: %s\n", oneLine(strings.TrimPrefix(failure, "! ")))
		return err
	}
	d.w.Write(doc)
	d.drawn++
	return err
}

// dashes is a run of n dashes.
func dashes(n int) string {
	return string(bytes.Repeat([]byte("-"), max(n, 0)))
}
