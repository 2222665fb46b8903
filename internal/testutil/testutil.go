// Package testutil holds small helpers shared by tests that run real tools.
package testutil

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"sync"
	"testing"
	"time"
)

// RequirePuppet returns the path of Debian's puppet. When it is missing the
// test is skipped with a message saying how to install it, except under
// CI=true, where it fails: CI must never count a skipped Puppet test as
// passing.
func RequirePuppet(t testing.TB) string {
	t.Helper()
	p, err := exec.LookPath("puppet")
	if err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatalf("CI=true and no puppet binary (make test-deps installs Debian's puppet): %v", err)
		}
		t.Skipf("skipping: no puppet binary (make test-deps, or apt-get install puppet): %v", err)
	}
	return p
}

// SyncBuffer is a bytes.Buffer that a writer (a logger, a command) and a
// reader may use at the same time.
type SyncBuffer struct {
	mu sync.Mutex // guards b
	b  bytes.Buffer
}

// Write appends p.
func (s *SyncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

// String returns what was written so far.
func (s *SyncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// Eventually polls cond every 20 ms until it holds, and returns how long
// that took. When it does not hold within limit, the test fails naming
// what it waited for, with detail's text (the file, the agent log...) when
// given.
func Eventually(t testing.TB, limit time.Duration, what string, cond func() bool, detail ...func() string) time.Duration {
	t.Helper()
	start := time.Now()
	for !cond() {
		if time.Since(start) > limit {
			msg := fmt.Sprintf("timed out after %s waiting for %s", limit, what)
			for _, d := range detail {
				msg += "\n" + d()
			}
			t.Fatal(msg)
		}
		time.Sleep(20 * time.Millisecond)
	}
	return time.Since(start)
}
