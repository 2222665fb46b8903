package blocker

import (
	"bytes"
	"errors"
	"fmt"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/jiocloud/orchestrate/internal/consultest"
)

// execBlocker runs the built binary.
func execBlocker(t *testing.T, args ...string) result {
	t.Helper()
	cmd := exec.Command(binary(t), args...)
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	start := time.Now()
	err := cmd.Run()
	r := result{stdout: out.String(), stderr: errb.String(), elapsed: time.Since(start)}
	var ee *exec.ExitError
	switch {
	case errors.As(err, &ee):
		r.code = ee.ExitCode()
	case err != nil:
		t.Fatalf("run service-blocker: %v", err)
	}
	t.Logf("bin/service-blocker %s -> exit %d in %s\nstdout:\n%sstderr:\n%s", strings.Join(args, " "), r.code, r.elapsed.Round(time.Millisecond), r.stdout, r.stderr)
	return r
}

// The "Done when", against the built binary and a dev agent with 5
// passing instances of web.
func TestDoneWhen(t *testing.T) {
	binary(t) // build before the clock matters
	a := consultest.Start(t, consultest.Options{})
	for i := 1; i <= 5; i++ {
		register(t, a, service{id: fmt.Sprintf("web-%d", i), name: "web", port: 8080 + i, ttl: "passing"})
	}
	waitCatalog(t, a, "web", "", 5)

	t.Run("web:5 exits 0 within a second with 5 endpoints", func(t *testing.T) {
		r := execBlocker(t, "--dns", a.DNSAddr, "--consul-addr", a.HTTPAddr, "web:5")
		if r.code != 0 {
			t.Fatalf("exit %d, want 0", r.code)
		}
		if r.elapsed > time.Second {
			t.Fatalf("took %s, want under a second", r.elapsed)
		}
		if got := endpointLines(r.stdout, "web"); len(got) != 5 {
			t.Fatalf("%d endpoints printed, want 5", len(got))
		}
	})
	t.Run("web:6 --timeout 3s exits 1 after about 3s naming web: 5/6", func(t *testing.T) {
		r := execBlocker(t, "--dns", a.DNSAddr, "--consul-addr", a.HTTPAddr, "web:6", "--timeout", "3s")
		if r.code != 1 {
			t.Fatalf("exit %d, want 1", r.code)
		}
		if r.elapsed < 3*time.Second || r.elapsed > 4*time.Second {
			t.Fatalf("took %s, want about 3s", r.elapsed)
		}
		if !strings.Contains(r.stderr, "web: 5/6") {
			t.Fatalf("stderr does not name web: 5/6")
		}
	})
	t.Run("--dns 127.0.0.1:1 --timeout 2s web exits 3", func(t *testing.T) {
		r := execBlocker(t, "--dns", "127.0.0.1:1", "--timeout", "2s", "web")
		if r.code != 3 {
			t.Fatalf("exit %d, want 3", r.code)
		}
		if !strings.Contains(r.stderr, "DNS never answered") {
			t.Fatalf("stderr does not say DNS never answered")
		}
	})
}
