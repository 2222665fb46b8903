package blocker

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hashicorp/consul/api"
	"github.com/miekg/dns"

	"github.com/jiocloud/orchestrate/internal/consultest"
	"github.com/jiocloud/orchestrate/internal/testutil"

	"github.com/jiocloud/orchestrate/internal/cli"
)

func TestParseRequirement(t *testing.T) {
	for _, tc := range []struct {
		name, arg string
		want      Requirement
		err       string
	}{
		{name: "default count", arg: "mysql", want: Requirement{Service: "mysql", Count: 3}},
		{name: "explicit count", arg: "mysql:2", want: Requirement{Service: "mysql", Count: 2}},
		{name: "underscore and dash", arg: "rabbit_mq-x:1", want: Requirement{Service: "rabbit_mq-x", Count: 1}},
		{name: "zero", arg: "mysql:0", err: "count 0 is below 1"},
		{name: "negative", arg: "mysql:-1", err: "count -1 is below 1"},
		{name: "not a number", arg: "mysql:two", err: `count "two" is not a whole number`},
		{name: "empty count", arg: "mysql:", err: `count "" is not a whole number`},
		{name: "two colons", arg: "mysql:1:2", err: `count "1:2" is not a whole number`},
		{name: "empty service", arg: ":2", err: "empty service name"},
		{name: "dot in name", arg: "my.sql:2", err: `has '.'`},
		{name: "too long", arg: strings.Repeat("a", 64), err: "longer than 63"},
		{name: "datacenter", arg: "mysql@dc2", want: Requirement{Service: "mysql", Datacenter: "dc2", Count: 3}},
		{name: "datacenter and count", arg: "mysql@dc2:2", want: Requirement{Service: "mysql", Datacenter: "dc2", Count: 2}},
		{name: "empty datacenter", arg: "mysql@:2", err: "empty datacenter name"},
		{name: "datacenter without service", arg: "@dc2", err: "empty service name"},
		{name: "two datacenters", arg: "mysql@dc2@dc3", err: `datacenter name "dc2@dc3" has '@'`},
		{name: "dot in datacenter", arg: "mysql@dc.2", err: `datacenter name "dc.2" has '.'`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := ParseRequirement(tc.arg, 3)
			if tc.err != "" {
				if err == nil || !strings.Contains(err.Error(), tc.err) {
					t.Fatalf("ParseRequirement(%q) = %v, %v; want error containing %q", tc.arg, got, err, tc.err)
				}
				return
			}
			if err != nil || got != tc.want {
				t.Fatalf("ParseRequirement(%q) = %v, %v; want %v", tc.arg, got, err, tc.want)
			}
		})
	}
}

func TestQueryName(t *testing.T) {
	for _, tc := range []struct{ service, tag, dc, want string }{
		{"web", "", "", "web.service.consul."},
		{"web", "primary", "", "primary.web.service.consul."},
		{"web", "primary", "dc2", "primary.web.service.dc2.consul."},
		{"web", "", "dc2", "web.service.dc2.consul."},
	} {
		if got := QueryName(tc.service, tc.tag, tc.dc, "consul."); got != tc.want {
			t.Errorf("QueryName(%q, %q, %q) = %q, want %q", tc.service, tc.tag, tc.dc, got, tc.want)
		}
	}
}

// Bad input is exit 2 with a message naming it, before any query: the DNS
// address is one where nothing listens, so a query would have given exit 3.
func TestRunUsageErrors(t *testing.T) {
	for _, tc := range []struct {
		name string
		args []string
		want string
	}{
		{name: "no service", args: nil, want: "no SERVICE[:N] given"},
		{name: "count zero", args: []string{"web:0"}, want: `"web:0": count 0 is below 1`},
		{name: "malformed count", args: []string{"web:x"}, want: `"web:x": count "x" is not a whole number`},
		{name: "empty service", args: []string{":3"}, want: "empty service name"},
		{name: "second argument bad", args: []string{"web:2", "db:-3"}, want: `"db:-3": count -3 is below 1`},
		{name: "twice", args: []string{"web:2", "web:3"}, want: "service web given twice"},
		{name: "twice in a datacenter", args: []string{"web@dc2:2", "web", "web@dc2:3"}, want: "service web@dc2 given twice"},
		{name: "bad datacenter", args: []string{"web@dc/2"}, want: `"web@dc/2": datacenter name "dc/2" has '/'`},
		{name: "flag count zero", args: []string{"--count", "0", "web"}, want: "--count 0"},
		{name: "dns no port", args: []string{"--dns", "localhost", "web"}, want: `--dns: "localhost" is not host:port`},
		{name: "dns bad port", args: []string{"--dns", "127.0.0.1:99999", "web"}, want: `port "99999"`},
		{name: "dns empty host", args: []string{"--dns", ":53", "web"}, want: "bad host"},
		{name: "mode", args: []string{"--mode", "healthy", "web"}, want: `--mode "healthy"`},
		{name: "interval", args: []string{"--interval", "0s", "web"}, want: "--interval 0s"},
		{name: "max interval below interval", args: []string{"--interval", "2s", "--max-interval", "1s", "web"}, want: "--max-interval 1s is below --interval 2s"},
		{name: "negative timeout", args: []string{"--timeout", "-1s", "web"}, want: "--timeout -1s"},
		{name: "connect timeout", args: []string{"--connect-timeout", "0s", "web"}, want: "--connect-timeout 0s"},
		{name: "tag", args: []string{"--tag", "a.b", "web"}, want: "--tag: tag name"},
		{name: "datacenter", args: []string{"--datacenter", "dc 2", "web"}, want: "--datacenter: datacenter name"},
		{name: "domain", args: []string{"--domain", "a..b", "web"}, want: "--domain:"},
		{name: "unknown flag", args: []string{"--nope", "web"}, want: "unknown flag: --nope"},
		{name: "duration syntax", args: []string{"--timeout", "ten", "web"}, want: `invalid argument "ten"`},
		{name: "log level", args: []string{"--log-level", "loud", "web"}, want: "--log-level"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			args := append([]string{"--dns", "127.0.0.1:1", "--timeout", "1s"}, tc.args...)
			r := runCLI(t, args...)
			if r.code != 2 {
				t.Fatalf("exit %d, want 2", r.code)
			}
			if !strings.Contains(r.stderr, tc.want) {
				t.Fatalf("stderr %q does not name the problem %q", r.stderr, tc.want)
			}
			if r.stdout != "" {
				t.Fatalf("stdout %q, want nothing", r.stdout)
			}
			if r.elapsed > 500*time.Millisecond {
				t.Fatalf("took %s: a usage error must not wait", r.elapsed)
			}
		})
	}
}

// 0, 1, 3 and 5 instances: each count is met exactly and one more is not.
// Five is past Consul's UDP answer limit of 3, which the raw UDP query shows.
func TestCountsAgainstConsulDNS(t *testing.T) {
	a := consultest.Start(t, consultest.Options{})
	for _, n := range []int{0, 1, 3, 5} {
		name := fmt.Sprintf("svc%d", n)
		registerN(t, a, name, n, 20000+100*n)
	}
	for _, n := range []int{0, 1, 3, 5} {
		name := fmt.Sprintf("svc%d", n)
		t.Run(name, func(t *testing.T) {
			waitCatalog(t, a, name, "", n)
			if n > 0 {
				r := runCLI(t, "--dns", a.DNSAddr, "--consul-addr", a.HTTPAddr, "--timeout", "10s", fmt.Sprintf("%s:%d", name, n))
				if r.code != 0 {
					t.Fatalf("%s:%d exit %d, want 0", name, n, r.code)
				}
				lines := endpointLines(r.stdout, name)
				if len(lines) != n {
					t.Fatalf("%d endpoint lines, want %d:\n%s", len(lines), n, r.stdout)
				}
				for i, l := range lines {
					want := fmt.Sprintf("%s 127.0.0.1:%d ", name, 20000+100*n+i+1)
					if !strings.HasPrefix(l, want) {
						t.Errorf("line %d = %q, want prefix %q", i, l, want)
					}
				}
			}
			r := runCLI(t, "--dns", a.DNSAddr, "--consul-addr", a.HTTPAddr, "--timeout", "1s", "--interval", "100ms", fmt.Sprintf("%s:%d", name, n+1))
			if r.code != 1 {
				t.Fatalf("%s:%d exit %d, want 1", name, n+1, r.code)
			}
			if want := fmt.Sprintf("%s: %d/%d after 1s", name, n, n+1); !strings.Contains(r.stderr, want) {
				t.Fatalf("stderr does not say %q:\n%s", want, r.stderr)
			}
			if r.stdout != "" {
				t.Fatalf("stdout %q on timeout, want nothing", r.stdout)
			}
		})
	}
	t.Run("udp answer limit", func(t *testing.T) {
		// The reason LookupSRV uses TCP: over UDP the agent returns only 3 of
		// the 5 instances, without the truncated bit.
		m := new(dns.Msg)
		m.SetQuestion("svc5.service.consul.", dns.TypeSRV)
		resp, _, err := (&dns.Client{Net: "udp"}).Exchange(m, a.DNSAddr)
		if err != nil {
			t.Fatal(err)
		}
		if len(resp.Answer) >= 5 {
			t.Fatalf("UDP answer has %d records: the 5-instance case no longer tests the TCP path", len(resp.Answer))
		}
		t.Logf("UDP: %d answers, truncated=%v; the blocker counted 5 above", len(resp.Answer), resp.Truncated)
	})
}

func TestJSONOutput(t *testing.T) {
	a := consultest.Start(t, consultest.Options{})
	registerN(t, a, "web", 2, 30000)
	r := runCLI(t, "--dns", a.DNSAddr, "--consul-addr", a.HTTPAddr, "--timeout", "10s", "--json", "web:2")
	if r.code != 0 {
		t.Fatalf("exit %d", r.code)
	}
	var res Result
	if err := json.Unmarshal([]byte(r.stdout), &res); err != nil {
		t.Fatalf("stdout is not JSON: %v", err)
	}
	if !res.Met || len(res.Services) != 1 {
		t.Fatalf("result %+v", res)
	}
	st := res.Services[0]
	if st.Service != "web" || st.Count != 2 || st.Found != 2 || len(st.Endpoints) != 2 || st.Endpoints[1].Port != 30002 || st.Endpoints[0].Address != "127.0.0.1" {
		t.Fatalf("status %+v", st)
	}
	if !strings.HasSuffix(st.Endpoints[0].Target, ".consul.") {
		t.Fatalf("target %q", st.Endpoints[0].Target)
	}

	// On timeout --json still prints where things stood, for machines.
	r = runCLI(t, "--dns", a.DNSAddr, "--consul-addr", a.HTTPAddr, "--timeout", "500ms", "--json", "web:3")
	if r.code != 1 {
		t.Fatalf("exit %d, want 1", r.code)
	}
	if err := json.Unmarshal([]byte(r.stdout), &res); err != nil {
		t.Fatalf("stdout is not JSON: %v", err)
	}
	if res.Met || res.Services[0].Found != 2 || res.Services[0].Met {
		t.Fatalf("result %+v", res)
	}

	// A service with no endpoint has "endpoints": [], never null
	// (docs/json.md).
	r = runCLI(t, "--dns", a.DNSAddr, "--consul-addr", a.HTTPAddr, "--timeout", "500ms", "--json", "nothere:1")
	if r.code != 1 || !strings.Contains(r.stdout, `"endpoints": []`) || strings.Contains(r.stdout, "null") {
		t.Fatalf("exit %d, want 1 and no null:\n%s", r.code, r.stdout)
	}
}

func TestTags(t *testing.T) {
	a := consultest.Start(t, consultest.Options{})
	register(t, a, service{id: "db-1", name: "db", port: 3306, tags: []string{"primary"}})
	register(t, a, service{id: "db-2", name: "db", port: 3307, tags: []string{"replica"}})
	register(t, a, service{id: "db-3", name: "db", port: 3308, tags: []string{"replica", "slow"}})
	waitCatalog(t, a, "db", "", 3)

	r := runCLI(t, "--dns", a.DNSAddr, "--consul-addr", a.HTTPAddr, "--timeout", "10s", "--tag", "replica", "db:2")
	if r.code != 0 {
		t.Fatalf("exit %d", r.code)
	}
	if got := endpointLines(r.stdout, "db"); len(got) != 2 || !strings.HasPrefix(got[0], "db 127.0.0.1:3307 ") || !strings.HasPrefix(got[1], "db 127.0.0.1:3308 ") {
		t.Fatalf("endpoints %q, want the two replicas", got)
	}
	r = runCLI(t, "--dns", a.DNSAddr, "--consul-addr", a.HTTPAddr, "--timeout", "1s", "--tag", "primary", "db:2")
	if r.code != 1 || !strings.Contains(r.stderr, "db: 1/2 after 1s") {
		t.Fatalf("primary db:2: exit %d, want 1 naming db: 1/2", r.code)
	}
	r = runCLI(t, "--dns", a.DNSAddr, "--consul-addr", a.HTTPAddr, "--timeout", "1s", "--tag", "nosuchtag", "db")
	if r.code != 1 || !strings.Contains(r.stderr, "db: 0/1 after 1s") {
		t.Fatalf("unknown tag: exit %d, want 1 naming db: 0/1", r.code)
	}
}

// A second datacenter, WAN-joined to the first: --datacenter queries it
// through the first agent's DNS.
func TestSecondDatacenter(t *testing.T) {
	dc1 := consultest.Start(t, consultest.Options{Datacenter: "dc1"})
	dc2 := consultest.Start(t, consultest.Options{
		Datacenter:   "dc2",
		RetryJoinWAN: []string{net.JoinHostPort("127.0.0.1", strconv.Itoa(dc1.Ports.SerfWAN))},
	})
	registerN(t, dc2, "api", 2, 40000)
	registerN(t, dc1, "api", 1, 41000)
	var dcs []string
	var err error
	testutil.Eventually(t, 30*time.Second, "dc1 seeing dc2 over the WAN", func() bool {
		dcs, err = dc1.Client.Catalog().Datacenters()
		return err == nil && len(dcs) == 2
	}, func() string { return fmt.Sprintf("datacenters %v, err %v", dcs, err) })
	waitCatalog(t, dc1, "api", "dc2", 2)

	r := runCLI(t, "--dns", dc1.DNSAddr, "--consul-addr", dc1.HTTPAddr, "--timeout", "20s", "--datacenter", "dc2", "api:2")
	if r.code != 0 {
		t.Fatalf("exit %d", r.code)
	}
	if got := endpointLines(r.stdout, "api"); len(got) != 2 || !strings.HasPrefix(got[0], "api 127.0.0.1:40001 ") || !strings.Contains(got[0], ".dc2.") {
		t.Fatalf("endpoints %q, want dc2's two", got)
	}
	// dc1's own single instance is what the agent's datacenter answers.
	r = runCLI(t, "--dns", dc1.DNSAddr, "--consul-addr", dc1.HTTPAddr, "--timeout", "1s", "api:2")
	if r.code != 1 || !strings.Contains(r.stderr, "api: 1/2 after 1s") {
		t.Fatalf("dc1 api:2: exit %d, want 1 naming api: 1/2", r.code)
	}

	// SERVICE@DC beside the agent's own: each asks its datacenter, and
	// names it.
	r = runCLI(t, "--dns", dc1.DNSAddr, "--consul-addr", dc1.HTTPAddr, "--timeout", "20s", "api@dc2:2", "api:1")
	if r.code != 0 {
		t.Fatalf("api@dc2:2 api:1: exit %d", r.code)
	}
	if got := endpointLines(r.stdout, "api@dc2"); len(got) != 2 || !strings.HasPrefix(got[0], "api@dc2 127.0.0.1:40001 ") {
		t.Fatalf("api@dc2 endpoints %q, want dc2's two", got)
	}
	if got := endpointLines(r.stdout, "api"); len(got) != 1 || !strings.HasPrefix(got[0], "api 127.0.0.1:41001 ") {
		t.Fatalf("api endpoints %q, want dc1's one", got)
	}
	r = runCLI(t, "--dns", dc1.DNSAddr, "--consul-addr", dc1.HTTPAddr, "--timeout", "1s", "api@dc2:3")
	if r.code != 1 || !strings.Contains(r.stderr, "api@dc2: 2/3 after 1s") {
		t.Fatalf("api@dc2:3: exit %d, want 1 naming api@dc2: 2/3", r.code)
	}

	// The blocker waiting on dc2 wakes on dc2's change, through dc1's
	// agent, long before its 20 s intervals.
	fhttp := countHTTP(t, dc1.HTTPAddr)
	bg := start(t, append([]string{"--dns", dc1.DNSAddr, "--consul-addr", fhttp.Addr, "--timeout", "30s", "api@dc2:3"}, slow...)...)
	waitFor(t, &bg.stderr, "api@dc2: 2/3 addressable")
	testutil.Eventually(t, 10*time.Second, "the watch on dc2 asleep on a blocking query", func() bool { return fhttp.Blocking() >= 1 }, bg.stderr.String)
	register(t, dc2, service{id: "api-3", name: "api", port: 40003})
	code, took := bg.exit(t, time.Now(), 15*time.Second)
	if code != 0 || took > 3*time.Second {
		t.Fatalf("exit %d %s after dc2's registration, want 0 woken by the watch on dc2 (intervals 20s)", code, took)
	}
	if got := endpointLines(bg.stdout.String(), "api@dc2"); len(got) != 3 {
		t.Fatalf("endpoints %q, want dc2's three", got)
	}
}

// Consul DNS leaves out instances whose check is critical, and keeps those
// in warning unless --passing-only asks the HTTP API.
func TestHealthChecks(t *testing.T) {
	a := consultest.Start(t, consultest.Options{})
	for i := 1; i <= 3; i++ {
		register(t, a, service{id: fmt.Sprintf("web-%d", i), name: "web", port: 8000 + i, ttl: api.HealthPassing})
	}
	waitCatalog(t, a, "web", "", 3)
	if r := runCLI(t, "--dns", a.DNSAddr, "--consul-addr", a.HTTPAddr, "--timeout", "10s", "web:3"); r.code != 0 {
		t.Fatalf("3 passing: exit %d", r.code)
	}

	if err := a.Client.Agent().UpdateTTL("web-2-ttl", "database down", api.HealthCritical); err != nil {
		t.Fatal(err)
	}
	waitCatalog(t, a, "web", "", 2)
	r := runCLI(t, "--dns", a.DNSAddr, "--consul-addr", a.HTTPAddr, "--timeout", "1s", "web:3")
	if r.code != 1 || !strings.Contains(r.stderr, "web: 2/3 after 1s") {
		t.Fatalf("one critical: exit %d, want 1 naming web: 2/3", r.code)
	}
	r = runCLI(t, "--dns", a.DNSAddr, "--consul-addr", a.HTTPAddr, "--timeout", "10s", "web:2")
	if r.code != 0 || strings.Contains(r.stdout, ":8002") {
		t.Fatalf("web:2 exit %d, stdout %q: want 0 without the critical instance", r.code, r.stdout)
	}

	if err := a.Client.Agent().UpdateTTL("web-3-ttl", "slow", api.HealthWarning); err != nil {
		t.Fatal(err)
	}
	waitHealth(t, a, "web-3-ttl", api.HealthWarning)
	if r := runCLI(t, "--dns", a.DNSAddr, "--consul-addr", a.HTTPAddr, "--timeout", "10s", "web:2"); r.code != 0 {
		t.Fatalf("warning counts in DNS: exit %d", r.code)
	}
	args := []string{"--dns", a.DNSAddr, "--consul-addr", a.HTTPAddr, "--passing-only", "--timeout", "1s", "web:2"}
	r = runCLI(t, args...)
	if r.code != 1 || !strings.Contains(r.stderr, "web: 1/2 after 1s") {
		t.Fatalf("--passing-only web:2: exit %d, want 1 naming web: 1/2", r.code)
	}
	r = runCLI(t, append(args[:len(args)-1], "web:1")...)
	if r.code != 0 || !strings.Contains(r.stdout, "web 127.0.0.1:8001 ") || len(endpointLines(r.stdout, "web")) != 1 {
		t.Fatalf("--passing-only web:1: exit %d, stdout %q: want only the passing 8001", r.code, r.stdout)
	}
}

func waitHealth(t *testing.T, a *consultest.Agent, checkID, status string) {
	t.Helper()
	testutil.Eventually(t, 10*time.Second, "check "+checkID+" "+status+" in the catalog", func() bool {
		checks, _, err := a.Client.Health().Node(a.NodeName, nil)
		if err != nil {
			return false
		}
		for _, c := range checks {
			if c.CheckID == checkID && c.Status == status {
				return true
			}
		}
		return false
	})
}

// Functional mode dials each endpoint: a real listener counts, a port where
// nothing listens does not.
func TestFunctionalMode(t *testing.T) {
	a := consultest.Start(t, consultest.Options{})
	livePort, deadPort := listen(t, "127.0.0.1:0"), closedPort(t).Port
	register(t, a, service{id: "mysql-live", name: "mysql", port: livePort})
	register(t, a, service{id: "mysql-dead", name: "mysql", port: deadPort})
	waitCatalog(t, a, "mysql", "", 2)

	if r := runCLI(t, "--dns", a.DNSAddr, "--consul-addr", a.HTTPAddr, "--timeout", "10s", "mysql:2"); r.code != 0 {
		t.Fatalf("addressable mysql:2: exit %d", r.code)
	}
	r := runCLI(t, "--dns", a.DNSAddr, "--consul-addr", a.HTTPAddr, "--timeout", "10s", "--mode", "functional", "--connect-timeout", "500ms", "mysql:1")
	if r.code != 0 {
		t.Fatalf("functional mysql:1: exit %d", r.code)
	}
	if got := endpointLines(r.stdout, "mysql"); len(got) != 1 || !strings.HasPrefix(got[0], fmt.Sprintf("mysql 127.0.0.1:%d ", livePort)) {
		t.Fatalf("functional endpoints %q, want only the listener on %d", got, livePort)
	}
	if !strings.Contains(r.stderr, "mysql: 1/1 functional") {
		t.Fatalf("progress line missing: %q", r.stderr)
	}
	r = runCLI(t, "--dns", a.DNSAddr, "--consul-addr", a.HTTPAddr, "--timeout", "1500ms", "--mode", "functional", "--connect-timeout", "500ms", "mysql:2")
	if r.code != 1 || !strings.Contains(r.stderr, "mysql: 1/2 after 1.5s") {
		t.Fatalf("functional mysql:2: exit %d, want 1 naming mysql: 1/2", r.code)
	}
}

// Polling (--no-watch, or no usable HTTP API): a registration while the
// blocker waits ends the wait within one poll interval of it showing up,
// and the blocker printed one progress line per change, not one per poll.
func TestRegistrationWhileWaiting(t *testing.T) {
	a := consultest.Start(t, consultest.Options{})
	const interval = 500 * time.Millisecond
	fdns := forwardDNS(t, a.DNSAddr, 0)
	var stdout, stderr testutil.SyncBuffer
	done := make(chan int, 1)
	go func() {
		done <- Run(context.Background(), []string{"--dns", fdns.Addr, "--consul-addr", a.HTTPAddr, "--timeout", "30s",
			"--interval", interval.String(), "--max-interval", interval.String(), "--no-watch", "--log-level", "warn", "late:2"}, cli.IO{Stdout: &stdout, Stderr: &stderr})
	}()
	register(t, a, service{id: "late-1", name: "late", port: 9001})
	waitFor(t, &stderr, "late: 1/2 addressable (127.0.0.1:9001)")
	polled := fdns.Queries()
	testutil.Eventually(t, 10*time.Second, "several polls with nothing new", func() bool { return fdns.Queries() >= polled+3 }, stderr.String)

	register(t, a, service{id: "late-2", name: "late", port: 9002})
	registered := time.Now()
	var code int
	select {
	case code = <-done:
	case <-time.After(20 * time.Second):
		t.Fatal("blocker still waiting 20s after the registration")
	}
	took := time.Since(registered)
	t.Logf("exit %d %s after the registration; stderr:\n%s", code, took, stderr.String())
	if code != 0 {
		t.Fatalf("exit %d", code)
	}
	// One interval, plus the agent's sync of the registration to the catalog
	// and a DNS round trip (a few ms each, more on a loaded machine).
	if took > interval+300*time.Millisecond {
		t.Fatalf("exit %s after the registration, want within one %s poll interval", took, interval)
	}
	lines := strings.Split(strings.TrimSpace(stderr.String()), "\n")
	want := []string{"late: 0/2 addressable", "late: 1/2 addressable (127.0.0.1:9001)", "late: 2/2 addressable (127.0.0.1:9001, 127.0.0.1:9002)"}
	// The first registration may already be visible at the first poll.
	if len(lines) == 2 {
		want = want[1:]
	}
	if strings.Join(lines, "\n") != strings.Join(want, "\n") {
		t.Fatalf("progress lines:\n%s\nwant:\n%s", strings.Join(lines, "\n"), strings.Join(want, "\n"))
	}
	if got := endpointLines(stdout.String(), "late"); len(got) != 2 {
		t.Fatalf("endpoints %q", got)
	}
}

// --quiet silences progress lines but not the result.
func TestQuiet(t *testing.T) {
	a := consultest.Start(t, consultest.Options{})
	registerN(t, a, "web", 1, 31000)
	waitCatalog(t, a, "web", "", 1)
	r := runCLI(t, "--dns", a.DNSAddr, "--consul-addr", a.HTTPAddr, "--timeout", "10s", "--quiet", "web")
	if r.code != 0 || r.stderr != "" || len(endpointLines(r.stdout, "web")) != 1 {
		t.Fatalf("exit %d stderr %q stdout %q", r.code, r.stderr, r.stdout)
	}
}

// A DNS server where nothing listens: exit 3, naming the server and saying
// it never answered (not "too few").
func TestDNSNeverAnswers(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close()
	r := runCLI(t, "--dns", addr, "--no-watch", "--timeout", "1s", "--interval", "100ms", "web:2")
	if r.code != 3 {
		t.Fatalf("exit %d, want 3", r.code)
	}
	if !strings.Contains(r.stderr, "DNS never answered: "+addr+" gave no usable answer in 1s") || !strings.Contains(r.stderr, "while waiting for web:2") {
		t.Fatalf("stderr does not say the DNS server never answered:\n%s", r.stderr)
	}
	if n := strings.Count(r.stderr, "query failed"); n != 1 {
		t.Fatalf("the failure was logged %d times over ~10 polls, want once", n)
	}
}

// fakeDNS is a real DNS server on 127.0.0.1 that answers SERVFAIL to the
// first failures queries, then two SRV records with their A records, the
// way Consul does.
func fakeDNS(t *testing.T, failures int, servfail bool) string {
	t.Helper()
	var mu sync.Mutex
	seen := 0
	h := dns.HandlerFunc(func(w dns.ResponseWriter, req *dns.Msg) {
		mu.Lock()
		seen++
		n := seen
		mu.Unlock()
		m := new(dns.Msg)
		m.SetReply(req)
		if n <= failures {
			if !servfail {
				return // no reply at all: the client times out
			}
			m.SetRcode(req, dns.RcodeServerFailure)
			w.WriteMsg(m)
			return
		}
		for i, port := range []uint16{7001, 7002} {
			target := fmt.Sprintf("n%d.node.dc1.consul.", i)
			m.Answer = append(m.Answer, &dns.SRV{Hdr: dns.RR_Header{Name: req.Question[0].Name, Rrtype: dns.TypeSRV, Class: dns.ClassINET}, Priority: 1, Weight: 1, Port: port, Target: target})
			m.Extra = append(m.Extra, &dns.A{Hdr: dns.RR_Header{Name: target, Rrtype: dns.TypeA, Class: dns.ClassINET}, A: net.ParseIP(fmt.Sprintf("127.0.0.%d", i+2))})
		}
		w.WriteMsg(m)
	})
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := &dns.Server{Listener: ln, Handler: h}
	started := make(chan struct{})
	srv.NotifyStartedFunc = func() { close(started) }
	go srv.ActivateAndServe()
	<-started
	t.Cleanup(func() { srv.Shutdown() })
	return ln.Addr().String()
}

// SERVFAIL and a server that does not reply are logged once and retried; the
// blocker succeeds once the server answers.
func TestTransientFailuresRetried(t *testing.T) {
	for _, tc := range []struct {
		name     string
		servfail bool
		want     string
	}{
		{name: "servfail", servfail: true, want: "SERVFAIL"},
		{name: "no reply", servfail: false, want: "i/o timeout"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			addr := fakeDNS(t, 3, tc.servfail)
			var logs bytes.Buffer
			b, err := New(Config{DNS: addr, Domain: "consul.", Mode: Addressable, Timeout: 10 * time.Second,
				Interval: 20 * time.Millisecond, MaxInterval: 20 * time.Millisecond, QueryTimeout: 100 * time.Millisecond,
				Requirements: []Requirement{{Service: "web", Count: 2}}}, nil, slogText(&logs), nil)
			if err != nil {
				t.Fatal(err)
			}
			res, err := b.Wait(context.Background())
			t.Logf("logs:\n%s", logs.String())
			if err != nil || !res.Met || res.Services[0].Found != 2 {
				t.Fatalf("Wait = %+v, %v", res, err)
			}
			if n := strings.Count(logs.String(), "query failed"); n != 1 {
				t.Fatalf("3 failures logged %d times, want once", n)
			}
			if !strings.Contains(logs.String(), tc.want) || !strings.Contains(logs.String(), "query answering again") {
				t.Fatalf("logs do not show the failure %q and the recovery", tc.want)
			}
			if got := res.Services[0].Endpoints; got[0].String() != "127.0.0.2:7001" || got[1].String() != "127.0.0.3:7002" {
				t.Fatalf("endpoints %v", got)
			}
		})
	}
}

// A server that answers SERVFAIL for the whole timeout never gave a usable
// answer: exit 3, not 1.
func TestServfailForeverIsUnavailable(t *testing.T) {
	addr := fakeDNS(t, 1<<30, true)
	r := runCLI(t, "--dns", addr, "--no-watch", "--timeout", "1s", "--interval", "100ms", "web")
	if r.code != 3 || !strings.Contains(r.stderr, "SERVFAIL") {
		t.Fatalf("exit %d, want 3 mentioning SERVFAIL", r.code)
	}
}

// SIGTERM (a cancelled context) ends the wait with exit 1, saying it was
// interrupted and where each service stood.
func TestInterrupted(t *testing.T) {
	addr := fakeDNS(t, 0, true)
	ctx, cancel := context.WithCancel(context.Background())
	time.AfterFunc(300*time.Millisecond, cancel)
	var out, errb bytes.Buffer
	code := Run(ctx, []string{"--dns", addr, "--no-watch", "--interval", "50ms", "web:3"}, cli.IO{Stdout: &out, Stderr: &errb})
	if code != 1 || !strings.Contains(errb.String(), "interrupted") || !strings.Contains(errb.String(), "web: 2/3 after") {
		t.Fatalf("exit %d, stderr %q: want 1, interrupted, web: 2/3", code, errb.String())
	}
}

func TestSortEndpoints(t *testing.T) {
	eps := []Endpoint{
		{Address: "10.0.0.10", Port: 1}, {Address: "10.0.0.9", Port: 2}, {Address: "10.0.0.9", Port: 1},
		{Address: "", Target: "b.", Port: 1}, {Address: "::1", Port: 5},
	}
	sortEndpoints(eps)
	var got []string
	for _, e := range eps {
		got = append(got, e.String())
	}
	want := "b.:1 10.0.0.9:1 10.0.0.9:2 10.0.0.10:1 [::1]:5"
	if strings.Join(got, " ") != want {
		t.Fatalf("sorted %q, want %q", strings.Join(got, " "), want)
	}
}

// TestSilentDNSNamesTheError: a server that takes every query and never
// replies, with --timeout shorter than one query's timeout. The first query
// is cut by the deadline; the message must still say what went wrong
// instead of ending in "(last error: )".
func TestSilentDNSNamesTheError(t *testing.T) {
	addr := fakeDNS(t, 1<<30, false)
	r := runCLI(t, "--dns", addr, "--no-watch", "--timeout", "500ms", "web:2")
	if r.code != 3 {
		t.Fatalf("exit %d, want 3; stderr:\n%s", r.code, r.stderr)
	}
	if strings.Contains(r.stderr, "(last error: )") || !strings.Contains(r.stderr, "last error: no answer from DNS server") {
		t.Fatalf("stderr does not name the last error:\n%s", r.stderr)
	}
}
