package hiera

import (
	"bytes"
	"context"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hashicorp/consul/api"
	"gopkg.in/yaml.v3"

	"github.com/jiocloud/orchestrate/internal/consultest"
	"github.com/jiocloud/orchestrate/internal/testutil"
)

// inst is one instance to register in the catalog on its own node.
type inst struct {
	node, nodeAddr string
	svc, id        string
	addr           string
	port           int
	tagged         map[string]string
	status         string // "" means no check
}

func register(t testing.TB, c *api.Client, i inst) {
	t.Helper()
	reg := &api.CatalogRegistration{
		Node:           i.node,
		Address:        i.nodeAddr,
		SkipNodeUpdate: false,
		Service: &api.AgentService{
			ID: i.id, Service: i.svc, Address: i.addr, Port: i.port,
		},
	}
	if reg.Service.ID == "" {
		reg.Service.ID = i.svc
	}
	if len(i.tagged) > 0 {
		reg.Service.TaggedAddresses = map[string]api.ServiceAddress{}
		for k, v := range i.tagged {
			reg.Service.TaggedAddresses[k] = api.ServiceAddress{Address: v, Port: i.port}
		}
	}
	if i.status != "" {
		reg.Check = &api.AgentCheck{
			Node: i.node, CheckID: "check-" + reg.Service.ID, Name: "check " + reg.Service.ID,
			Status: i.status, ServiceID: reg.Service.ID,
		}
	}
	if _, err := c.Catalog().Register(reg, nil); err != nil {
		t.Fatalf("register %+v: %v", i, err)
	}
}

// runHS runs hiera-services against the agent and returns exit code and stderr.
func runHS(t testing.TB, a *consultest.Agent, args ...string) (int, string) {
	t.Helper()
	var stdout, stderr bytes.Buffer
	args = append([]string{"--consul-addr", a.HTTPAddr, "--log-level", "debug"}, args...)
	code := Run(context.Background(), args, IO{Stdin: strings.NewReader(`{"consul": []}`), Stdout: &stdout, Stderr: &stderr})
	return code, stderr.String()
}

// readKeys parses a rendered file into a key map with Go values.
func readKeys(t testing.TB, path string) map[string]any {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var m map[string]any
	if err := yaml.Unmarshal(data, &m); err != nil {
		t.Fatalf("output does not parse as YAML: %v\n%s", err, data)
	}
	for k, v := range m {
		m[k] = hieraInterpolate(t, k, v)
	}
	return m
}

// hieraInterpolate does to a parsed value what Hiera's interpolation does
// to the values the renderer writes: it replaces %{literal('%')} with '%'.
// Any other %{...} fails the test: the renderer must never leave one that
// Hiera would resolve (lookup, alias, scope, a fact). The real-Puppet
// tests check the same against `puppet lookup` itself.
func hieraInterpolate(t testing.TB, key string, v any) any {
	t.Helper()
	switch v := v.(type) {
	case string:
		var b strings.Builder
		for rest := v; ; {
			i := strings.IndexByte(rest, '%')
			if i < 0 {
				b.WriteString(rest)
				return b.String()
			}
			b.WriteString(rest[:i])
			rest = rest[i:]
			switch {
			case strings.HasPrefix(rest, hieraLiteralPercent):
				b.WriteByte('%')
				rest = rest[len(hieraLiteralPercent):]
			case strings.HasPrefix(rest, "%{"):
				t.Errorf("key %q: value %q holds a Hiera interpolation", key, v)
				return v
			default:
				b.WriteByte('%')
				rest = rest[1:]
			}
		}
	case []any:
		out := make([]any, len(v))
		for i, e := range v {
			out[i] = hieraInterpolate(t, key, e)
		}
		return out
	}
	return v
}

func outPath(t testing.TB) string {
	return filepath.Join(t.TempDir(), "hiera", "services.yaml")
}

// logQuote renders s as slog's text handler writes an attribute value.
func logQuote(s string) string {
	var b bytes.Buffer
	l := slog.New(slog.NewTextHandler(&b, &slog.HandlerOptions{ReplaceAttr: func(_ []string, a slog.Attr) slog.Attr {
		if a.Key == "v" {
			return a
		}
		return slog.Attr{}
	}}))
	l.Info("", "v", s)
	out := strings.TrimSpace(b.String())
	return strings.TrimPrefix(out, "v=")
}

// connCounter samples a process's connections to the agent every
// millisecond until stop, and keeps the peak.
type connCounter struct {
	stopCh chan struct{}
	done   chan int
}

// stop ends sampling and returns the peak.
func (c *connCounter) stop() int {
	close(c.stopCh)
	return <-c.done
}

// countProcConns is countConns for the connections process pid holds: its
// socket descriptors, matched by inode in /proc/net/tcp.
func countProcConns(pid, port int) *connCounter {
	c := &connCounter{stopCh: make(chan struct{}), done: make(chan int, 1)}
	remote := fmt.Sprintf("0100007F:%04X", port)
	go func() {
		peak := 0
		for {
			mine := map[string]bool{}
			fds, _ := os.ReadDir(fmt.Sprintf("/proc/%d/fd", pid))
			for _, fd := range fds {
				link, err := os.Readlink(fmt.Sprintf("/proc/%d/fd/%s", pid, fd.Name()))
				if ino, ok := strings.CutPrefix(link, "socket:["); ok && err == nil {
					mine[strings.TrimSuffix(ino, "]")] = true
				}
			}
			if data, err := os.ReadFile("/proc/net/tcp"); err == nil && len(mine) > 0 {
				n := 0
				for _, line := range strings.Split(string(data), "\n") {
					// sl local remote st ... inode (field 9)
					if f := strings.Fields(line); len(f) > 9 && f[2] == remote && f[3] == "01" && mine[f[9]] {
						n++
					}
				}
				peak = max(peak, n)
			}
			select {
			case <-c.stopCh:
				c.done <- peak
				return
			case <-time.After(time.Millisecond):
			}
		}
	}()
	return c
}

// watching is an in-process `hiera-services --watch` run.
type watching struct {
	logs   *testutil.SyncBuffer
	cancel context.CancelFunc
	done   chan int
}

// startWatch runs `hiera-services --consul-addr addr --out out --watch`.
func startWatch(addr, out string) *watching {
	ctx, cancel := context.WithCancel(context.Background())
	w := &watching{logs: &testutil.SyncBuffer{}, cancel: cancel, done: make(chan int, 1)}
	go func() {
		w.done <- Run(ctx, []string{"--consul-addr", addr, "--out", out, "--watch"}, IO{Stdout: w.logs, Stderr: w.logs})
	}()
	return w
}

// stop ends the run and returns its exit code.
func (w *watching) stop(t testing.TB) int {
	t.Helper()
	w.cancel()
	select {
	case code := <-w.done:
		return code
	case <-time.After(15 * time.Second):
		t.Fatal("--watch did not stop")
		return -1
	}
}

var (
	hsBinOnce sync.Once
	hsBin     string
	hsBinErr  error
)

// hieraServicesBinary builds cmd/hiera-services once per test process.
func hieraServicesBinary(t testing.TB) string {
	t.Helper()
	hsBinOnce.Do(func() {
		dir, err := os.MkdirTemp("", "hiera-services-bin-")
		if err != nil {
			hsBinErr = err
			return
		}
		hsBin = filepath.Join(dir, "hiera-services")
		if out, err := exec.Command("go", "build", "-o", hsBin, "github.com/jiocloud/orchestrate/cmd/hiera-services").CombinedOutput(); err != nil {
			hsBinErr = fmt.Errorf("go build: %v\n%s", err, out)
		}
	})
	if hsBinErr != nil {
		t.Fatal(hsBinErr)
	}
	return hsBin
}
