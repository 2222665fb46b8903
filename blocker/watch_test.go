package blocker

import (
	"context"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/consul/api"

	"github.com/jiocloud/orchestrate/internal/consultest"
	"github.com/jiocloud/orchestrate/internal/testutil"
)

// The blocker sleeps on one blocking query and asks DNS again the moment
// Consul's answer changes: with 20 s intervals it still ends within a
// fraction of a second of the registration, and while nothing changes it
// asks DNS nothing. Counted on the wire: a forwarding DNS server and a
// proxy in front of the agent's HTTP API.
func TestWakesOnChange(t *testing.T) {
	a := consultest.Start(t, consultest.Options{})
	fdns := forwardDNS(t, a.DNSAddr, 0)
	fhttp := countHTTP(t, a.HTTPAddr)
	register(t, a, service{id: "late-1", name: "late", port: 9001})
	waitCatalog(t, a, "late", "", 1)

	bl, err := New(Config{DNS: fdns.Addr, Domain: "consul.", Mode: Addressable, Watch: true, WatchWait: 2 * time.Second,
		Interval: 20 * time.Second, MaxInterval: 20 * time.Second, Timeout: time.Minute,
		Requirements: []Requirement{{Service: "late", Count: 3}}}, clientFor(t, fhttp.Addr, ""), nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	doneCh := make(chan error, 1)
	go func() {
		_, err := bl.Wait(context.Background())
		doneCh <- err
	}()
	testutil.Eventually(t, 5*time.Second, "the first DNS query and the watch", func() bool {
		return fdns.Queries() >= 1 && fhttp.Requests() >= 2
	})
	time.Sleep(200 * time.Millisecond) // let the start settle
	dns0, http0 := fdns.Queries(), fhttp.Requests()
	time.Sleep(5 * time.Second) // the window measured
	dns1, http1 := fdns.Queries(), fhttp.Requests()
	t.Logf("5 s on an unchanging catalog: %d DNS queries, %d HTTP requests (wait 2s)", dns1-dns0, http1-http0)
	if dns1 != dns0 {
		t.Errorf("%d DNS queries while nothing changed, want 0", dns1-dns0)
	}
	if n := http1 - http0; n < 2 || n > 3 {
		t.Errorf("%d HTTP requests in 5 s with a 2 s wait, want 2 or 3 (one per wait)", n)
	}

	// Another service changing wakes nothing.
	register(t, a, service{id: "other-1", name: "other", port: 9101})
	waitCatalog(t, a, "other", "", 1)
	time.Sleep(300 * time.Millisecond) // a DNS query, were one coming, would be in
	if n := fdns.Queries() - dns1; n != 0 {
		t.Errorf("another service's registration cost %d DNS queries, want 0", n)
	}

	// One registration of the service: one DNS query (two if the agent's
	// sync moves the index twice).
	dns2 := fdns.Queries()
	register(t, a, service{id: "late-2", name: "late", port: 9002})
	testutil.Eventually(t, 3*time.Second, "a DNS query after the registration", func() bool { return fdns.Queries() > dns2 })
	time.Sleep(300 * time.Millisecond) // more queries, were they coming, would be in
	if n := fdns.Queries() - dns2; n > 2 {
		t.Errorf("one registration cost %d DNS queries, want 1 (2 at most)", n)
	}

	register(t, a, service{id: "late-3", name: "late", port: 9003})
	registered := time.Now()
	select {
	case err := <-doneCh:
		took := time.Since(registered)
		t.Logf("met %s after the third registration", took)
		if err != nil {
			t.Fatal(err)
		}
		if took > 2*time.Second {
			t.Fatalf("met %s after the registration: not woken by the watch (intervals are 20s)", took)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("still waiting 10s after the registration, with 20s intervals: the watch did not wake it")
	}
}

// clientFor is a Consul API client for addr, with token when not empty.
func clientFor(t testing.TB, addr, token string) *api.Client {
	t.Helper()
	cfg := api.DefaultNonPooledConfig()
	cfg.Address, cfg.Token, cfg.TokenFile = addr, token, ""
	c, err := api.NewClient(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// The command as Puppet runs it: the progress lines are those of polling,
// one per change, and no log line says anything about watching.
func TestWakesOnChangeCommand(t *testing.T) {
	a := consultest.Start(t, consultest.Options{})
	bg := start(t, append([]string{"--dns", a.DNSAddr, "--consul-addr", a.HTTPAddr, "--timeout", "30s", "late:2"}, slow...)...)
	register(t, a, service{id: "late-1", name: "late", port: 9001})
	waitFor(t, &bg.stderr, "late: 1/2 addressable (127.0.0.1:9001)")
	register(t, a, service{id: "late-2", name: "late", port: 9002})
	code, took := bg.exit(t, time.Now(), 10*time.Second)
	if code != 0 || took > 2*time.Second {
		t.Fatalf("exit %d %s after the registration, want 0 well within the 20s interval", code, took)
	}
	want := "late: 1/2 addressable (127.0.0.1:9001)\nlate: 2/2 addressable (127.0.0.1:9001, 127.0.0.1:9002)"
	if got := strings.TrimSpace(bg.stderr.String()); got != want && got != "late: 0/2 addressable\n"+want {
		t.Fatalf("stderr:\n%s\nwant the progress lines only:\n%s", got, want)
	}
}

// DNS behind the watch (a stale read from a server that has not applied
// the change yet): the blocker asks DNS again shortly instead of sleeping
// until the next change or MaxInterval.
func TestDNSBehindTheWatch(t *testing.T) {
	a := consultest.Start(t, consultest.Options{})
	fdns := forwardDNS(t, a.DNSAddr, 400*time.Millisecond)
	bg := start(t, append([]string{"--dns", fdns.Addr, "--consul-addr", a.HTTPAddr, "--timeout", "30s", "lag:1"}, slow...)...)
	waitFor(t, &bg.stderr, "lag: 0/1 addressable")
	testutil.Eventually(t, 10*time.Second, "the forwarder's history covering the lag", fdns.spansLag)
	register(t, a, service{id: "lag-1", name: "lag", port: 9201})
	code, took := bg.exit(t, time.Now(), 10*time.Second)
	if code != 0 || took > 3*time.Second {
		t.Fatalf("exit %d %s after the registration, want 0 soon after DNS caught up (400ms), not at the 20s interval", code, took)
	}
	if took < 400*time.Millisecond {
		t.Fatalf("met %s after the registration, before the lagging DNS server could show it: the test did not lag", took)
	}
}

// DNS behind a deregistration: for a moment DNS returns an instance that
// the watch, and a consistent query, no longer know. That is not a blind
// watch: the blocker asks DNS again shortly, keeps watching (nothing
// said), and still wakes on the next registrations.
func TestDNSBehindADeregistration(t *testing.T) {
	a := consultest.Start(t, consultest.Options{})
	fdns := forwardDNS(t, a.DNSAddr, 400*time.Millisecond)
	registerN(t, a, "dereg", 2, 9250)
	waitCatalog(t, a, "dereg", "", 2)
	bg := start(t, append([]string{"--dns", fdns.Addr, "--consul-addr", a.HTTPAddr, "--timeout", "30s", "dereg:3"}, slow...)...)
	waitFor(t, &bg.stderr, "dereg: 2/3 addressable")
	testutil.Eventually(t, 10*time.Second, "the forwarder's history covering the lag", fdns.spansLag)
	if err := a.Client.Agent().ServiceDeregister("dereg-2"); err != nil {
		t.Fatal(err)
	}
	waitFor(t, &bg.stderr, "dereg: 1/3 addressable")
	time.Sleep(2500 * time.Millisecond) // past disagreeGrace
	register(t, a, service{id: "dereg-2", name: "dereg", port: 9252})
	register(t, a, service{id: "dereg-3", name: "dereg", port: 9253})
	code, took := bg.exit(t, time.Now(), 10*time.Second)
	if code != 0 || took > 3*time.Second {
		t.Fatalf("exit %d %s after the registrations, want 0 woken by the watch (intervals 20s)", code, took)
	}
	if errs := bg.stderr.String(); strings.Contains(errs, "cannot watch") {
		t.Fatalf("a DNS server behind a deregistration was taken for a blind watch:\n%s", errs)
	}
}

// No usable HTTP API: the blocker says once that it polls DNS instead, and
// still ends when the service appears. In functional mode, where passing
// health counts, an API that never answers is exit 3, naming it.
func TestFallbackWhenHTTPRefused(t *testing.T) {
	a := consultest.Start(t, consultest.Options{})
	refused := closedPort(t).String()

	t.Run("addressable polls DNS", func(t *testing.T) {
		bg := start(t, "--dns", a.DNSAddr, "--consul-addr", refused, "--timeout", "30s", "--interval", "100ms", "--max-interval", "200ms", "fb:1")
		waitFor(t, &bg.stderr, "fb: 0/1 addressable")
		time.Sleep(time.Second) // several polls, each of which could log
		register(t, a, service{id: "fb-1", name: "fb", port: 9301})
		code, took := bg.exit(t, time.Now(), 10*time.Second)
		if code != 0 || took > 2*time.Second {
			t.Fatalf("exit %d %s after the registration, want 0 within a poll", code, took)
		}
		errs := bg.stderr.String()
		if n := strings.Count(errs, "cannot watch Consul for changes, polling DNS instead"); n != 1 {
			t.Fatalf("the fallback was said %d times, want once:\n%s", n, errs)
		}
		if !strings.Contains(errs, "connection refused") || !strings.Contains(errs, refused) {
			t.Fatalf("the fallback does not name the address and the cause:\n%s", errs)
		}
	})

	t.Run("functional needs health", func(t *testing.T) {
		registerListening(t, a, "fn", api.HealthPassing)
		waitCatalog(t, a, "fn", "", 1)
		r := runCLI(t, "--dns", a.DNSAddr, "--consul-addr", refused, "--mode", "functional", "--timeout", "1s", "--interval", "100ms", "fn:1")
		if r.code != 3 {
			t.Fatalf("exit %d, want 3", r.code)
		}
		if !strings.Contains(r.stderr, "Consul HTTP API never answered: no answer about passing health in 1s while waiting for fn:1, which functional mode needs") {
			t.Fatalf("stderr does not say health never answered:\n%s", r.stderr)
		}
	})

	// An operator's mistake: --dns and --consul-addr reach different
	// Consuls. DNS shows what the watch never will: said, and polled.
	t.Run("DNS and API of different Consuls", func(t *testing.T) {
		other := consultest.Start(t, consultest.Options{})
		register(t, a, service{id: "dis-1", name: "dis", port: 9351})
		waitCatalog(t, a, "dis", "", 1)
		bg := start(t, "--dns", a.DNSAddr, "--consul-addr", other.HTTPAddr, "--timeout", "30s", "--interval", "100ms", "--max-interval", "200ms", "dis:2")
		waitFor(t, &bg.stderr, "same Consul?")
		register(t, a, service{id: "dis-2", name: "dis", port: 9352})
		if code, took := bg.exit(t, time.Now(), 10*time.Second); code != 0 || took > 2*time.Second {
			t.Fatalf("exit %d %s after the registration, want 0 within a poll", code, took)
		}
		if n := strings.Count(bg.stderr.String(), "cannot watch Consul for changes"); n != 1 {
			t.Fatalf("said %d times, want once", n)
		}
	})

	t.Run("--no-watch", func(t *testing.T) {
		fhttp := countHTTP(t, a.HTTPAddr)
		bg := start(t, "--dns", a.DNSAddr, "--consul-addr", fhttp.Addr, "--no-watch", "--timeout", "30s", "--interval", "100ms", "--max-interval", "200ms", "nw:1")
		waitFor(t, &bg.stderr, "nw: 0/1 addressable")
		time.Sleep(500 * time.Millisecond) // several polls, none of which may ask the API
		register(t, a, service{id: "nw-1", name: "nw", port: 9401})
		if code, _ := bg.exit(t, time.Now(), 10*time.Second); code != 0 {
			t.Fatalf("exit %d", code)
		}
		if n := strings.Count(bg.stderr.String(), "not watching Consul for changes (--no-watch)"); n != 1 {
			t.Fatalf("--no-watch said %d times, want once", n)
		}
		if n := fhttp.Requests(); n != 0 {
			t.Fatalf("%d HTTP requests with --no-watch in addressable mode, want 0", n)
		}
	})
}

// registerListening registers one instance of name with a TTL check in
// status, on a port where a real listener accepts.
func registerListening(t *testing.T, a *consultest.Agent, name, status string) int {
	t.Helper()
	port := listen(t, "127.0.0.1:0")
	register(t, a, service{id: name + "-1", name: name, port: port, ttl: status})
	return port
}

// An ACL token that may not read the service's health (403), or may read
// the service but not its nodes (the agent filters the answer), or does
// not exist: the blocker polls DNS instead, says so once, and never shows
// the token. DNS answers with the agent's anonymous token, which may read
// the catalog, as Consul's DNS guide sets it up.
func TestFallbackWhenACLDenied(t *testing.T) {
	const mgmt = "6a4b5ad5-7c6e-4d0a-9d35-5f9d2b4d1a11"
	a := consultest.Start(t, consultest.Options{ACLToken: mgmt})
	acl := a.Client.ACL()
	policy := func(name, rules string) *api.ACLPolicy {
		p, _, err := acl.PolicyCreate(&api.ACLPolicy{Name: name, Rules: rules}, nil)
		if err != nil {
			t.Fatalf("create policy %s: %v", name, err)
		}
		return p
	}
	dnsRead := policy("dns-read", `service_prefix "" { policy = "read" }
node_prefix "" { policy = "read" }`)
	if _, _, err := acl.TokenUpdate(&api.ACLToken{AccessorID: "00000000-0000-0000-0000-000000000002",
		Policies: []*api.ACLTokenPolicyLink{{ID: dnsRead.ID}}}, nil); err != nil {
		t.Fatalf("give the anonymous token read: %v", err)
	}
	kvOnly := policy("kv-only", `key_prefix "x/" { policy = "read" }`)
	serviceOnly := policy("service-only", `service_prefix "" { policy = "read" }`)
	token := func(p *api.ACLPolicy) string {
		tok, _, err := acl.TokenCreate(&api.ACLToken{Policies: []*api.ACLTokenPolicyLink{{ID: p.ID}}}, nil)
		if err != nil {
			t.Fatal(err)
		}
		return tok.SecretID
	}
	registerListening(t, a, "acl", api.HealthPassing)
	waitCatalog(t, a, "acl", "", 1)

	for i, tc := range []struct {
		name, token, cause string
	}{
		{"no service:read", token(kvOnly), "filtered the answer by ACL"},
		{"no node:read", token(serviceOnly), "filtered the answer by ACL"},
		{"unknown token", "0f3c1a2e-5b7d-4c9e-8a6f-1d2e3f4a5b6c", "ACL not found"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			file := filepath.Join(t.TempDir(), "token")
			if err := os.WriteFile(file, []byte(tc.token+"\n"), 0o600); err != nil {
				t.Fatal(err)
			}
			// Nothing to filter yet: Consul answers the watch with an
			// empty list and never wakes it. The first instance shows in
			// DNS and not in the watch (at the latest at the max interval),
			// and one consistent query shows the filtering.
			svc := fmt.Sprintf("acl%d", i)
			bg := start(t, "--dns", a.DNSAddr, "--consul-addr", a.HTTPAddr, "--token-file", file,
				"--timeout", "30s", "--interval", "100ms", "--max-interval", "500ms", svc+":2")
			waitFor(t, &bg.stderr, svc+": 0/2 addressable")
			register(t, a, service{id: svc + "-1", name: svc, port: 9500 + 2*i})
			waitFor(t, &bg.stderr, "cannot watch Consul for changes")
			time.Sleep(500 * time.Millisecond) // several polls, each of which could say it again
			register(t, a, service{id: svc + "-2", name: svc, port: 9501 + 2*i})
			code, took := bg.exit(t, time.Now(), 10*time.Second)
			if code != 0 || took > 2*time.Second {
				t.Fatalf("exit %d %s after the registration, want 0 within a poll", code, took)
			}
			errs := bg.stderr.String()
			if n := strings.Count(errs, "cannot watch Consul for changes, polling DNS instead"); n != 1 || !strings.Contains(errs, tc.cause) || !strings.Contains(errs, `retry="not in this wait"`) {
				t.Fatalf("want the fallback said once, naming %q and no retry:\n%s", tc.cause, errs)
			}
			if strings.Contains(errs, tc.token) || strings.Contains(bg.stdout.String(), tc.token) {
				t.Fatal("the token appears in the output")
			}

			// Functional mode cannot tell passing without the API, and
			// waiting cannot change a refusal: exit 3 at once, not after
			// the timeout.
			r := runCLI(t, "--dns", a.DNSAddr, "--consul-addr", a.HTTPAddr, "--token-file", file, "--mode", "functional", "--timeout", "30s", "acl:1")
			if r.code != 3 || !strings.Contains(r.stderr, "refused by Consul's ACLs") || !strings.Contains(r.stderr, tc.cause) {
				t.Fatalf("functional with a denied token: exit %d, want 3 naming the refusal and %q:\n%s", r.code, tc.cause, r.stderr)
			}
			if r.elapsed > 10*time.Second {
				t.Fatalf("functional with a denied token: exit after %s, want at once", r.elapsed)
			}
			if strings.Contains(r.stderr, tc.token) {
				t.Fatal("the token appears in the output")
			}
			// The same for --passing-only, and, for a token Consul does not
			// know, for a service with no instance yet: DNS has nothing to
			// check against the API, but the first health query is refused.
			// (A known token without service:read gets an empty answer for
			// a service with no instance: nothing was filtered, so nothing
			// tells, until the first instance registers.)
			svcs := []string{"acl:1"}
			if tc.name == "unknown token" {
				svcs = append(svcs, "absent:1")
			}
			for _, svc := range svcs {
				r := runCLI(t, "--dns", a.DNSAddr, "--consul-addr", a.HTTPAddr, "--token-file", file, "--passing-only", "--timeout", "20s", svc)
				if r.code != 3 || !strings.Contains(r.stderr, "refused by Consul's ACLs") || r.elapsed > 10*time.Second {
					t.Fatalf("--passing-only %s with a denied token: exit %d after %s, want 3 at once naming the refusal:\n%s", svc, r.code, r.elapsed, r.stderr)
				}
			}
		})
	}

	// The management token may read everything: the watch works with ACLs.
	file := filepath.Join(t.TempDir(), "token")
	os.WriteFile(file, []byte(mgmt), 0o600)
	fhttp := countHTTP(t, a.HTTPAddr)
	bg := start(t, append([]string{"--dns", a.DNSAddr, "--consul-addr", fhttp.Addr, "--token-file", file, "--timeout", "30s", "allowed:1"}, slow...)...)
	waitFor(t, &bg.stderr, "allowed: 0/1 addressable")
	testutil.Eventually(t, 10*time.Second, "the watch asleep on a blocking query", func() bool { return fhttp.Blocking() >= 1 }, bg.stderr.String)
	register(t, a, service{id: "allowed-1", name: "allowed", port: 9600})
	if code, took := bg.exit(t, time.Now(), 10*time.Second); code != 0 || took > 2*time.Second {
		t.Fatalf("exit %d %s after the registration with a token that may read: want 0, woken by the watch", code, took)
	}
}

// The agent restarts while the blocker watches: it polls DNS meanwhile,
// says so once, watches again once the agent is back, and wakes on the
// next change.
func TestWatchSurvivesAgentRestart(t *testing.T) {
	server := consultest.Start(t, consultest.Options{})
	a := consultest.Start(t, consultest.Options{JoinLAN: server.SerfLANAddr()})
	bg := start(t, "--dns", a.DNSAddr, "--consul-addr", a.HTTPAddr, "--timeout", "60s",
		"--interval", "200ms", "--max-interval", "20s", "rs:1")
	waitFor(t, &bg.stderr, "rs: 0/1 addressable")
	if err := a.Restart(context.Background(), time.Second); err != nil {
		t.Fatal(err)
	}
	waitFor(t, &bg.stderr, "watching Consul for changes again")
	register(t, a, service{id: "rs-1", name: "rs", port: 9701})
	code, took := bg.exit(t, time.Now(), 30*time.Second)
	if code != 0 || took > 3*time.Second {
		t.Fatalf("exit %d %s after the registration, want 0 woken by the restored watch (max interval 20s)", code, took)
	}
	if n := strings.Count(bg.stderr.String(), "cannot watch Consul for changes"); n != 1 {
		t.Fatalf("the outage was said %d times, want once", n)
	}
}

// Functional means every check passes (HTTP API) and the port accepts TCP:
// an instance in warning that accepts does not count, nor one passing on a
// port where nothing listens. The blocker wakes when a check turns passing,
// and probes TCP at the polling interval while enough pass but too few
// accept, since a listening socket gives Consul nothing to report.
func TestFunctionalMeaning(t *testing.T) {
	a := consultest.Start(t, consultest.Options{})
	live, warn := listen(t, "127.0.0.1:0"), listen(t, "127.0.0.1:0")
	dead := closedPort(t).Port
	register(t, a, service{id: "db-ok", name: "db", port: live, ttl: api.HealthPassing})
	register(t, a, service{id: "db-warn", name: "db", port: warn, ttl: api.HealthWarning})
	register(t, a, service{id: "db-dead", name: "db", port: dead, ttl: api.HealthPassing})
	waitCatalog(t, a, "db", "", 3)
	base := []string{"--dns", a.DNSAddr, "--consul-addr", a.HTTPAddr}

	if r := runCLI(t, append(base, "--timeout", "10s", "db:3")...); r.code != 0 {
		t.Fatalf("addressable db:3 (passing, warning, passing on a dead port): exit %d, want 0", r.code)
	}
	r := runCLI(t, append(base, "--mode", "functional", "--connect-timeout", "500ms", "--timeout", "1500ms", "db:2")...)
	if r.code != 1 || !strings.Contains(r.stderr, "db: 1/2 after 1.5s") {
		t.Fatalf("functional db:2: exit %d, want 1 naming db: 1/2 (only the passing instance that accepts)", r.code)
	}

	t.Run("wakes when a check passes", func(t *testing.T) {
		fhttp := countHTTP(t, a.HTTPAddr)
		bg := start(t, append([]string{"--dns", a.DNSAddr, "--consul-addr", fhttp.Addr, "--mode", "functional", "--timeout", "30s", "db:2"}, slow...)...)
		waitFor(t, &bg.stderr, "db: 1/2 functional")
		testutil.Eventually(t, 10*time.Second, "the watch asleep on a blocking query", func() bool { return fhttp.Blocking() >= 1 }, bg.stderr.String)
		if err := a.Client.Agent().UpdateTTL("db-warn-ttl", "", api.HealthPassing); err != nil {
			t.Fatal(err)
		}
		code, took := bg.exit(t, time.Now(), 10*time.Second)
		if code != 0 || took > 2*time.Second {
			t.Fatalf("exit %d %s after the check passed, want 0 woken by the watch (intervals 20s)", code, took)
		}
	})

	// db-warn passes now: two of three pass and accept.
	t.Run("probes TCP at the polling interval", func(t *testing.T) {
		bg := start(t, append(base, "--mode", "functional", "--connect-timeout", "200ms", "--timeout", "30s",
			"--interval", "200ms", "--max-interval", "20s", "db:3")...)
		waitFor(t, &bg.stderr, "db: 2/3 functional")
		time.Sleep(500 * time.Millisecond) // a few probes of the dead port fail first
		listen(t, net.JoinHostPort("127.0.0.1", strconv.Itoa(dead)))
		code, took := bg.exit(t, time.Now(), 15*time.Second)
		if code != 0 || took > 3*time.Second {
			t.Fatalf("exit %d %s after the port started listening, want 0 within a few probes (max interval 20s)", code, took)
		}
	})
}
