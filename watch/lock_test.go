package watch

import (
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

func TestLockExcludesAndReleases(t *testing.T) {
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "sub", "run.lock")
	unlock, err := Lock(ctx, path, false)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := Lock(ctx, path, false); !errors.Is(err, ErrLocked) {
		t.Fatalf("second Lock without wait = %v, want ErrLocked", err)
	}
	got := make(chan error, 1)
	go func() {
		u, err := Lock(ctx, path, true)
		if err == nil {
			u()
		}
		got <- err
	}()
	select {
	case err := <-got:
		t.Fatalf("waiting Lock returned %v while the lock was held", err)
	case <-time.After(300 * time.Millisecond):
	}
	unlock()
	unlock() // idempotent
	select {
	case err := <-got:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("waiting Lock did not get the lock after unlock")
	}
}

func TestLockWaitHonoursContext(t *testing.T) {
	path := filepath.Join(t.TempDir(), "run.lock")
	unlock, err := Lock(context.Background(), path, false)
	if err != nil {
		t.Fatal(err)
	}
	defer unlock()
	ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel()
	if _, err := Lock(ctx, path, true); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Lock = %v, want deadline exceeded", err)
	}
}

// TestLockAcrossProcesses holds the lock in a real second process (flock(1)
// from util-linux) and checks this process is kept out until it exits.
func TestLockAcrossProcesses(t *testing.T) {
	flock, err := exec.LookPath("flock")
	if err != nil {
		t.Skip("flock(1) not installed")
	}
	path := filepath.Join(t.TempDir(), "run.lock")
	if err := os.WriteFile(path, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(flock, path, "sh", "-c", "echo held; sleep 1")
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, 5)
	if _, err := out.Read(buf); err != nil || !strings.HasPrefix(string(buf), "held") {
		t.Fatalf("flock child did not report holding the lock: %q %v", buf, err)
	}
	if _, err := Lock(context.Background(), path, false); !errors.Is(err, ErrLocked) {
		t.Fatalf("Lock while another process holds it = %v, want ErrLocked", err)
	}
	start := time.Now()
	unlock, err := Lock(context.Background(), path, true)
	if err != nil {
		t.Fatal(err)
	}
	unlock()
	if waited := time.Since(start); waited < 300*time.Millisecond {
		t.Fatalf("got the lock after %v, before the other process released it", waited)
	}
	_ = cmd.Wait()
}
