package hiera

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
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

// peakSampler calls read every millisecond until stop, and keeps the
// largest reading.
type peakSampler struct {
	stopCh chan struct{}
	done   chan int
}

func samplePeak(read func() int) *peakSampler {
	p := &peakSampler{stopCh: make(chan struct{}), done: make(chan int, 1)}
	go func() {
		peak := 0
		for {
			peak = max(peak, read())
			select {
			case <-p.stopCh:
				p.done <- peak
				return
			case <-time.After(time.Millisecond):
			}
		}
	}()
	return p
}

// stop ends sampling and returns the peak.
func (p *peakSampler) stop() int {
	close(p.stopCh)
	return <-p.done
}

// countProcConns samples the connections process pid holds to the agent
// on port: its socket descriptors, matched by inode in /proc/net/tcp.
func countProcConns(pid, port int) *peakSampler {
	remote := fmt.Sprintf("0100007F:%04X", port)
	return samplePeak(func() int {
		mine := map[string]bool{}
		fds, _ := os.ReadDir(fmt.Sprintf("/proc/%d/fd", pid))
		for _, fd := range fds {
			link, err := os.Readlink(fmt.Sprintf("/proc/%d/fd/%s", pid, fd.Name()))
			if ino, ok := strings.CutPrefix(link, "socket:["); ok && err == nil {
				mine[strings.TrimSuffix(ino, "]")] = true
			}
		}
		data, err := os.ReadFile("/proc/net/tcp")
		if err != nil || len(mine) == 0 {
			return 0
		}
		n := 0
		for _, line := range strings.Split(string(data), "\n") {
			// sl local remote st ... inode (field 9)
			if f := strings.Fields(line); len(f) > 9 && f[2] == remote && f[3] == "01" && mine[f[9]] {
				n++
			}
		}
		return n
	})
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

// countingProxy forwards TCP connections to an agent, counting the bytes
// the agent sends and the connections open at once.
type countingProxy struct {
	addr      string
	fromAgent atomic.Int64
	open      atomic.Int64
	peak      atomic.Int64
	// acceptErrs and dialErrs count what the proxy itself failed at (out
	// of file descriptors, the agent refusing): a tool behind a proxy that
	// stopped accepting would look as if it never rendered. firstErr is
	// the first such error.
	acceptErrs, dialErrs atomic.Int64
	firstErr             atomic.Pointer[string]
}

// problem says what the proxy failed at, or "" when nothing.
func (p *countingProxy) problem() string {
	a, d := p.acceptErrs.Load(), p.dialErrs.Load()
	if a == 0 && d == 0 {
		return ""
	}
	first := ""
	if e := p.firstErr.Load(); e != nil {
		first = *e
	}
	return fmt.Sprintf("the proxy failed %d accepts and %d dials (first: %s)", a, d, first)
}

func (p *countingProxy) failed(n *atomic.Int64, err error) {
	n.Add(1)
	msg := err.Error()
	p.firstErr.CompareAndSwap(nil, &msg)
}

// newCountingProxy listens on 127.0.0.1 and forwards every connection to
// target until the test or benchmark ends.
func newCountingProxy(b testing.TB, target string) *countingProxy {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	p := &countingProxy{addr: ln.Addr().String()}
	b.Cleanup(func() { ln.Close() })
	go func() {
		// As net/http's server does: an accept that fails for want of a
		// resource (EMFILE) is retried after a pause, never the end of
		// the proxy; only closing the listener ends it.
		pause := 5 * time.Millisecond
		for {
			c, err := ln.Accept()
			if errors.Is(err, net.ErrClosed) {
				return
			}
			if err != nil {
				p.failed(&p.acceptErrs, err)
				time.Sleep(pause)
				pause = min(2*pause, time.Second)
				continue
			}
			pause = 5 * time.Millisecond
			go p.serve(c, target)
		}
	}()
	return p
}

func (p *countingProxy) serve(c net.Conn, target string) {
	defer c.Close()
	up, err := net.Dial("tcp", target)
	if err != nil {
		p.failed(&p.dialErrs, err)
		return
	}
	defer up.Close()
	n := p.open.Add(1)
	defer p.open.Add(-1)
	for m := p.peak.Load(); n > m && !p.peak.CompareAndSwap(m, n); m = p.peak.Load() {
	}
	// Neither direction may splice: Go splices TCP to TCP through a pipe
	// (two more descriptors) held while the copy blocks, and a connection
	// that holds a blocking query blocks for minutes, so 5,000 of them
	// took this process to its limit of 20,000 descriptors (the accepts
	// failed with EMFILE, and consul-template looked as if it never
	// rendered). Plain reads and writes keep it at two a connection.
	go func() { _, _ = io.Copy(struct{ io.Writer }{up}, struct{ io.Reader }{c}); up.Close() }()
	_, _ = io.Copy(countingWriter{c, &p.fromAgent}, up)
}

// keysIfAny is readKeys, or nil while the file does not exist.
func keysIfAny(t *testing.T, path string) map[string]any {
	if _, err := os.Stat(path); err != nil {
		return nil
	}
	return readKeys(t, path)
}

// tail is the last n bytes of s.
func tail(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[len(s)-n:]
}

// hostile are strings that break naive YAML: every indicator character,
// a newline, YAML 1.1 scalars that are not strings, very long and unicode
// text, and names that look like other keys.
var hostile = []string{
	"a: b", "# c", "- d", "[e]", "{f}", "&g", "*h", "!i", "|j", ">k", "'l'", `"m"`, "%n", "@o",
	"p\nq: r", "services::mysql::address", "healthy_services::x::address: [1.2.3.4]",
	"yes", "no", "on", "null", "~", "1:20", "2001-12-14", "0x1F", ".inf", "",
	"ünïcödé-ßervice", "\u2028", "tab\there", `back\slash`, "trailing ",
	strings.Repeat("long-", 80),
	// Hiera interpolation: each must read back as these characters, never
	// as the value of another key or a fact.
	"%{x}", "%{lookup('x')}", `%{lookup("secret")}`, "%{alias('secret')}", "%{scope('x')}", "%{}",
	"%%{x}", "%", "%{::fqdn}", "%{literal('%')}", "%{hiera('secret')}", "a%{facts.fqdn}b",
	// Names Hiera cannot look up as written: '.' digs into a hash, '::'
	// is Puppet's scope separator.
	"dotted.name", "scoped::name",
}

// strs is s as the []any a parsed YAML list is.
func strs(s ...string) []any {
	out := make([]any, len(s))
	for i, v := range s {
		out[i] = v
	}
	return out
}

// ints is n as the []any a parsed YAML list is.
func ints(n ...int) []any {
	out := make([]any, len(n))
	for i, v := range n {
		out[i] = v
	}
	return out
}

// diffKeys fails t for every key of got and want whose values differ or
// that only one of them holds.
func diffKeys(t *testing.T, got, want map[string]any) {
	t.Helper()
	for k, w := range want {
		if g, ok := got[k]; !ok {
			t.Errorf("missing key %q (want %v)", k, w)
		} else if !reflect.DeepEqual(g, w) {
			t.Errorf("key %q = %#v, want %#v", k, g, w)
		}
	}
	for k, g := range got {
		if _, ok := want[k]; !ok {
			t.Errorf("unexpected key %q = %#v", k, g)
		}
	}
}

// countingWriter counts what passes through it as it passes.
type countingWriter struct {
	w io.Writer
	n *atomic.Int64
}

func (c countingWriter) Write(b []byte) (int, error) {
	n, err := c.w.Write(b)
	c.n.Add(int64(n))
	return n, err
}

// vmHWM is process pid's peak resident memory in KiB (VmHWM in
// /proc/PID/status), or 0 once it has exited. It is the peak of the
// process's own memory since its exec: wait4's ru_maxrss is not, since Go
// starts a child sharing its memory (CLONE_VM) and Linux carries that
// memory's peak, the test process's own, into the child's at exec (every
// tool read 57.34 MiB in one run, the test process's figure).
func vmHWM(pid int) int {
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0
	}
	for _, line := range strings.Split(string(data), "\n") {
		if v, ok := strings.CutPrefix(line, "VmHWM:"); ok {
			n, _ := strconv.Atoi(strings.TrimSuffix(strings.TrimSpace(v), " kB"))
			return n
		}
	}
	return 0
}
