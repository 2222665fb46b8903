//go:build lab

package consullab

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/hashicorp/consul/api"
	"github.com/miekg/dns"

	"github.com/jiocloud/orchestrate/internal/consultest"
	"github.com/jiocloud/orchestrate/internal/nodeid"
	"github.com/jiocloud/orchestrate/lab/netlab"
)

// The tests' network: a bridge of their own (beside a running lab and
// other packages' tests), the three servers, and host addresses for the
// client agents the tests run.
var (
	servers  = []netip.Addr{netip.MustParseAddr("198.19.2.11"), netip.MustParseAddr("198.19.2.12"), netip.MustParseAddr("198.19.2.13")}
	client   = netip.MustParseAddr("198.19.2.21")
	keyless  = netip.MustParseAddr("198.19.2.22")
	certless = netip.MustParseAddr("198.19.2.23")
)

func testNet(t *testing.T) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Fatal("the lab's tests need root (bridges, nftables)")
	}
	cfg := netlab.Config{Bridge: "orchlabc0", Table: "orchlabc", Host: netip.MustParsePrefix("198.19.2.1/24"),
		Extra: append(slices.Clone(servers), client, keyless, certless)}
	ctx := context.Background()
	n, err := netlab.Up(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := n.Down(context.Background()); err != nil {
			t.Error(err)
		}
	})
}

func startCluster(t *testing.T) *Cluster {
	t.Helper()
	testNet(t)
	bin := consultest.RequireBinary(t)
	dir := filepath.Join(t.TempDir(), "consul")
	start := time.Now()
	c, err := StartWith(context.Background(), Options{Dir: dir, Bin: bin, Addrs: servers})
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("3 servers up, leader elected, ACLs ready in %s", time.Since(start).Round(100*time.Millisecond))
	t.Cleanup(func() {
		for i := range c.Addrs {
			if b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", c.PID(i))); err == nil {
				for _, l := range strings.Split(string(b), "\n") {
					if strings.HasPrefix(l, "VmRSS:") {
						t.Logf("%s: %s", serverName(i), strings.Join(strings.Fields(l), " "))
					}
				}
			}
		}
		c.Stop()
		if t.Failed() {
			for i := range c.Addrs {
				b, _ := os.ReadFile(filepath.Join(c.serverDir(i), "consul.log"))
				t.Logf("%s's log (end):\n%s", serverName(i), tail(b, 3000))
			}
		}
	})
	return c
}

func tail(b []byte, n int) []byte {
	if len(b) > n {
		return b[len(b)-n:]
	}
	return b
}

func kv(t *testing.T, c *Cluster, i int) *api.KV {
	t.Helper()
	cl, err := c.Client(i, c.ManagementToken)
	if err != nil {
		t.Fatal(err)
	}
	return cl.KV()
}

func put(c *Cluster, i int, key, value string) error {
	cl, err := c.Client(i, c.ManagementToken)
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	_, err = cl.KV().Put(&api.KVPair{Key: key, Value: []byte(value)}, (&api.WriteOptions{}).WithContext(ctx))
	return err
}

func waitFor(t *testing.T, what string, limit time.Duration, ok func() bool) {
	t.Helper()
	deadline := time.Now().Add(limit)
	for !ok() {
		if time.Now().After(deadline) {
			t.Fatalf("%s: not after %s", what, limit)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// TestServersQuorum: three servers elect a leader; the leader killed
// (SIGKILL), the other two elect another and take writes; a second killed,
// quorum is lost (no leader, writes refused); both back, a leader again,
// no write lost. Each server listens on its own address only, on Consul's
// standard ports.
func TestServersQuorum(t *testing.T) {
	c := startCluster(t)
	ctx := context.Background()
	first, err := c.Leader(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for i := range c.Addrs {
		peers, err := func() ([]string, error) {
			cl, _ := c.Client(i, "")
			return cl.Status().Peers()
		}()
		if err != nil || len(peers) != 3 {
			t.Fatalf("server %d's raft peers: %v (%v), want 3", i+1, peers, err)
		}
	}
	if err := put(c, first, "lab/a", "1"); err != nil {
		t.Fatal(err)
	}
	for i, a := range c.Addrs {
		got := listening(t, c.PID(i))
		want := []string{"tcp 8300", "tcp 8301", "tcp 8302", "tcp 8500", "tcp 8503", "tcp 8600", "udp 8301", "udp 8302", "udp 8600"}
		if !slices.Equal(got[a.String()], want) || len(got) != 1 {
			t.Fatalf("%s listens on %v, want %s only, on %v", serverName(i), got, a, want)
		}
	}

	if err := c.Kill(first); err != nil {
		t.Fatal(err)
	}
	killed := time.Now()
	second, err := c.WaitLeader(ctx, 60*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("leader %s killed: %s leads after %s", serverName(first), serverName(second), time.Since(killed).Round(100*time.Millisecond))
	if second == first {
		t.Fatalf("leader %d after it was killed", first+1)
	}
	if err := put(c, second, "lab/b", "2"); err != nil {
		t.Fatalf("a write with one server of three gone: %v", err)
	}

	if err := c.Kill(second); err != nil {
		t.Fatal(err)
	}
	killed = time.Now()
	last := 3 - first - second
	// The last server itself says there is no leader (not only that the
	// one it named is dead).
	lastCl, _ := c.Client(last, "")
	waitFor(t, "no leader with two servers of three gone", 60*time.Second, func() bool {
		l, err := lastCl.Status().Leader()
		return err == nil && l == ""
	})
	if _, err := c.Leader(ctx); !errors.Is(err, ErrNoLeader) {
		t.Fatalf("Leader without quorum: %v", err)
	}
	t.Logf("second server killed: no leader after %s", time.Since(killed).Round(100*time.Millisecond))
	if err := put(c, last, "lab/c", "3"); err == nil {
		t.Fatal("a write succeeded without quorum")
	}

	restarted := time.Now()
	for _, i := range []int{first, second} {
		if err := c.Restart(ctx, i); err != nil {
			t.Fatal(err)
		}
	}
	leader, err := c.WaitLeader(ctx, 90*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("both restarted: %s leads after %s", serverName(leader), time.Since(restarted).Round(100*time.Millisecond))
	waitFor(t, "writes after quorum came back", 60*time.Second, func() bool { return put(c, leader, "lab/c", "3") == nil })
	for key, want := range map[string]string{"lab/a": "1", "lab/b": "2", "lab/c": "3"} {
		p, _, err := kv(t, c, last).Get(key, &api.QueryOptions{RequireConsistent: true})
		if err != nil || p == nil || string(p.Value) != want {
			t.Fatalf("%s after recovery: %v %v, want %s", key, p, err, want)
		}
	}
	if c.PID(first) == 0 || c.Running(3) || c.PID(-1) != 0 {
		t.Fatal("PID/Running of servers out of range or restarted")
	}
}

// agent runs a client agent on the host at addr, configured as the
// shipped user data configures a node's (examples/user-data.yaml) with
// the cluster's CA, and edit's changes; token is its agent and default
// token. It returns the agent's API client (management token).
func agent(t *testing.T, c *Cluster, name string, addr netip.Addr, token string, edit func(map[string]any)) *api.Client {
	t.Helper()
	dir := filepath.Join(t.TempDir(), name)
	join := make([]string, len(c.Addrs))
	for i, a := range c.Addrs {
		join[i] = a.String()
	}
	cfg := map[string]any{
		"node_name": name, "datacenter": Datacenter, "data_dir": filepath.Join(dir, "data"), "server": false,
		"retry_join": join, "bind_addr": addr.String(), "client_addr": addr.String(),
		"leave_on_terminate": true, "disable_update_check": true,
		"encrypt": c.GossipKey, "encrypt_verify_incoming": true, "encrypt_verify_outgoing": true,
		"auto_encrypt": map[string]any{"tls": true},
		"tls": map[string]any{
			"defaults":     map[string]any{"ca_file": c.CAFile, "verify_outgoing": true},
			"internal_rpc": map[string]any{"verify_server_hostname": true},
		},
		"acl":   map[string]any{"enabled": true, "default_policy": "deny", "enable_token_persistence": false, "tokens": map[string]string{"agent": token, "default": token}},
		"ports": map[string]any{"https": 8501},
	}
	if edit != nil {
		edit(cfg)
	}
	b, _ := json.Marshal(cfg)
	if err := writeSecret(filepath.Join(dir, "agent.json"), b); err != nil {
		t.Fatal(err)
	}
	logf, err := os.Create(filepath.Join(dir, "consul.log"))
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(c.bin, "agent", "-config-file", filepath.Join(dir, "agent.json"))
	cmd.Stdout, cmd.Stderr, cmd.Env = logf, logf, cleanEnv()
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = cmd.Process.Signal(syscall.SIGTERM)
		_ = cmd.Wait()
		logf.Close()
		if t.Failed() {
			b, _ := os.ReadFile(logf.Name())
			t.Logf("%s's log (end):\n%s", name, tail(b, 3000))
		}
	})
	cl, err := api.NewClient(&api.Config{Address: netip.AddrPortFrom(addr, HTTPPort).String(), Token: c.ManagementToken})
	if err != nil {
		t.Fatal(err)
	}
	// Up once its HTTP API answers at all: what it answers may take RPC,
	// which an agent without a certificate cannot make.
	hc := &http.Client{Timeout: 2 * time.Second}
	waitFor(t, name+"'s HTTP API", 60*time.Second, func() bool {
		resp, err := hc.Get("http://" + netip.AddrPortFrom(addr, HTTPPort).String() + "/v1/status/leader")
		if err == nil {
			resp.Body.Close()
		}
		return err == nil
	})
	return cl
}

// nodeToken is name's own token, as a node gets: its node identity.
func nodeToken(t *testing.T, c *Cluster, name string) string {
	t.Helper()
	cl, err := c.Client(0, c.ManagementToken)
	if err != nil {
		t.Fatal(err)
	}
	tok, _, err := cl.ACL().TokenCreate(&api.ACLToken{NodeIdentities: []*api.ACLNodeIdentity{{NodeName: name, Datacenter: Datacenter}}}, nil)
	if err != nil {
		t.Fatal(err)
	}
	return tok.SecretID
}

func members(t *testing.T, c *Cluster) map[string]int {
	t.Helper()
	cl, err := c.Client(0, c.ManagementToken)
	if err != nil {
		t.Fatal(err)
	}
	ms, err := cl.Agent().Members(false)
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]int{}
	for _, m := range ms {
		out[m.Name] = m.Status
	}
	return out
}

// TestClientAgents: an agent configured as the shipped user data does,
// with the gossip key, the CA and its node's own token, joins, gets its
// certificate from the servers (auto_encrypt: it serves HTTPS with a
// certificate of the servers' Connect CA for its node) and its RPC works
// (the servers verify incoming RPC, so that takes the certificate). An
// agent with the key but neither a certificate nor auto_encrypt joins the
// gossip but its RPC is refused. An agent without the key cannot join.
func TestClientAgents(t *testing.T) {
	c := startCluster(t)

	good := agent(t, c, "lab-client", client, nodeToken(t, c, "lab-client"), nil)
	waitFor(t, "lab-client alive among the members", 60*time.Second, func() bool { return members(t, c)["lab-client"] == 1 })
	waitFor(t, "lab-client's RPC (a KV write through it)", 60*time.Second, func() bool {
		_, err := good.KV().Put(&api.KVPair{Key: "lab/client", Value: []byte("ok")}, nil)
		return err == nil
	})
	waitFor(t, "lab-client registered in the catalog by its own token", 30*time.Second, func() bool {
		n, _, err := good.Catalog().Node("lab-client", nil)
		return err == nil && n != nil && n.Node != nil
	})
	roots, _, err := good.Agent().ConnectCARoots(nil)
	if err != nil || len(roots.Roots) == 0 {
		t.Fatalf("connect CA roots: %v %v", roots, err)
	}
	pool := x509.NewCertPool()
	for _, r := range roots.Roots {
		pool.AppendCertsFromPEM([]byte(r.RootCertPEM))
	}
	conn, err := tls.Dial("tcp", netip.AddrPortFrom(client, 8501).String(), &tls.Config{InsecureSkipVerify: true})
	if err != nil {
		t.Fatalf("the client's HTTPS: %v", err)
	}
	leaf := conn.ConnectionState().PeerCertificates
	conn.Close()
	if len(leaf) == 0 {
		t.Fatal("the client presented no certificate")
	}
	inter := x509.NewCertPool()
	for _, c := range leaf[1:] {
		inter.AddCert(c)
	}
	if _, err := leaf[0].Verify(x509.VerifyOptions{Roots: pool, Intermediates: inter, KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageAny}}); err != nil {
		t.Fatalf("the client's certificate is not the servers' Connect CA's: %v", err)
	}
	if u := leaf[0].URIs; len(u) != 1 || !strings.HasSuffix(u[0].String(), "/agent/client/dc/dc1/id/lab-client") {
		t.Fatalf("the client's certificate names %v, want its own agent identity", u)
	}

	noCert := agent(t, c, "lab-nocert", certless, nodeToken(t, c, "lab-nocert"), func(m map[string]any) {
		delete(m, "auto_encrypt")
		delete(m, "ports")
	})
	waitFor(t, "lab-nocert alive among the members (it has the key)", 60*time.Second, func() bool { return members(t, c)["lab-nocert"] == 1 })
	for range 3 {
		if _, err := noCert.KV().Put(&api.KVPair{Key: "lab/nocert", Value: []byte("x")}, nil); err == nil {
			t.Fatal("an agent without a certificate wrote through RPC: the servers do not verify incoming RPC")
		}
		time.Sleep(time.Second) // three attempts a second apart
	}

	// Without servers (it learns them by gossip) the keyless agent cannot
	// resolve a token: it is asked with its agent recovery token, which
	// it resolves alone.
	recovery, _ := newUUID()
	agent(t, c, "lab-keyless", keyless, nodeToken(t, c, "lab-keyless"), func(m map[string]any) {
		for _, k := range []string{"encrypt", "encrypt_verify_incoming", "encrypt_verify_outgoing", "ports"} {
			delete(m, k)
		}
		m["acl"].(map[string]any)["tokens"].(map[string]string)["agent_recovery"] = recovery
	})
	badRec, err := api.NewClient(&api.Config{Address: netip.AddrPortFrom(keyless, HTTPPort).String(), Token: recovery})
	if err != nil {
		t.Fatal(err)
	}
	err = badRec.Agent().Join(servers[0].String(), false)
	if err == nil || !strings.Contains(err.Error(), "Remote state is encrypted") {
		t.Fatalf("an agent without the gossip key joining: %v, want a refusal for the encryption", err)
	}
	t.Logf("join without the key: %q", err)
	time.Sleep(3 * time.Second) // gossip rounds in which it must not show among the members
	if _, in := members(t, c)["lab-keyless"]; in {
		t.Fatal("an agent without the gossip key is among the servers' members")
	}
	if ms, err := badRec.Agent().Members(false); err != nil || len(ms) != 1 || ms[0].Name != "lab-keyless" {
		t.Fatalf("the keyless agent's own members: %v %v, want itself alone", ms, err)
	}
}

// TestStopDirAfterACrash: servers a crashed run left (their Cluster lost)
// make Start refuse the directory, naming the PID; StopDir stops them by
// their recorded PIDs; Start then works on the same directory.
func TestStopDirAfterACrash(t *testing.T) {
	testNet(t)
	bin := consultest.RequireBinary(t)
	dir := filepath.Join(t.TempDir(), "consul")
	ctx := context.Background()
	lost, err := StartWith(ctx, Options{Dir: dir, Bin: bin, Addrs: servers})
	if err != nil {
		t.Fatal(err)
	}
	pids := []int{lost.PID(0), lost.PID(1), lost.PID(2)}
	t.Cleanup(lost.Stop)
	if _, err := StartWith(ctx, Options{Dir: dir, Bin: bin, Addrs: servers}); err == nil || !strings.Contains(err.Error(), "still runs") {
		t.Fatalf("Start over running servers: %v", err)
	}
	if err := StopDir(ctx, dir); err != nil {
		t.Fatal(err)
	}
	for i := range 3 {
		if lost.Running(i) {
			t.Fatalf("server %d (pid %d) still runs after StopDir", i+1, pids[i])
		}
	}
	if err := StopDir(ctx, dir); err != nil {
		t.Fatalf("StopDir with nothing running: %v", err)
	}
	again, err := StartWith(ctx, Options{Dir: dir, Bin: bin, Addrs: servers})
	if err != nil {
		t.Fatal(err)
	}
	again.Stop()
	again.Stop()
}

// TestStartRefusesBadOptions: what Start cannot run with is named, and
// nothing is started or written.
func TestStartRefusesBadOptions(t *testing.T) {
	testNet(t)
	bin := consultest.RequireBinary(t)
	dir := filepath.Join(t.TempDir(), "c")
	for _, tc := range []struct {
		name string
		o    Options
		want string
	}{
		{"relative dir", Options{Dir: "consul", Bin: bin}, "absolute"},
		{"no binary", Options{Dir: dir, Bin: filepath.Join(dir, "nosuch")}, "not an executable"},
		{"a directory as binary", Options{Dir: dir, Bin: "/"}, "not an executable"},
		{"two servers", Options{Dir: dir, Bin: bin, Addrs: servers[:2]}, "want 1, 3 or 5"},
		{"twice the same", Options{Dir: dir, Bin: bin, Addrs: []netip.Addr{servers[0], servers[0], servers[1]}}, "distinct"},
		{"not this host's", Options{Dir: dir, Bin: bin, Addrs: []netip.Addr{netip.MustParseAddr("198.18.254.1")}}, "no address of this host"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if _, err := StartWith(context.Background(), tc.o); err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("StartWith: %v, want %q", err, tc.want)
			}
		})
	}
	if _, err := os.Stat(dir); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("a refused start wrote %s: %v", dir, err)
	}
}

// reaperConfig is a reaper.yaml with node_identity and two roles: db (2,
// autoscaled up to 4) and lb (1, a warm pool of 1).
func reaperConfig(t *testing.T, dir string) string {
	t.Helper()
	_, pemKey, err := nodeid.NewKey()
	if err != nil {
		t.Fatal(err)
	}
	keyFile := filepath.Join(dir, "node-identity.key")
	if err := writeSecret(keyFile, pemKey); err != nil {
		t.Fatal(err)
	}
	cfg := `node_identity: {key_file: ` + keyFile + `}
roles:
  - name: db
    desired: 2
    boot: {flavor: lab.small, image: lab-image, networks: [none], name_template: "db{n}"}
    autoscale:
      metric: {source: consul, name: load, max_age: 10s}
      target: 0.6
      min: 2
      max: 4
  - name: lb
    desired: 1
    boot: {flavor: lab.small, image: lab-image, networks: [none], name_template: "lb{n}"}
    warm_pool: {size: 1}
`
	path := filepath.Join(dir, "reaper.yaml")
	if err := os.WriteFile(path, []byte(cfg), 0o644); err != nil {
		t.Fatal(err)
	}
	return path
}

// TestBootstrap: with the management token, Bootstrap installs the
// shipped policies as the files say, makes the reaper, operator and DNS
// tokens (files 0600) that can do what docs/acl.md gives each and no more,
// sets the servers' DNS token (Consul DNS answers), and runs `reaper
// identity --apply`: a login with the reaper's key gets db1's own token,
// and not one for a name no role builds. A second Bootstrap keeps the
// tokens.
func TestBootstrap(t *testing.T) {
	c := startCluster(t)
	ctx := context.Background()
	tmp := t.TempDir()
	reaperBin := filepath.Join(tmp, "reaper")
	if out, err := exec.Command("go", "build", "-o", reaperBin, "github.com/jiocloud/orchestrate/cmd/reaper").CombinedOutput(); err != nil {
		t.Fatalf("go build reaper: %v: %s", err, out)
	}
	aclDir, err := filepath.Abs("../../packaging/acl")
	if err != nil {
		t.Fatal(err)
	}
	opts := BootstrapOptions{ACLDir: aclDir, Reaper: reaperBin, ReaperConfig: reaperConfig(t, tmp)}
	toks, err := c.Bootstrap(ctx, opts)
	if err != nil {
		t.Fatal(err)
	}

	for _, f := range []string{c.ManagementTokenFile(), filepath.Join(c.Dir, "gossip.key"), c.TokenFile("reaper"), c.TokenFile("operator"),
		c.TokenFile("dns"), filepath.Join(c.serverDir(0), "config.json"), filepath.Join(c.serverDir(0), "server-key.pem"),
		filepath.Join(c.Dir, "tls", "consul-agent-ca-key.pem")} {
		st, err := os.Stat(f)
		if err != nil || st.Mode().Perm() != 0o600 {
			t.Errorf("%s: %v, mode %v, want 0600", f, err, st.Mode().Perm())
		}
	}
	if b, _ := os.ReadFile(c.TokenFile("reaper")); strings.TrimSpace(string(b)) != toks.Reaper {
		t.Fatal("reaper.token does not hold the reaper's token")
	}

	mgmt, _ := c.Client(0, c.ManagementToken)
	for _, p := range shippedPolicies {
		want, _ := os.ReadFile(filepath.Join(aclDir, p[1]))
		got, _, err := mgmt.ACL().PolicyReadByName(p[0], nil)
		if err != nil || got == nil || got.Rules != string(want) {
			t.Fatalf("policy %s: %v, rules differ from %s", p[0], err, p[1])
		}
	}
	self := func(secret string) *api.ACLToken {
		cl, _ := c.Client(0, secret)
		tok, _, err := cl.ACL().TokenReadSelf(nil)
		if err != nil {
			t.Fatal(err)
		}
		return tok
	}
	if r := self(toks.Reaper); len(r.Policies) != 1 || r.Policies[0].Name != "orchestrate-reaper" || len(r.Roles)+len(r.NodeIdentities)+len(r.ServiceIdentities)+len(r.TemplatedPolicies) != 0 {
		t.Fatalf("the reaper's token: %+v, want exactly orchestrate-reaper", r)
	}
	if d := self(toks.DNS); len(d.TemplatedPolicies) != 1 || d.TemplatedPolicies[0].TemplateName != api.ACLTemplatedPolicyDNSName || len(d.Policies) != 0 {
		t.Fatalf("the DNS token: %+v", d)
	}
	can := func(secret, key string) bool {
		cl, _ := c.Client(0, secret)
		_, err := cl.KV().Put(&api.KVPair{Key: key, Value: []byte("x")}, nil)
		return err == nil
	}
	for _, tc := range []struct {
		who, secret, key string
		want             bool
	}{
		{"reaper", toks.Reaper, "orchestrate/reaper/x", true},
		{"reaper", toks.Reaper, "elsewhere/x", false},
		{"operator", toks.Operator, "orchestrate/current_version", true},
		{"operator", toks.Operator, "elsewhere/x", false},
		{"dns", toks.DNS, "orchestrate/x", false},
	} {
		if got := can(tc.secret, tc.key); got != tc.want {
			t.Errorf("%s writing %s: %v, want %v", tc.who, tc.key, got, tc.want)
		}
	}
	opCl, _ := c.Client(0, toks.Operator)
	if nodes, _, err := opCl.Catalog().Nodes(nil); err != nil || len(nodes) != 3 {
		t.Fatalf("the operator reading the catalog: %d nodes, %v; want the 3 servers (registered with their agent tokens)", len(nodes), err)
	}
	reCl, _ := c.Client(0, toks.Reaper)
	if _, _, err := reCl.ACL().TokenList(nil); err == nil {
		t.Fatal("the reaper's token lists ACL tokens")
	}

	// Consul DNS, answered with the servers' DNS token.
	m := new(dns.Msg)
	m.SetQuestion("consul.service.consul.", dns.TypeA)
	waitFor(t, "consul.service.consul with the 3 servers", 30*time.Second, func() bool {
		r, err := dns.Exchange(m, netip.AddrPortFrom(servers[1], DNSPort).String())
		return err == nil && len(r.Answer) == 3
	})

	// reaper identity --apply: db may be built up to 4 + max_in_flight
	// + 5 extra names; web is no role.
	key, err := nodeid.LoadKey(filepath.Join(tmp, "node-identity.key"))
	if err != nil {
		t.Fatal(err)
	}
	anon, _ := c.Client(0, "")
	minter, err := nodeid.NewMinter(anon, key, nodeid.DefaultAuthMethod, nodeid.DefaultAudience)
	if err != nil {
		t.Fatal(err)
	}
	id, err := minter.Mint(ctx, "db1", "db")
	if err != nil {
		t.Fatalf("login for db1 with the reaper's key: %v", err)
	}
	db1 := self(id.Secret)
	if len(db1.NodeIdentities) != 1 || db1.NodeIdentities[0].NodeName != "db1" {
		t.Fatalf("db1's token: %+v", db1)
	}
	if !can(id.Secret, "orchestrate/hosts/db1/version") || can(id.Secret, "orchestrate/hosts/db2/version") {
		t.Fatal("db1's token: want its own records writable, not db2's")
	}
	if _, err := minter.Mint(ctx, "web1", "web"); err == nil {
		t.Fatal("a token for web1, which no role builds")
	}

	again, err := c.Bootstrap(ctx, opts)
	if err != nil {
		t.Fatal(err)
	}
	if *again != *toks {
		t.Fatal("a second Bootstrap made new tokens")
	}
}

// listening maps each local address pid has a listening TCP or bound UDP
// socket on to its "proto port"s, sorted.
func listening(t *testing.T, pid int) map[string][]string {
	t.Helper()
	inodes := map[string]bool{}
	fds, err := os.ReadDir(fmt.Sprintf("/proc/%d/fd", pid))
	if err != nil {
		t.Fatal(err)
	}
	for _, fd := range fds {
		l, err := os.Readlink(fmt.Sprintf("/proc/%d/fd/%s", pid, fd.Name()))
		if err == nil && strings.HasPrefix(l, "socket:[") {
			inodes[strings.TrimSuffix(strings.TrimPrefix(l, "socket:["), "]")] = true
		}
	}
	out := map[string][]string{}
	for _, proto := range []string{"tcp", "udp", "tcp6", "udp6"} {
		b, err := os.ReadFile("/proc/net/" + proto)
		if err != nil {
			t.Fatal(err)
		}
		for _, line := range strings.Split(string(b), "\n")[1:] {
			f := strings.Fields(line)
			if len(f) < 10 || !inodes[f[9]] || (strings.HasPrefix(proto, "tcp") && f[3] != "0A") || (strings.HasPrefix(proto, "udp") && f[2] != "00000000:0000") {
				continue
			}
			h, port, _ := strings.Cut(f[1], ":")
			var addr string
			if len(h) == 8 {
				var b [4]byte
				fmt.Sscanf(h, "%02x%02x%02x%02x", &b[3], &b[2], &b[1], &b[0])
				addr = netip.AddrFrom4(b).String()
			} else {
				addr = "ipv6:" + h
			}
			var n int
			fmt.Sscanf(port, "%x", &n)
			out[addr] = append(out[addr], fmt.Sprintf("%s %d", strings.TrimSuffix(proto, "6"), n))
		}
	}
	for _, v := range out {
		slices.Sort(v)
	}
	return out
}
