//go:build lab

package novalab

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/netip"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/gophercloud/gophercloud/v2"
	"github.com/gophercloud/gophercloud/v2/openstack"
	"github.com/gophercloud/gophercloud/v2/openstack/compute/v2/servers"
	"github.com/gophercloud/gophercloud/v2/openstack/identity/v3/tokens"

	"github.com/jiocloud/orchestrate/lab/netlab"
)

// An instance of its own: not the lab's (24800, $LAB_DIR/nova) nor `make
// e2e-nova`'s (24700), on a bridge of its own. Its directory is kept
// between runs (a configured instance starts in about 30 s, a new one
// takes about 70 s); /tmp, because MariaDB (user mysql) must traverse it.
const (
	testDir      = "/tmp/orchestrate-nova-labtest"
	testPortBase = 24820
)

var testHost = netip.MustParseAddr("198.19.3.1")

// TestNovaOnTheBridge: a lab instance with NOVA_E2E_HOST on the bridge
// serves a network namespace attached to it (no route but the bridge's
// subnet, so 127.0.0.1 is its own loopback): gophercloud, dialling from
// the namespace, gets a keystone token whose catalog names the bridge
// address only, and lists servers through the catalog's compute URL. On
// the host, the API services listen on the bridge address only and
// RabbitMQ and epmd on loopback only. Then the instance stops.
func TestNovaOnTheBridge(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Fatal("the lab's tests need root (bridges, network namespaces, the Nova packages)")
	}
	ctx := context.Background()
	cfg := netlab.Config{Bridge: "orchlabn0", Table: "orchlabn", Host: netip.PrefixFrom(testHost, 24)}
	n, err := netlab.Up(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := n.Down(context.Background()); err != nil {
			t.Error(err)
		}
	})
	scripts, err := filepath.Abs("../../scripts/nova")
	if err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	cloud, err := Up(ctx, Options{Dir: testDir, PortBase: testPortBase, Host: testHost, Scripts: scripts})
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("instance up in %s", time.Since(start).Round(time.Second))
	stopped := false
	t.Cleanup(func() {
		if !stopped {
			_ = cloud.Down(context.Background())
		}
	})
	if want := fmt.Sprintf("http://%s:%d/v3", testHost, testPortBase); cloud.Env["OS_AUTH_URL"] != want {
		t.Fatalf("OS_AUTH_URL %q, want %q", cloud.Env["OS_AUTH_URL"], want)
	}
	clouds, err := os.ReadFile(cloud.CloudsYAML)
	if err != nil || !strings.Contains(string(clouds), "auth_url: http://"+testHost.String()+":") {
		t.Fatalf("clouds.yaml does not name the bridge address: %v", err)
	}
	checkListeners(t)
	refusesBadHosts(t, scripts)

	probe, err := n.AddNamespace(ctx, "probe", netip.MustParseAddr("198.19.3.50"))
	if err != nil {
		t.Fatal(err)
	}
	listServersFrom(t, ctx, probe, cloud.Env)

	if err := cloud.Down(ctx); err != nil {
		t.Fatal(err)
	}
	stopped = true
	pids, _ := filepath.Glob(filepath.Join(testDir, "run", "*.pid"))
	if len(pids) != 0 {
		t.Fatalf("PID files left after Down: %v", pids)
	}
}

// listServersFrom authenticates as the cloud's admin and lists servers,
// every connection made from inside ns.
func listServersFrom(t *testing.T, ctx context.Context, ns *netlab.Namespace, env map[string]string) {
	t.Helper()
	p, err := openstack.NewClient(env["OS_AUTH_URL"])
	if err != nil {
		t.Fatal(err)
	}
	p.HTTPClient = http.Client{Timeout: 30 * time.Second, Transport: &http.Transport{DialContext: ns.DialContext}}
	err = openstack.Authenticate(ctx, p, gophercloud.AuthOptions{
		IdentityEndpoint: env["OS_AUTH_URL"], Username: env["OS_USERNAME"], Password: env["OS_PASSWORD"],
		DomainName: env["OS_USER_DOMAIN_NAME"],
		Scope:      &gophercloud.AuthScope{ProjectName: env["OS_PROJECT_NAME"], DomainName: env["OS_PROJECT_DOMAIN_NAME"]},
	})
	if err != nil {
		t.Fatalf("a keystone token from the namespace: %v", err)
	}
	res, ok := p.GetAuthResult().(tokens.CreateResult)
	if !ok {
		t.Fatalf("auth result %T", p.GetAuthResult())
	}
	catalog, err := res.ExtractServiceCatalog()
	if err != nil {
		t.Fatal(err)
	}
	urls := 0
	for _, e := range catalog.Entries {
		for _, ep := range e.Endpoints {
			u, err := url.Parse(ep.URL)
			if err != nil || u.Hostname() != testHost.String() {
				t.Errorf("catalog: %s %s endpoint %q is not on the bridge address %s", e.Type, ep.Interface, ep.URL, testHost)
			}
			urls++
		}
	}
	// identity, compute, placement, image, network: public, internal, admin.
	if urls != 15 {
		t.Errorf("catalog: %d endpoints, want 15", urls)
	}
	compute, err := openstack.NewComputeV2(p, gophercloud.EndpointOpts{Region: env["OS_REGION_NAME"], Availability: gophercloud.AvailabilityPublic})
	if err != nil {
		t.Fatal(err)
	}
	pages, err := servers.List(compute, servers.ListOpts{AllTenants: true}).AllPages(ctx)
	if err != nil {
		t.Fatalf("list servers from the namespace: %v", err)
	}
	all, err := servers.ExtractServers(pages)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("listed %d servers from %s through %s", len(all), ns.Name, compute.Endpoint)
}

// checkListeners: the instance's API ports are bound to the bridge address
// only, RabbitMQ's and epmd's to loopback only.
func checkListeners(t *testing.T) {
	t.Helper()
	want := map[int]string{}
	for off := 0; off <= 4; off++ { // keystone, placement, glance, nova-api, neutron
		want[testPortBase+off] = testHost.String()
	}
	for _, off := range []int{5, 6, 7} { // rabbitmq, its distribution, epmd
		want[testPortBase+off] = "127.0.0.1"
	}
	got := map[int][]string{}
	for _, table := range []string{"/proc/net/tcp", "/proc/net/tcp6"} {
		f, err := os.Open(table)
		if err != nil {
			t.Fatal(err)
		}
		sc := bufio.NewScanner(f)
		for sc.Scan() {
			fl := strings.Fields(sc.Text())
			if len(fl) < 4 || fl[3] != "0A" { // TCP_LISTEN
				continue
			}
			hexAddr, hexPort, _ := strings.Cut(fl[1], ":")
			port, _ := strconv.ParseInt(hexPort, 16, 32)
			if _, ours := want[int(port)]; ours {
				got[int(port)] = append(got[int(port)], procAddr(hexAddr))
			}
		}
		f.Close()
	}
	for port, addr := range want {
		if as := got[port]; len(as) == 0 || strings.Join(as, ",") != addr && !(addr == "127.0.0.1" && strings.Join(as, ",") == "127.0.0.1,::1") {
			t.Errorf("port %d listens on %v, want %s only", port, as, addr)
		}
	}
}

// procAddr is an address of /proc/net/tcp{,6} in text (IPv4, and ::1 or
// the IPv6 wildcard).
func procAddr(h string) string {
	if len(h) == 8 {
		v, _ := strconv.ParseUint(h, 16, 32)
		return netip.AddrFrom4([4]byte{byte(v), byte(v >> 8), byte(v >> 16), byte(v >> 24)}).String()
	}
	switch h {
	case "00000000000000000000000001000000":
		return "::1"
	case "00000000000000000000000000000000":
		return "::"
	}
	return h
}

// refusesBadHosts: configure.sh and start.sh refuse a NOVA_E2E_HOST that is
// no dotted IPv4 address (exit 2, before touching anything), and start.sh
// one that is no address of this host (exit 1); the running instance is
// left as it is (the caller then uses it).
func refusesBadHosts(t *testing.T, scripts string) {
	t.Helper()
	for _, tc := range []struct {
		host, script string
		code         int
		want         string
	}{
		{"1.2.3", "start.sh", 2, "want an IPv4 address"},
		{"127.0.0.1;id", "configure.sh", 2, "want an IPv4 address"},
		{"$(id)", "start.sh", 2, "want an IPv4 address"},
		{"256.0.0.1", "start.sh", 2, "want an IPv4 address"},
		{"::1", "start.sh", 2, "want an IPv4 address"},
		{"198.19.3.77", "start.sh", 1, "is no address of this host"},
	} {
		cmd := exec.Command(filepath.Join(scripts, tc.script))
		cmd.Env = append(cleanEnv(), "NOVA_E2E_DIR="+testDir, "NOVA_E2E_PORT_BASE="+strconv.Itoa(testPortBase), "NOVA_E2E_HOST="+tc.host)
		out, err := cmd.CombinedOutput()
		var ee *exec.ExitError
		if !errors.As(err, &ee) || ee.ExitCode() != tc.code || !strings.Contains(string(out), tc.want) {
			t.Errorf("%s with NOVA_E2E_HOST=%q: %v, %s; want exit %d and %q", tc.script, tc.host, err, out, tc.code, tc.want)
		}
	}
}
