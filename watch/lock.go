package watch

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"syscall"
	"time"
)

// ErrLocked is returned by Lock with wait=false when another process holds
// the lock.
var ErrLocked = errors.New("another run holds the lock")

// lockPoll is how often a waiting Lock retries. flock has no timed wait;
// 100ms keeps a queued Consul watch handler responsive at negligible cost.
const lockPoll = 100 * time.Millisecond

// Lock takes an exclusive flock(2) on path, creating it (and its directory)
// when needed, so overlapping invocations of a watch handler run one at a
// time. With wait it blocks until the lock is free or ctx ends; without, it
// returns ErrLocked at once. The kernel drops the lock if the process dies,
// so a crashed run never wedges the next one. Call unlock when done; it is
// safe to call more than once.
func Lock(ctx context.Context, path string, wait bool) (unlock func(), err error) {
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return nil, fmt.Errorf("lock %s: %w", path, err)
	}
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o644)
	if err != nil {
		return nil, fmt.Errorf("lock %s: %w", path, err)
	}
	for {
		err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB)
		if err == nil {
			break
		}
		if !errors.Is(err, syscall.EWOULDBLOCK) {
			f.Close()
			return nil, fmt.Errorf("lock %s: %w", path, err)
		}
		if !wait {
			f.Close()
			return nil, fmt.Errorf("lock %s: %w", path, ErrLocked)
		}
		select {
		case <-ctx.Done():
			f.Close()
			return nil, fmt.Errorf("lock %s: %w", path, ctx.Err())
		case <-time.After(lockPoll):
		}
	}
	done := false
	return func() {
		if done {
			return
		}
		done = true
		_ = syscall.Flock(int(f.Fd()), syscall.LOCK_UN)
		f.Close()
	}, nil
}
