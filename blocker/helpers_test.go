package blocker

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hashicorp/consul/api"

	"github.com/jiocloud/orchestrate/internal/consultest"

	"github.com/jiocloud/orchestrate/internal/cli"
)

var binDir string

func TestMain(m *testing.M) {
	code := m.Run()
	if binDir != "" {
		os.RemoveAll(binDir)
	}
	os.Exit(code)
}

var (
	buildOnce sync.Once
	buildPath string
	buildErr  error
)

// binary builds cmd/service-blocker once per test binary and returns its path.
func binary(t testing.TB) string {
	t.Helper()
	buildOnce.Do(func() {
		dir, err := os.MkdirTemp("", "service-blocker-test-")
		if err != nil {
			buildErr = err
			return
		}
		binDir = dir
		buildPath = filepath.Join(dir, "service-blocker")
		cmd := exec.Command("go", "build", "-o", buildPath, "github.com/jiocloud/orchestrate/cmd/service-blocker")
		out, err := cmd.CombinedOutput()
		if err != nil {
			buildErr = fmt.Errorf("go build: %v\n%s", err, out)
		}
	})
	if buildErr != nil {
		t.Fatal(buildErr)
	}
	return buildPath
}

// result is one run of the command.
type result struct {
	code           int
	stdout, stderr string
	elapsed        time.Duration
}

// run calls Run in-process.
func runCLI(t testing.TB, args ...string) result {
	t.Helper()
	var out, errb bytes.Buffer
	start := time.Now()
	code := Run(context.Background(), args, cli.IO{Stdout: &out, Stderr: &errb})
	r := result{code: code, stdout: out.String(), stderr: errb.String(), elapsed: time.Since(start)}
	t.Logf("service-blocker %s -> exit %d in %s\nstdout:\n%sstderr:\n%s", strings.Join(args, " "), r.code, r.elapsed.Round(time.Millisecond), r.stdout, r.stderr)
	return r
}

// service is one instance to register on the agent.
type service struct {
	id, name string
	port     int
	tags     []string
	// ttl, when set, gives the instance a TTL check starting in that state.
	ttl string
}

func register(t testing.TB, a *consultest.Agent, s service) {
	t.Helper()
	reg := &api.AgentServiceRegistration{
		ID: s.id, Name: s.name, Port: s.port, Address: "127.0.0.1", Tags: s.tags,
	}
	if s.ttl != "" {
		reg.Check = &api.AgentServiceCheck{CheckID: s.id + "-ttl", TTL: "10m", Status: s.ttl}
	}
	if err := a.Client.Agent().ServiceRegister(reg); err != nil {
		t.Fatalf("register %s: %v", s.id, err)
	}
}

// registerN registers n instances of name on ports base+1..base+n.
func registerN(t testing.TB, a *consultest.Agent, name string, n, base int) {
	t.Helper()
	for i := 1; i <= n; i++ {
		register(t, a, service{id: fmt.Sprintf("%s-%d", name, i), name: name, port: base + i})
	}
}

// waitCatalog waits until the catalog holds want healthy-enough instances of
// name (what Consul DNS would return), so a negative test does not race the
// agent's sync.
func waitCatalog(t testing.TB, a *consultest.Agent, name, dc string, want int) {
	t.Helper()
	deadline := time.Now().Add(15 * time.Second)
	for {
		entries, _, err := a.Client.Health().Service(name, "", false, &api.QueryOptions{Datacenter: dc})
		n := 0
		for _, e := range entries {
			if e.Checks.AggregatedStatus() != api.HealthCritical {
				n++
			}
		}
		if err == nil && n == want {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("catalog has %d instances of %s in %q, want %d (err %v)", n, name, dc, want, err)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// endpointLines returns stdout's endpoint lines for service.
func endpointLines(out, service string) []string {
	var lines []string
	for _, l := range strings.Split(strings.TrimSpace(out), "\n") {
		if strings.HasPrefix(l, service+" ") {
			lines = append(lines, l)
		}
	}
	return lines
}

func slogText(w io.Writer) *slog.Logger {
	return slog.New(slog.NewTextHandler(w, nil))
}
