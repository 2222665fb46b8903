// Package consultest starts real Consul agents for tests: dev servers, and
// client agents joined to one.
//
// The consul binary is built from the Go module proxy by `make consul`
// (the module in ./consul) into bin/consul. Tests find it through
// $CONSUL_BIN, then bin/consul at the repository root, then $PATH. When it is
// missing a test skips with a message saying how to build it, except under
// CI=true, where a missing binary fails the test: CI must never count a
// skipped Consul test as passing.
//
// Every agent binds HTTP, DNS, serf, server RPC and gRPC to free ports on
// 127.0.0.1 only, and is stopped when the test ends.
package consultest

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/hashicorp/consul/api"

	"github.com/jiocloud/orchestrate/internal/testutil"
)

// Agent is a running consul dev agent.
type Agent struct {
	// NodeName and Datacenter are the agent's own.
	NodeName   string
	Datacenter string
	// HTTPAddr is host:port of the HTTP API; DNSAddr of the DNS server.
	HTTPAddr string
	DNSAddr  string
	// Ports chosen for this agent.
	Ports Ports
	// Client talks to the agent's HTTP API (with Token, if any).
	Client *api.Client
	// Token is the initial management token when ACLs are enabled.
	Token string
	// LogPath is where the agent's output goes.
	LogPath string

	// mu guards the process: Stop and Restart take it.
	mu      sync.Mutex
	bin     string
	args    []string
	env     []string
	cmd     *exec.Cmd
	waitErr chan error
	stopped bool
}

// Ports are the agent's listeners, all on 127.0.0.1.
type Ports struct {
	HTTP, DNS, SerfLAN, SerfWAN, Server, GRPC int
}

// Options shape an agent. The zero value is a plain dev agent in dc1.
type Options struct {
	// NodeName defaults to "node-<http port>".
	NodeName string
	// Datacenter defaults to dc1.
	Datacenter string
	// ACLToken, when set, enables ACLs with default policy deny and this
	// initial management token.
	ACLToken string
	// HCL is extra agent configuration appended after orchestrate's own.
	HCL string
	// ConfigDir, when set, is a configuration directory the agent also
	// loads (-config-dir), as /etc/consul.d on a node: files written
	// there later take effect on a reload.
	ConfigDir string
	// RetryJoinWAN lists serf WAN addresses to join (a second datacenter).
	RetryJoinWAN []string
	// HandlerEnv sets CONSUL_HTTP_ADDR to the agent's own HTTP address in
	// the agent's environment, which its watch handlers inherit: as on a
	// production node, where handlers reach their agent at the default
	// address without being told.
	HandlerEnv bool
	// Env is more environment for the agent process and so its handlers.
	Env []string
	// JoinLAN, when set, makes a client agent (not a dev server) with a
	// data directory of its own, joining the server at this serf LAN
	// address (Agent.SerfLANAddr): a node's agent in a real cluster, which
	// Restart can stop and start again with its state.
	JoinLAN string
}

// Binary returns the path of the consul binary to test against.
func Binary() (string, error) {
	if p := os.Getenv("CONSUL_BIN"); p != "" {
		if _, err := os.Stat(p); err != nil {
			return "", fmt.Errorf("CONSUL_BIN=%s: %w", p, err)
		}
		return p, nil
	}
	if root, err := testutil.RepoRoot(); err == nil {
		p := filepath.Join(root, "bin", "consul")
		if _, err := os.Stat(p); err == nil {
			return p, nil
		}
	}
	p, err := exec.LookPath("consul")
	if err != nil {
		return "", errors.New("no consul binary: run `make consul` (builds bin/consul from the Go module proxy) or set CONSUL_BIN")
	}
	return p, nil
}

// RequireBinary returns the consul binary, skipping the test when it is
// missing, or failing it under CI=true.
func RequireBinary(t testing.TB) string {
	t.Helper()
	bin, err := Binary()
	if err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatalf("CI=true and %v", err)
		}
		t.Skipf("skipping: %v", err)
	}
	return bin
}

// Start starts a dev agent for the test and stops it at the end of it.
func Start(t testing.TB, opts Options) *Agent {
	t.Helper()
	bin := RequireBinary(t)
	var a *Agent
	var err error
	// A free port found now can be taken by another process before the agent
	// binds it; try a few times with fresh ports.
	for attempt := 0; attempt < 3; attempt++ {
		a, err = New(context.Background(), bin, t.TempDir(), opts)
		if err == nil {
			break
		}
	}
	if err != nil {
		t.Fatalf("start consul agent: %v", err)
	}
	t.Cleanup(func() {
		if t.Failed() {
			if data, err := os.ReadFile(a.LogPath); err == nil {
				t.Logf("consul agent log (%s):\n%s", a.LogPath, tail(data, 4000))
			}
		}
		a.Stop()
	})
	return a
}

func tail(b []byte, n int) []byte {
	if len(b) > n {
		return b[len(b)-n:]
	}
	return b
}

// New starts a dev agent (a client agent with Options.JoinLAN) with its data
// and log under dir, and waits until it has a leader and its own node is in
// the catalog. Callers must Stop it.
func New(ctx context.Context, bin, dir string, opts Options) (*Agent, error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, err
	}
	ports, err := freePorts(6)
	if err != nil {
		return nil, err
	}
	a := &Agent{
		Ports:      Ports{HTTP: ports[0], DNS: ports[1], SerfLAN: ports[2], SerfWAN: ports[3], Server: ports[4], GRPC: ports[5]},
		Datacenter: opts.Datacenter,
		NodeName:   opts.NodeName,
		Token:      opts.ACLToken,
		LogPath:    filepath.Join(dir, "consul.log"),
	}
	if a.Datacenter == "" {
		a.Datacenter = "dc1"
	}
	if a.NodeName == "" {
		a.NodeName = "node-" + strconv.Itoa(a.Ports.HTTP)
	}
	a.HTTPAddr = net.JoinHostPort("127.0.0.1", strconv.Itoa(a.Ports.HTTP))
	a.DNSAddr = net.JoinHostPort("127.0.0.1", strconv.Itoa(a.Ports.DNS))

	cfgJSON, err := a.configJSON(opts)
	if err != nil {
		return nil, err
	}
	cfgPath := filepath.Join(dir, "agent.json")
	if err := os.WriteFile(cfgPath, cfgJSON, 0o600); err != nil {
		return nil, err
	}
	a.args = []string{"agent", "-dev", "-config-file", cfgPath}
	if opts.JoinLAN != "" {
		a.args = []string{"agent", "-config-file", cfgPath, "-data-dir", filepath.Join(dir, "data")}
	}
	if opts.ConfigDir != "" {
		a.args = append(a.args, "-config-dir", opts.ConfigDir)
	}
	if opts.HCL != "" {
		a.args = append(a.args, "-hcl", opts.HCL)
	}
	a.bin = bin
	a.env = append(agentEnv(), opts.Env...)
	if opts.HandlerEnv {
		a.env = append(a.env, "CONSUL_HTTP_ADDR="+a.HTTPAddr)
	}
	if err := a.start(); err != nil {
		return nil, err
	}

	clientCfg := api.DefaultNonPooledConfig()
	clientCfg.Address = a.HTTPAddr
	clientCfg.Token = opts.ACLToken
	clientCfg.TokenFile = ""
	a.Client, err = api.NewClient(clientCfg)
	if err != nil {
		a.Stop()
		return nil, err
	}
	if err := a.waitReady(ctx, 60*time.Second); err != nil {
		a.Stop()
		log, _ := os.ReadFile(a.LogPath)
		return nil, fmt.Errorf("%w\nagent log:\n%s", err, tail(log, 2000))
	}
	return a, nil
}

// configJSON is the agent's configuration file: bound to 127.0.0.1 on the
// agent's ports, with Consul's defaults otherwise.
func (a *Agent) configJSON(opts Options) ([]byte, error) {
	cfg := map[string]any{
		"node_name":            a.NodeName,
		"datacenter":           a.Datacenter,
		"bind_addr":            "127.0.0.1",
		"client_addr":          "127.0.0.1",
		"advertise_addr":       "127.0.0.1",
		"log_level":            "warn",
		"disable_update_check": true,
		"ports": map[string]int{
			"http": a.Ports.HTTP, "dns": a.Ports.DNS, "serf_lan": a.Ports.SerfLAN,
			"serf_wan": a.Ports.SerfWAN, "server": a.Ports.Server, "grpc": a.Ports.GRPC,
			"grpc_tls": -1, "https": -1,
		},
	}
	if len(opts.RetryJoinWAN) > 0 {
		cfg["retry_join_wan"] = opts.RetryJoinWAN
	}
	if opts.JoinLAN != "" {
		cfg["server"] = false
		cfg["retry_join"] = []string{opts.JoinLAN}
	}
	if opts.ACLToken != "" {
		cfg["acl"] = map[string]any{
			"enabled": true, "default_policy": "deny", "enable_token_persistence": false,
			"tokens": map[string]string{"initial_management": opts.ACLToken, "agent": opts.ACLToken},
		}
	}
	return json.Marshal(cfg)
}

// agentEnv is the environment without CONSUL_* variables, so an operator's
// shell settings never leak into a test agent.
func agentEnv() []string {
	var env []string
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "CONSUL_") {
			env = append(env, kv)
		}
	}
	return env
}

func (a *Agent) waitReady(ctx context.Context, limit time.Duration) error {
	ctx, cancel := context.WithTimeout(ctx, limit)
	defer cancel()
	var last error
	for {
		select {
		case err := <-a.waitErr:
			a.waitErr <- err
			return fmt.Errorf("consul agent exited before it was ready: %v", err)
		case <-ctx.Done():
			return fmt.Errorf("consul agent not ready after %s: %v", limit, last)
		case <-time.After(50 * time.Millisecond):
		}
		// Each try is bounded on its own: a request the agent holds while
		// it starts (or rejoins) must not use up the whole limit.
		tctx, tcancel := context.WithTimeout(ctx, 2*time.Second)
		q := (&api.QueryOptions{}).WithContext(tctx)
		leader, err := a.Client.Status().LeaderWithQueryOptions(q)
		if err != nil || leader == "" {
			tcancel()
			last = fmt.Errorf("no leader yet (%v)", err)
			continue
		}
		checks, _, err := a.Client.Health().Node(a.NodeName, q)
		tcancel()
		if err != nil {
			last = err
			continue
		}
		// The agent's own serfHealth check, not every check of the node:
		// a restarted agent's TTL checks stay critical until their owner
		// updates them again.
		for _, c := range checks {
			if c.CheckID == "serfHealth" && c.Status == api.HealthPassing {
				return nil
			}
		}
		last = errors.New("agent's own node not yet passing (serfHealth) in the catalog")
	}
}

// start runs the agent process, its output appended to LogPath. Caller
// holds mu, or is New.
func (a *Agent) start() error {
	logf, err := os.OpenFile(a.LogPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return err
	}
	defer logf.Close()
	a.cmd = exec.Command(a.bin, a.args...)
	a.cmd.Stdout, a.cmd.Stderr = logf, logf
	a.cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	a.cmd.Env = a.env
	if err := a.cmd.Start(); err != nil {
		return fmt.Errorf("run %s: %w", a.bin, err)
	}
	a.waitErr = make(chan error, 1)
	go func(cmd *exec.Cmd, done chan error) { done <- cmd.Wait() }(a.cmd, a.waitErr)
	return nil
}

// kill stops the process (SIGTERM, SIGKILL after 10 s) and waits for it.
// Caller holds mu.
func (a *Agent) kill() {
	if a.cmd == nil || a.cmd.Process == nil {
		return
	}
	_ = syscall.Kill(-a.cmd.Process.Pid, syscall.SIGTERM)
	select {
	case <-a.waitErr:
	case <-time.After(10 * time.Second):
		_ = syscall.Kill(-a.cmd.Process.Pid, syscall.SIGKILL)
		<-a.waitErr
	}
}

// Stop kills the agent and waits for it. It is safe to call more than once.
func (a *Agent) Stop() {
	a.mu.Lock()
	defer a.mu.Unlock()
	if !a.stopped {
		a.stopped = true
		a.kill()
	}
}

// Restart stops the agent as a service manager would (SIGTERM), leaves it
// down for down, and starts it again on the same ports, configuration and
// data directory, waiting until it is ready. Meant for client agents
// (Options.JoinLAN): a dev server loses its state.
func (a *Agent) Restart(ctx context.Context, down time.Duration) error {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.stopped {
		return errors.New("consultest: restart of a stopped agent")
	}
	a.kill()
	select {
	case <-ctx.Done():
		a.stopped = true
		return ctx.Err()
	case <-time.After(down):
	}
	if err := a.start(); err != nil {
		a.stopped = true
		return err
	}
	return a.waitReady(ctx, 60*time.Second)
}

// Pid is the agent process's PID (0 when it is not running), for
// benchmarks that read its CPU time.
func (a *Agent) Pid() int {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.cmd == nil || a.cmd.Process == nil {
		return 0
	}
	return a.cmd.Process.Pid
}

// SerfLANAddr is the agent's serf LAN address, for Options.JoinLAN.
func (a *Agent) SerfLANAddr() string {
	return net.JoinHostPort("127.0.0.1", strconv.Itoa(a.Ports.SerfLAN))
}

// freePorts returns n distinct free TCP ports on 127.0.0.1 that are also
// free for UDP (DNS and serf use both).
func freePorts(n int) ([]int, error) {
	var ports []int
	var held []net.Listener
	defer func() {
		for _, l := range held {
			l.Close()
		}
	}()
	for len(ports) < n {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return nil, fmt.Errorf("find a free port: %w", err)
		}
		port := l.Addr().(*net.TCPAddr).Port
		u, err := net.ListenPacket("udp", net.JoinHostPort("127.0.0.1", strconv.Itoa(port)))
		if err != nil {
			l.Close()
			continue
		}
		u.Close()
		held = append(held, l)
		ports = append(ports, port)
	}
	return ports, nil
}

// Env returns CONSUL_HTTP_ADDR (and CONSUL_HTTP_TOKEN when ACLs are on) for
// a child process that should talk to this agent.
func (a *Agent) Env() []string {
	env := append(agentEnv(), "CONSUL_HTTP_ADDR="+a.HTTPAddr)
	if a.Token != "" {
		env = append(env, "CONSUL_HTTP_TOKEN="+a.Token)
	}
	return env
}
