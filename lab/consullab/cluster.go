// Package consullab runs the lab's Consul servers: three server agents of
// the project's bin/consul as host processes, each on its own lab bridge
// address with Consul's standard ports and default limits, the way
// production runs them: ACLs on with default deny, gossip encrypted, RPC
// over TLS with verified clients and server names, and auto_encrypt so the
// client agents in the containers get their certificates from the
// servers. Bootstrap then sets the ACLs up as docs/acl.md tells an
// operator to.
//
// Everything it writes is under the cluster's directory (the lab gives
// $LAB_DIR/consul); secrets are mode 0600 there.
package consullab

import (
	"bytes"
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/google/uuid"
	"github.com/hashicorp/consul/api"
)

// Options shape a cluster. Start fills in the lab's.
type Options struct {
	// Dir holds everything the cluster writes; absolute.
	Dir string
	// Bin is the consul binary (the project's bin/consul).
	Bin string
	// Addrs are the servers' addresses (default ServerAddrs): 1, 3 or 5,
	// each an address of this host (netlab.Up adds them to the bridge).
	Addrs []netip.Addr
	// Log gets one line per change; nil discards.
	Log *slog.Logger
}

// Cluster is a running set of Consul servers.
type Cluster struct {
	// Dir is the cluster's directory.
	Dir string
	// Addrs are the servers' addresses; server i is Addrs[i].
	Addrs []netip.Addr
	// ManagementToken is the initial management token, also in
	// ManagementTokenFile (0600). For the ACL setup only.
	ManagementToken string
	// GossipKey is the gossip encryption key (consul keygen), also in
	// Dir/gossip.key (0600). Every client agent needs it.
	GossipKey string
	// CAPEM is the CA certificate (consul tls ca create), in CAFile:
	// client agents check the servers against it.
	CAPEM  []byte
	CAFile string

	bin string
	log *slog.Logger

	mu      sync.Mutex // guards servers
	servers []*server
}

// Start starts the lab's three servers (ServerAddrs) under dir with the
// consul binary bin, and waits until they elected a leader and their ACL
// system took the management token. See StartWith.
func Start(ctx context.Context, dir, bin string) (*Cluster, error) {
	return StartWith(ctx, Options{Dir: dir, Bin: bin})
}

// StartWith starts a new cluster: it refuses to when a server of o.Dir
// still runs, then replaces whatever an earlier cluster left in o.Dir (a
// fresh Raft state, CA, certificates, gossip key and management token
// each time) and starts the servers. On an error every server it started
// is stopped.
func StartWith(ctx context.Context, o Options) (*Cluster, error) {
	if len(o.Addrs) == 0 {
		o.Addrs = ServerAddrs
	}
	if o.Log == nil {
		o.Log = slog.New(slog.DiscardHandler)
	}
	if err := o.validate(); err != nil {
		return nil, fmt.Errorf("consullab: %w", err)
	}
	c := &Cluster{Dir: o.Dir, Addrs: slices.Clone(o.Addrs), bin: o.Bin, log: o.Log,
		CAFile: filepath.Join(o.Dir, "tls", "consul-agent-ca.pem")}
	for i := range c.Addrs {
		if pid, ok := livePID(c.serverDir(i)); ok {
			return nil, fmt.Errorf("consullab: server %d of %s still runs (pid %d): stop it first (StopDir, make lab-down)", i+1, o.Dir, pid)
		}
	}
	if err := c.makeFiles(ctx); err != nil {
		return nil, fmt.Errorf("consullab: %w", err)
	}
	c.servers = make([]*server, len(c.Addrs))
	for i := range c.Addrs {
		if err := c.start(i); err != nil {
			c.Stop()
			return nil, err
		}
	}
	if err := c.waitACL(ctx, 120*time.Second); err != nil {
		c.Stop()
		return nil, err
	}
	leader, _ := c.Leader(ctx)
	c.log.Info("consul servers up", "dir", c.Dir, "servers", c.Addrs, "leader", leader)
	return c, nil
}

func (o Options) validate() error {
	if !filepath.IsAbs(o.Dir) {
		return fmt.Errorf("dir %q: want an absolute path", o.Dir)
	}
	if st, err := os.Stat(o.Bin); err != nil || st.IsDir() || st.Mode()&0o111 == 0 {
		return fmt.Errorf("consul binary %q: not an executable file (make consul builds bin/consul)", o.Bin)
	}
	if n := len(o.Addrs); n != 1 && n != 3 && n != 5 {
		return fmt.Errorf("%d server addresses: want 1, 3 or 5", n)
	}
	local, err := localAddrs()
	if err != nil {
		return err
	}
	seen := map[netip.Addr]bool{}
	for _, a := range o.Addrs {
		if !a.Is4() || seen[a] {
			return fmt.Errorf("server address %s: want distinct IPv4 addresses", a)
		}
		seen[a] = true
		if !local[a] {
			return fmt.Errorf("server address %s is no address of this host: bring the lab's network up first (netlab.Up)", a)
		}
	}
	return nil
}

// localAddrs are the addresses of this host's interfaces.
func localAddrs() (map[netip.Addr]bool, error) {
	addrs, err := net.InterfaceAddrs()
	if err != nil {
		return nil, err
	}
	out := map[netip.Addr]bool{}
	for _, a := range addrs {
		if p, err := netip.ParsePrefix(a.String()); err == nil {
			out[p.Addr()] = true
		}
	}
	return out, nil
}

// ManagementTokenFile is where the management token is kept (0600).
func (c *Cluster) ManagementTokenFile() string { return filepath.Join(c.Dir, "management.token") }

// HTTPAddr is server i's HTTP API, host:port.
func (c *Cluster) HTTPAddr(i int) string {
	return netip.AddrPortFrom(c.Addrs[i], HTTPPort).String()
}

// Client is an API client of server i with token (empty: anonymous).
func (c *Cluster) Client(i int, token string) (*api.Client, error) {
	return api.NewClient(&api.Config{Address: c.HTTPAddr(i), Token: token})
}

func (c *Cluster) serverDir(i int) string { return filepath.Join(c.Dir, serverName(i)) }

// makeFiles replaces the cluster's files: the gossip key, the management
// token, the CA and a certificate per server, and each server's
// configuration.
func (c *Cluster) makeFiles(ctx context.Context) error {
	if err := os.MkdirAll(c.Dir, 0o700); err != nil {
		return err
	}
	old := []string{"tls", "tokens", "gossip.key", "management.token"}
	for i := range c.Addrs {
		old = append(old, serverName(i))
	}
	for _, name := range old {
		if err := os.RemoveAll(filepath.Join(c.Dir, name)); err != nil {
			return err
		}
	}
	key, err := c.consul(ctx, c.Dir, "keygen")
	if err != nil {
		return err
	}
	c.GossipKey = strings.TrimSpace(string(key))
	if b, err := base64.StdEncoding.DecodeString(c.GossipKey); err != nil || len(b) != 32 {
		return fmt.Errorf("consul keygen printed no 32-byte base64 key")
	}
	if c.ManagementToken, err = newUUID(); err != nil {
		return err
	}
	if err := writeSecret(filepath.Join(c.Dir, "gossip.key"), []byte(c.GossipKey+"\n")); err != nil {
		return err
	}
	if err := writeSecret(c.ManagementTokenFile(), []byte(c.ManagementToken+"\n")); err != nil {
		return err
	}
	if err := c.makeTLS(ctx); err != nil {
		return err
	}
	for i := range c.Addrs {
		cfg, err := c.serverConfig(i)
		if err != nil {
			return err
		}
		if err := writeSecret(filepath.Join(c.serverDir(i), "config.json"), cfg); err != nil {
			return err
		}
	}
	return nil
}

// makeTLS makes the CA (consul tls ca create) and each server's
// certificate (consul tls cert create -server -dc dc1: server.dc1.consul,
// which verify_server_hostname checks, plus the server's address).
func (c *Cluster) makeTLS(ctx context.Context) error {
	tlsDir := filepath.Dir(c.CAFile)
	if err := os.MkdirAll(tlsDir, 0o700); err != nil {
		return err
	}
	if _, err := c.consul(ctx, tlsDir, "tls", "ca", "create"); err != nil {
		return err
	}
	for i, a := range c.Addrs {
		if err := os.MkdirAll(c.serverDir(i), 0o700); err != nil {
			return err
		}
		if _, err := c.consul(ctx, tlsDir, "tls", "cert", "create", "-server", "-dc", Datacenter, "-additional-ipaddress", a.String()); err != nil {
			return err
		}
		// consul numbers the files it writes from the ones it finds: moved
		// away, the next one is -0 again.
		for _, f := range [][2]string{{"dc1-server-consul-0.pem", "server.pem"}, {"dc1-server-consul-0-key.pem", "server-key.pem"}} {
			if err := os.Rename(filepath.Join(tlsDir, f[0]), filepath.Join(c.serverDir(i), f[1])); err != nil {
				return err
			}
		}
		if err := os.Chmod(filepath.Join(c.serverDir(i), "server-key.pem"), 0o600); err != nil {
			return err
		}
	}
	pem, err := os.ReadFile(c.CAFile)
	if err != nil {
		return err
	}
	c.CAPEM = pem
	return nil
}

// consul runs a consul subcommand in dir and returns its standard output.
func (c *Cluster) consul(ctx context.Context, dir string, args ...string) ([]byte, error) {
	cmd := exec.CommandContext(ctx, c.bin, args...)
	cmd.Dir = dir
	cmd.Env = cleanEnv()
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return nil, fmt.Errorf("consul %s: %w: %s", strings.Join(args, " "), err, bytes.TrimSpace(stderr.Bytes()))
	}
	return out, nil
}

// cleanEnv is the environment without CONSUL_* and OS_* variables: an
// operator's shell settings never reach the lab's processes.
func cleanEnv() []string {
	var env []string
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "CONSUL_") && !strings.HasPrefix(kv, "OS_") {
			env = append(env, kv)
		}
	}
	return env
}

// writeSecret writes data to path, mode 0600, through a temporary file,
// so no reader sees a partial file.
func writeSecret(path string, data []byte) error {
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		return err
	}
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, data, 0o600); err != nil {
		return err
	}
	if err := os.Chmod(tmp, 0o600); err != nil { // an old tmp file's mode
		return err
	}
	return os.Rename(tmp, path)
}

// newUUID is a random token secret in Consul's form (a version 4 UUID).
func newUUID() (string, error) {
	u, err := uuid.NewRandom()
	if err != nil {
		return "", err
	}
	return u.String(), nil
}

// ErrNoLeader is Leader's answer when the running servers name no leader,
// or disagree.
var ErrNoLeader = errors.New("consullab: no cluster leader")

// Leader asks every running server which server leads, and returns that
// server's index when they all name the same running one.
func (c *Cluster) Leader(ctx context.Context) (int, error) {
	leader, asked := "", 0
	for i := range c.Addrs {
		if !c.Running(i) {
			continue
		}
		cl, err := c.Client(i, "")
		if err != nil {
			return -1, err
		}
		qctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		l, err := cl.Status().LeaderWithQueryOptions((&api.QueryOptions{}).WithContext(qctx))
		cancel()
		if err != nil || l == "" || (asked > 0 && l != leader) {
			return -1, ErrNoLeader
		}
		leader, asked = l, asked+1
	}
	for i, a := range c.Addrs {
		if leader == netip.AddrPortFrom(a, ServerPort).String() && c.Running(i) {
			return i, nil
		}
	}
	return -1, ErrNoLeader
}

// WaitLeader waits up to limit for Leader to name one.
func (c *Cluster) WaitLeader(ctx context.Context, limit time.Duration) (int, error) {
	ctx, cancel := context.WithTimeout(ctx, limit)
	defer cancel()
	for {
		i, err := c.Leader(ctx)
		if err == nil {
			return i, nil
		}
		select {
		case <-ctx.Done():
			return -1, fmt.Errorf("consullab: no leader after %s: %w", limit, err)
		case <-time.After(200 * time.Millisecond):
		}
	}
}

// waitACL waits until there is a leader and every server accepts the
// management token (the leader makes it when it first leads).
func (c *Cluster) waitACL(ctx context.Context, limit time.Duration) error {
	start := time.Now()
	if _, err := c.WaitLeader(ctx, limit); err != nil {
		return err
	}
	for i := range c.Addrs {
		cl, err := c.Client(i, c.ManagementToken)
		if err != nil {
			return err
		}
		for {
			qctx, cancel := context.WithTimeout(ctx, 2*time.Second)
			_, _, err := cl.ACL().TokenReadSelf((&api.QueryOptions{}).WithContext(qctx))
			cancel()
			if err == nil {
				break
			}
			if time.Since(start) > limit {
				return fmt.Errorf("consullab: server %d does not take the management token after %s: %w", i+1, limit, err)
			}
			select {
			case <-ctx.Done():
				return ctx.Err()
			case <-time.After(200 * time.Millisecond):
			}
		}
	}
	return nil
}

// pidFile is where server i's PID is recorded.
func pidFile(serverDir string) string { return filepath.Join(serverDir, "consul.pid") }

// livePID is the PID recorded in serverDir when that process still runs
// the server of serverDir (its command line names serverDir's config).
func livePID(serverDir string) (int, bool) {
	b, err := os.ReadFile(pidFile(serverDir))
	if err != nil {
		return 0, false
	}
	pid, err := strconv.Atoi(strings.TrimSpace(string(b)))
	if err != nil || pid <= 0 {
		return 0, false
	}
	cmdline, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/cmdline")
	if err != nil || !bytes.Contains(cmdline, []byte(filepath.Join(serverDir, "config.json"))) {
		return 0, false
	}
	stat, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return 0, false
	}
	// A zombie (field 3 "Z") is not running.
	if i := bytes.LastIndexByte(stat, ')'); i < 0 || bytes.HasPrefix(stat[i+1:], []byte(" Z")) {
		return 0, false
	}
	return pid, true
}
