//go:build lab

package netlab

import (
	"context"
	"errors"
	"io"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"slices"
	"strings"
	"testing"
	"time"
)

// testConfig is a network of its own, so these tests run beside a lab
// (orchlab0, 198.18.0.0/16) and beside other packages' tests.
func testConfig() Config {
	return Config{
		Bridge: "orchlabt0",
		Table:  "orchlabt",
		Host:   netip.MustParsePrefix("198.19.1.1/24"),
		Extra:  []netip.Addr{netip.MustParseAddr("198.19.1.11")},
	}
}

func requireRoot(t *testing.T) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Fatal("the lab's tests need root (bridges, nftables, network namespaces)")
	}
}

func up(t *testing.T, cfg Config) *Net {
	t.Helper()
	requireRoot(t)
	ctx := context.Background()
	if err := Clean(ctx, cfg); err != nil {
		t.Fatal(err)
	}
	n, err := Up(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := n.Down(context.Background()); err != nil {
			t.Errorf("Down: %v", err)
		}
	})
	return n
}

func addNS(t *testing.T, n *Net, name, addr string) *Namespace {
	t.Helper()
	ns, err := n.AddNamespace(context.Background(), name, netip.MustParseAddr(addr))
	if err != nil {
		t.Fatal(err)
	}
	return ns
}

func sh(t *testing.T, name string, args ...string) string {
	t.Helper()
	out, err := exec.Command(name, args...).CombinedOutput()
	if err != nil {
		t.Fatalf("%s %s: %v: %s", name, strings.Join(args, " "), err, out)
	}
	return string(out)
}

// bridgeAddrs are the IPv4 addresses on dev, as "addr/len".
func bridgeAddrs(t *testing.T, dev string) []string {
	t.Helper()
	var out []string
	for _, f := range strings.Fields(sh(t, "ip", "-4", "-o", "addr", "show", "dev", dev)) {
		if _, err := netip.ParsePrefix(f); err == nil {
			out = append(out, f)
		}
	}
	slices.Sort(out)
	return out
}

// tables lists both tables named table, without counters.
func tables(t *testing.T, table string) string {
	t.Helper()
	return sh(t, "nft", "-s", "list", "table", "inet", table) + sh(t, "nft", "-s", "list", "table", "bridge", table)
}

func tableExists(fam, table string) bool {
	return exec.Command("nft", "list", "table", fam, table).Run() == nil
}

// TestUpDownIdempotent: Up twice is one network; Up brings a network an
// earlier run changed back to the configuration; Down removes the bridge,
// both tables and the namespaces, and a second Down (or Clean of a lab
// that is not there) does nothing.
func TestUpDownIdempotent(t *testing.T) {
	cfg := testConfig()
	ctx := context.Background()
	n := up(t, cfg)
	want := []string{"198.19.1.1/24", "198.19.1.11/32"}
	if got := bridgeAddrs(t, cfg.Bridge); !slices.Equal(got, want) {
		t.Fatalf("addresses %v, want %v", got, want)
	}
	for _, f := range []string{"/proc/sys/net/ipv6/conf/orchlabt0/disable_ipv6", "/proc/sys/net/ipv4/conf/orchlabt0/forwarding"} {
		b, err := os.ReadFile(f)
		want := map[bool]string{true: "1", false: "0"}[strings.Contains(f, "ipv6")]
		if err != nil || strings.TrimSpace(string(b)) != want {
			t.Fatalf("%s = %q (%v), want %s", f, b, err, want)
		}
	}
	if !tableExists("inet", cfg.Table) || !tableExists("bridge", cfg.Table) {
		t.Fatal("tables missing after Up")
	}

	// What a crashed or meddling run leaves: a stray address, the tables
	// gone, the bridge down, a partition of the old process.
	if err := n.Partition(ctx, "old", []netip.Addr{netip.MustParseAddr("198.19.1.20")}, []netip.Addr{netip.MustParseAddr("198.19.1.21")}); err != nil {
		t.Fatal(err)
	}
	sh(t, "ip", "addr", "add", "198.19.1.99/24", "dev", cfg.Bridge)
	sh(t, "nft", "delete", "table", "inet", cfg.Table)
	sh(t, "ip", "link", "set", cfg.Bridge, "down")
	n2, err := Up(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	if got := bridgeAddrs(t, cfg.Bridge); !slices.Equal(got, want) {
		t.Fatalf("addresses after a second Up %v, want %v", got, want)
	}
	if !tableExists("inet", cfg.Table) || strings.Contains(sh(t, "nft", "list", "table", "bridge", cfg.Table), "partition") {
		t.Fatal("a second Up: want the tables back, without the old partition")
	}
	if l := sh(t, "ip", "-o", "link", "show", "dev", cfg.Bridge); !strings.Contains(l, ",UP") && !strings.Contains(l, "<UP") {
		t.Fatal("bridge not up after the second Up")
	}
	if len(n2.Partitions()) != 0 {
		t.Fatalf("partitions of a new Up: %v", n2.Partitions())
	}

	// An interface of that name that is no bridge (a veth) is refused,
	// untouched.
	other := testConfig()
	other.Bridge, other.Table = "orchlabt9", "orchlabt9"
	sh(t, "ip", "link", "add", other.Bridge, "type", "veth", "peer", "name", "orchlabt9p")
	defer exec.Command("ip", "link", "delete", other.Bridge).Run()
	if _, err := Up(ctx, other); err == nil || !strings.Contains(err.Error(), "is no bridge") {
		t.Fatalf("Up over a veth: %v", err)
	}
	if err := Clean(ctx, other); err == nil || !strings.Contains(err.Error(), "is no bridge") {
		t.Fatalf("Clean with a veth of the bridge's name: %v", err)
	}
	sh(t, "ip", "link", "show", "dev", other.Bridge)

	addNS(t, n2, "a", "198.19.1.30")
	if err := n2.Down(ctx); err != nil {
		t.Fatal(err)
	}
	if exec.Command("ip", "link", "show", "dev", cfg.Bridge).Run() == nil {
		t.Fatal("bridge still there after Down")
	}
	if tableExists("inet", cfg.Table) || tableExists("bridge", cfg.Table) {
		t.Fatal("a table is still there after Down")
	}
	if _, err := os.Stat("/run/netns/orchlabt0-a"); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("namespace still there after Down: %v", err)
	}
	if err := n2.Down(ctx); err != nil {
		t.Fatalf("second Down: %v", err)
	}
}

// TestCleanHalfMade: a run that died after making the bridge and a
// namespace but before the tables is cleaned up by Clean alone.
func TestCleanHalfMade(t *testing.T) {
	requireRoot(t)
	cfg := testConfig()
	cfg.Bridge, cfg.Table = "orchlabt1", "orchlabt1"
	cfg.Host = netip.MustParsePrefix("198.19.5.1/24")
	cfg.Extra = nil
	ctx := context.Background()
	sh(t, "ip", "link", "add", cfg.Bridge, "type", "bridge")
	sh(t, "ip", "netns", "add", cfg.Bridge+"-x")
	sh(t, "nft", "add", "table", "bridge", cfg.Table)
	if err := Clean(ctx, cfg); err != nil {
		t.Fatal(err)
	}
	if exec.Command("ip", "link", "show", "dev", cfg.Bridge).Run() == nil || tableExists("bridge", cfg.Table) {
		t.Fatal("Clean left the bridge or the table")
	}
	if _, err := os.Stat("/run/netns/" + cfg.Bridge + "-x"); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("Clean left the namespace: %v", err)
	}
}

// conn is one TCP connection across the bridge, the server's end reading
// what the client writes (and the other way).
type conn struct{ client, server net.Conn }

func connect(t *testing.T, dial func(context.Context, string, string) (net.Conn, error), l net.Listener) conn {
	t.Helper()
	accepted := make(chan net.Conn, 1)
	go func() {
		c, err := l.Accept()
		if err != nil {
			close(accepted)
			return
		}
		accepted <- c
	}()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	c, err := dial(ctx, "tcp", l.Addr().String())
	if err != nil {
		t.Fatalf("connect to %s: %v", l.Addr(), err)
	}
	s, ok := <-accepted
	if !ok {
		t.Fatal("accept failed")
	}
	t.Cleanup(func() { c.Close(); s.Close() })
	return conn{client: c, server: s}
}

// passes writes msg on from and reports whether to reads it within wait.
func passes(t *testing.T, from, to net.Conn, msg string, wait time.Duration) bool {
	t.Helper()
	if _, err := from.Write([]byte(msg)); err != nil {
		t.Fatalf("write: %v", err)
	}
	return arrives(t, to, msg, wait)
}

func arrives(t *testing.T, to net.Conn, msg string, wait time.Duration) bool {
	t.Helper()
	to.SetReadDeadline(time.Now().Add(wait))
	buf := make([]byte, len(msg))
	_, err := io.ReadFull(to, buf)
	var ne net.Error
	if errors.As(err, &ne) && ne.Timeout() {
		return false
	}
	if err != nil {
		t.Fatalf("read: %v", err)
	}
	if string(buf) != msg {
		t.Fatalf("read %q, want %q", buf, msg)
	}
	return true
}

// TestPartitionCutsAndHeals: a partition stalls an established TCP
// connection both ways, between two namespaces on the bridge (bridged
// traffic) and between a namespace and a host process on an extra address
// (a Consul server); it refuses a new connection; Heal lets the stalled
// data through on the same connection, and new connections work again.
func TestPartitionCutsAndHeals(t *testing.T) {
	n := up(t, testConfig())
	ctx := context.Background()
	a := addNS(t, n, "a", "198.19.1.20")
	b := addNS(t, n, "b", "198.19.1.21")
	c := addNS(t, n, "c", "198.19.1.22")
	lb, err := b.Listen("tcp", "198.19.1.21:7000")
	if err != nil {
		t.Fatal(err)
	}
	defer lb.Close()
	lh, err := net.Listen("tcp", "198.19.1.11:7001") // the host, as a Consul server
	if err != nil {
		t.Fatal(err)
	}
	defer lh.Close()

	ab := connect(t, a.DialContext, lb)
	ah := connect(t, a.DialContext, lh)
	cb := connect(t, c.DialContext, lb)
	for _, cn := range []conn{ab, ah, cb} {
		if !passes(t, cn.client, cn.server, "hello", 3*time.Second) {
			t.Fatal("no traffic before any partition")
		}
	}

	addrs := func(s ...string) []netip.Addr {
		var out []netip.Addr
		for _, x := range s {
			out = append(out, netip.MustParseAddr(x))
		}
		return out
	}
	if err := n.Partition(ctx, "cut", addrs("198.19.1.20"), addrs("198.19.1.21", "198.19.1.11")); err != nil {
		t.Fatal(err)
	}
	if passes(t, ab.client, ab.server, "a->b", 2*time.Second) {
		t.Fatal("a reached b through the partition")
	}
	if passes(t, ab.server, ab.client, "b->a", time.Second) {
		t.Fatal("b reached a through the partition")
	}
	if passes(t, ah.client, ah.server, "a->host", time.Second) {
		t.Fatal("a reached the host's address through the partition")
	}
	if passes(t, ah.server, ah.client, "host->a", time.Second) {
		t.Fatal("the host's address reached a through the partition")
	}
	if !passes(t, cb.client, cb.server, "c->b", 3*time.Second) {
		t.Fatal("c, outside the partition, was cut from b")
	}
	dctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	if nc, err := a.DialContext(dctx, "tcp", "198.19.1.21:7000"); err == nil {
		nc.Close()
		t.Fatal("a new connection from a to b went through the partition")
	}
	cancel()
	if got := n.Partitions(); !slices.Equal(got, []string{"cut"}) {
		t.Fatalf("Partitions = %v", got)
	}

	if err := n.Heal(ctx, "cut"); err != nil {
		t.Fatal(err)
	}
	// TCP retransmits what the partition held back (backing off: allow a
	// few of its retries).
	for _, x := range []struct {
		to   net.Conn
		what string
	}{{ab.server, "a->b"}, {ab.client, "b->a"}, {ah.server, "a->host"}, {ah.client, "host->a"}} {
		if !arrives(t, x.to, x.what, 20*time.Second) {
			t.Fatalf("%s did not arrive after Heal", x.what)
		}
	}
	connect(t, a.DialContext, lb)
	if err := n.Heal(ctx, "cut"); err != nil {
		t.Fatalf("healing twice: %v", err)
	}
	if strings.Contains(tables(t, "orchlabt"), "partition cut") {
		t.Fatal("rules of the healed partition left")
	}
}

// TestPartitionRefusesBadInput: names nft would read as syntax,
// addresses outside the subnet or on both sides, empty sides: refused
// with the reason, and the ruleset is unchanged.
func TestPartitionRefusesBadInput(t *testing.T) {
	n := up(t, testConfig())
	ctx := context.Background()
	ok := []netip.Addr{netip.MustParseAddr("198.19.1.20")}
	if err := n.Partition(ctx, "keep", ok, []netip.Addr{netip.MustParseAddr("198.19.1.21")}); err != nil {
		t.Fatal(err)
	}
	before := tables(t, "orchlabt")
	for _, tc := range []struct {
		name     string
		from, to []netip.Addr
		want     string
	}{
		{`x"; flush ruleset; "`, ok, ok, "partition name"},
		{"", ok, ok, "partition name"},
		{"UPPER", ok, ok, "partition name"},
		{strings.Repeat("x", 33), ok, ok, "partition name"},
		{"p", nil, ok, "from: 0 addresses"},
		{"p", ok, nil, "to: 0 addresses"},
		{"p", ok, ok, "on both sides"},
		{"p", ok, []netip.Addr{netip.MustParseAddr("8.8.8.8")}, "not an IPv4 address in the lab's subnet"},
		{"p", ok, []netip.Addr{netip.MustParseAddr("198.18.0.11")}, "not an IPv4 address in the lab's subnet"},
		{"p", ok, []netip.Addr{netip.MustParseAddr("198.19.1.255")}, "broadcast"},
		{"p", ok, []netip.Addr{netip.MustParseAddr("::1")}, "not an IPv4"},
		{"p", ok, []netip.Addr{{}}, "not an IPv4"},
		{"p", ok, make([]netip.Addr, 70000), "70000 addresses"},
	} {
		if err := n.Partition(ctx, tc.name, tc.from, tc.to); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("Partition(%q): %v, want an error containing %q", tc.name, err, tc.want)
		}
	}
	if after := tables(t, "orchlabt"); after != before {
		t.Fatalf("a refused partition changed the ruleset:\n%s", after)
	}
	if err := n.Heal(ctx, "nosuch"); err != nil {
		t.Fatalf("Heal of an unknown partition: %v", err)
	}
	// Duplicates are one element; the partition of the same name replaced.
	two := []netip.Addr{netip.MustParseAddr("198.19.1.23"), netip.MustParseAddr("198.19.1.23")}
	if err := n.Partition(ctx, "keep", ok, two); err != nil {
		t.Fatal(err)
	}
	if rs := sh(t, "nft", "list", "table", "bridge", "orchlabt"); strings.Contains(rs, "198.19.1.21") || !strings.Contains(rs, "elements = { 198.19.1.23 }") {
		t.Fatalf("replaced partition:\n%s", rs)
	}
	if err := n.Partition(ctx, "keep", ok, []netip.Addr{netip.MustParseAddr("198.19.1.21")}); err != nil {
		t.Fatal(err)
	}
	if after := tables(t, "orchlabt"); after != before {
		t.Fatalf("the same partition again: a different ruleset:\n%s", after)
	}
}

// TestGuardRoutesNothing: even with forwarding on for the bridge and an
// outside interface (as if someone set net.ipv4.ip_forward), the guard
// drops every packet between the lab and the outside: a namespace on the
// bridge routed out through the host, the outside routed into the lab,
// the outside reaching the host's lab address, the host sending from its
// lab address to the outside, and the namespace reaching a host address
// outside the lab. Then, with the guard's table removed by hand, each of
// the five goes through: it was the guard that stopped them (the other
// lab networks' guards, of other subnets and bridges, stop none of them).
func TestGuardRoutesNothing(t *testing.T) {
	cfg := testConfig()
	n := up(t, cfg)
	ctx := context.Background()
	a := addNS(t, n, "a", "198.19.1.20")
	sh(t, "ip", "-n", a.Name, "route", "add", "default", "via", "198.19.1.1")

	// The outside: a namespace behind a veth that is not on the bridge,
	// in TEST-NET-3.
	out := &Namespace{Name: "olt-outside", path: "/run/netns/olt-outside"}
	exec.Command("ip", "netns", "delete", out.Name).Run()
	exec.Command("ip", "link", "delete", "oltout").Run()
	sh(t, "ip", "netns", "add", out.Name)
	t.Cleanup(func() { exec.Command("ip", "netns", "delete", out.Name).Run() })
	sh(t, "ip", "link", "add", "oltout", "type", "veth", "peer", "name", "oltoutp")
	t.Cleanup(func() { exec.Command("ip", "link", "delete", "oltout").Run() })
	sh(t, "ip", "link", "set", "oltoutp", "netns", out.Name)
	sh(t, "ip", "addr", "add", "203.0.113.1/30", "dev", "oltout")
	sh(t, "ip", "link", "set", "oltout", "up")
	sh(t, "ip", "-n", out.Name, "addr", "add", "203.0.113.2/30", "dev", "oltoutp")
	sh(t, "ip", "-n", out.Name, "link", "set", "oltoutp", "up")
	sh(t, "ip", "-n", out.Name, "route", "add", "198.19.1.0/24", "via", "203.0.113.1")
	for _, dev := range []string{cfg.Bridge, "oltout"} {
		if err := os.WriteFile("/proc/sys/net/ipv4/conf/"+dev+"/forwarding", []byte("1\n"), 0o644); err != nil {
			t.Fatal(err)
		}
	}

	listen := func(ns *Namespace, addr string) net.Listener {
		t.Helper()
		var l net.Listener
		var err error
		if ns == nil {
			l, err = net.Listen("tcp", addr)
		} else {
			l, err = ns.Listen("tcp", addr)
		}
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { l.Close() })
		go func() {
			for {
				c, err := l.Accept()
				if err != nil {
					return
				}
				c.Close()
			}
		}()
		return l
	}
	outL := listen(out, "203.0.113.2:7002")
	labL := listen(a, "198.19.1.20:7003")
	hostL := listen(nil, "198.19.1.1:7004")
	hostOther := listen(nil, "203.0.113.1:7005") // the host, on an address outside the lab
	fromHostLab := func(ctx context.Context, network, addr string) (net.Conn, error) {
		d := net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP("198.19.1.1")}}
		return d.DialContext(ctx, network, addr)
	}
	cases := []struct {
		what string
		dial func(context.Context, string, string) (net.Conn, error)
		to   string
	}{
		{"the lab routed out", a.DialContext, outL.Addr().String()},
		{"the outside routed in", out.DialContext, labL.Addr().String()},
		{"the outside to the host's lab address", out.DialContext, hostL.Addr().String()},
		{"the host's lab address to the outside", fromHostLab, outL.Addr().String()},
		{"the lab to the host's other addresses", a.DialContext, hostOther.Addr().String()},
	}
	try := func(dial func(context.Context, string, string) (net.Conn, error), to string) error {
		ctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		defer cancel()
		c, err := dial(ctx, "tcp", to)
		if err == nil {
			c.Close()
		}
		return err
	}
	for _, c := range cases {
		if err := try(c.dial, c.to); err == nil {
			t.Errorf("%s: connected through the guard", c.what)
		}
	}
	if rs := sh(t, "nft", "list", "table", "inet", cfg.Table); !strings.Contains(rs, "guard") || strings.Contains(rs, "counter packets 0 bytes 0 drop comment \"guard: nothing is routed out of the bridge\"") {
		t.Fatalf("the guard's routed-out rule counted nothing:\n%s", rs)
	}

	sh(t, "nft", "delete", "table", "inet", cfg.Table)
	for _, c := range cases {
		if err := try(c.dial, c.to); err != nil {
			t.Errorf("%s without the guard: %v (the test's routing is broken, not the guard proven)", c.what, err)
		}
	}
	if err := n.apply(ctx); err != nil {
		t.Fatal(err)
	}
	if err := try(cases[0].dial, cases[0].to); err == nil {
		t.Fatal("the guard back: still connected")
	}
}
