package blocker

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"log"
	"log/slog"
	"net"
	"net/http"
	"net/http/httputil"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hashicorp/consul/api"
	"github.com/miekg/dns"

	"github.com/jiocloud/orchestrate/internal/cli"
	"github.com/jiocloud/orchestrate/internal/consultest"
	"github.com/jiocloud/orchestrate/internal/testutil"
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

// dnsForwarder is a real DNS server on 127.0.0.1 (TCP) that forwards every
// query to a Consul agent's DNS and counts them. With lag, it answers SRV
// queries as the agent answered lag ago: a DNS server behind the one the
// watch hears from, as a stale read from a follower would be.
type dnsForwarder struct {
	Addr    string
	queries atomic.Int64
	lag     time.Duration
	up      string

	mu      sync.Mutex // guards history
	history map[string][]dnsAt
}

type dnsAt struct {
	at  time.Time
	msg *dns.Msg
}

func forwardDNS(t testing.TB, upstream string, lag time.Duration) *dnsForwarder {
	t.Helper()
	f := &dnsForwarder{up: upstream, lag: lag, history: map[string][]dnsAt{}}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	f.Addr = ln.Addr().String()
	srv := &dns.Server{Listener: ln, Handler: dns.HandlerFunc(f.serve)}
	started := make(chan struct{})
	srv.NotifyStartedFunc = func() { close(started) }
	go srv.ActivateAndServe()
	<-started
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	if lag > 0 {
		wg.Go(func() { f.record(ctx) })
	}
	t.Cleanup(func() {
		cancel()
		wg.Wait()
		srv.Shutdown()
	})
	return f
}

// Queries is how many queries the forwarder served.
func (f *dnsForwarder) Queries() int64 { return f.queries.Load() }

func (f *dnsForwarder) exchange(req *dns.Msg) (*dns.Msg, error) {
	resp, _, err := (&dns.Client{Net: "tcp", Timeout: 2 * time.Second}).Exchange(req, f.up)
	return resp, err
}

func (f *dnsForwarder) serve(w dns.ResponseWriter, req *dns.Msg) {
	f.queries.Add(1)
	q := req.Question[0]
	if f.lag > 0 && q.Qtype == dns.TypeSRV {
		if resp := f.lagged(q.Name); resp != nil {
			resp = resp.Copy()
			resp.Id = req.Id
			w.WriteMsg(resp)
			return
		}
	}
	resp, err := f.exchange(req)
	if err != nil {
		m := new(dns.Msg)
		m.SetRcode(req, dns.RcodeServerFailure)
		w.WriteMsg(m)
		return
	}
	w.WriteMsg(resp)
	if f.lag > 0 && q.Qtype == dns.TypeSRV {
		f.mu.Lock()
		if _, ok := f.history[q.Name]; !ok {
			f.history[q.Name] = []dnsAt{{time.Now(), resp}}
		}
		f.mu.Unlock()
	}
}

// spansLag reports whether the forwarder recorded answers for some name
// and, for every name, one at least lag old: from then on a lagged answer
// is the agent's of lag ago.
func (f *dnsForwarder) spansLag() bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	for _, hist := range f.history {
		if len(hist) == 0 || time.Since(hist[0].at) < f.lag {
			return false
		}
	}
	return len(f.history) > 0
}

// lagged is the newest recorded answer for name at least lag old.
func (f *dnsForwarder) lagged(name string) *dns.Msg {
	f.mu.Lock()
	defer f.mu.Unlock()
	hist := f.history[name]
	var best *dns.Msg
	for _, h := range hist {
		if time.Since(h.at) >= f.lag || best == nil {
			best = h.msg
		}
	}
	return best
}

// record asks the agent every 10 ms for every name queried so far, keeping
// the answers of the last few seconds.
func (f *dnsForwarder) record(ctx context.Context) {
	for {
		select {
		case <-ctx.Done():
			return
		case <-time.After(10 * time.Millisecond):
		}
		f.mu.Lock()
		var names []string
		for n := range f.history {
			names = append(names, n)
		}
		f.mu.Unlock()
		for _, n := range names {
			m := new(dns.Msg)
			m.SetQuestion(n, dns.TypeSRV)
			resp, err := f.exchange(m)
			if err != nil {
				continue
			}
			f.mu.Lock()
			hist := append(f.history[n], dnsAt{time.Now(), resp})
			for len(hist) > 1 && time.Since(hist[1].at) > f.lag+2*time.Second {
				hist = hist[1:]
			}
			f.history[n] = hist
			f.mu.Unlock()
		}
	}
}

// httpCounter is a reverse proxy on 127.0.0.1 in front of a Consul agent's
// HTTP API that counts the requests it forwards, and the blocking queries
// (those with an index) among them.
type httpCounter struct {
	Addr     string
	requests atomic.Int64
	blocking atomic.Int64
}

func countHTTP(t testing.TB, upstream string) *httpCounter {
	t.Helper()
	c := &httpCounter{}
	target := &url.URL{Scheme: "http", Host: upstream}
	proxy := httputil.NewSingleHostReverseProxy(target)
	// A blocking query the blocker cancels is no error worth a line.
	proxy.ErrorLog = log.New(io.Discard, "", 0)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	c.Addr = ln.Addr().String()
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		c.requests.Add(1)
		if r.URL.Query().Get("index") != "" {
			c.blocking.Add(1)
		}
		proxy.ServeHTTP(w, r)
	})}
	go srv.Serve(ln)
	t.Cleanup(func() { srv.Close() })
	return c
}

// Requests is how many requests the proxy received.
func (c *httpCounter) Requests() int64 { return c.requests.Load() }

// Blocking is how many blocking queries the proxy received: a watch
// sleeping on one wakes when the index moves.
func (c *httpCounter) Blocking() int64 { return c.blocking.Load() }

// closedPort is a loopback address where nothing listens (it did a moment
// ago).
func closedPort(t testing.TB) *net.TCPAddr {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().(*net.TCPAddr)
	l.Close()
	return addr
}

// waitFor waits up to 15 s until b holds s, failing t with b's text.
func waitFor(t *testing.T, b *testutil.SyncBuffer, s string) {
	t.Helper()
	deadline := time.Now().Add(15 * time.Second)
	for !strings.Contains(b.String(), s) {
		if time.Now().After(deadline) {
			t.Fatalf("never saw %q in:\n%s", s, b.String())
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// slow are intervals no test waits out: a blocker that ends promptly with
// them was woken by Consul, not by its own polling.
var slow = []string{"--interval", "20s", "--max-interval", "20s"}

// background runs the command in-process until it exits.
type background struct {
	stdout, stderr testutil.SyncBuffer
	doneCh         chan int
	cancel         context.CancelFunc
}

// start runs the command with args in-process in the background; the
// test's cleanup cancels it and waits for it to end.
func start(t *testing.T, args ...string) *background {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	bg := &background{doneCh: make(chan int, 1), cancel: cancel}
	go func() {
		bg.doneCh <- Run(ctx, args, cli.IO{Stdout: &bg.stdout, Stderr: &bg.stderr})
	}()
	t.Cleanup(func() {
		cancel()
		<-bg.doneCh
	})
	t.Logf("service-blocker %s &", strings.Join(args, " "))
	return bg
}

// exit waits up to limit for the command to end and returns its code and
// how long after since it took.
func (bg *background) exit(t *testing.T, since time.Time, limit time.Duration) (int, time.Duration) {
	t.Helper()
	select {
	case code := <-bg.doneCh:
		bg.doneCh <- code // for the cleanup
		took := time.Since(since)
		t.Logf("exit %d, %s after; stdout:\n%sstderr:\n%s", code, took.Round(time.Millisecond), bg.stdout.String(), bg.stderr.String())
		return code, took
	case <-time.After(limit):
		t.Fatalf("still waiting %s later; stderr:\n%s", limit, bg.stderr.String())
	}
	return 0, 0
}

// listen accepts (and closes) connections on addr until the test ends and
// returns the port.
func listen(t *testing.T, addr string) int {
	t.Helper()
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			c.Close()
		}
	}()
	return ln.Addr().(*net.TCPAddr).Port
}
