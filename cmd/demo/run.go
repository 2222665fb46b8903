package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/hashicorp/consul/api"

	"github.com/jiocloud/orchestrate/internal/consultest"
	"github.com/jiocloud/orchestrate/internal/nodeid"
)

// demo is one run: the agent, the simulated nodes, and what to stop.
type demo struct {
	ctx   context.Context
	bin   string
	dir   string
	agent *consultest.Agent
	sim   *simNodes
	// steps are the stand-in update, Puppet and validation commands that
	// converge runs (written by the rolling-version step).
	steps *stepScripts
	// stoppers run in reverse order at the end.
	stoppers []func()
	// minter logs in for a node through the auth method the reaper's key
	// is trusted by; firstTokens are the sealed tokens it minted for the
	// first nodes, by host, which the demo logs out when such a server is
	// deleted (the reaper logs out only the tokens it minted).
	minter      *nodeid.Minter
	firstTokens map[string]string
	// agents are the nodes' own agent ports.
	agents *nodeAgents
	// clientsMu guards clients: API clients by token secret.
	clientsMu sync.Mutex
	clients   map[string]*api.Client
}

func step(n int, title string) {
	fmt.Printf("\n== %d. %s\n", n, title)
}

func say(format string, args ...any) {
	fmt.Printf("   "+format+"\n", args...)
}

// indent prints text indented, skipping blank lines.
func indent(text string) {
	for _, line := range strings.Split(strings.TrimRight(text, "\n"), "\n") {
		if strings.TrimSpace(line) != "" {
			fmt.Printf("     %s\n", line)
		}
	}
}

// cmd runs bin/name args against the agent with who's token, prints the
// command line (its prompt names whose token), its exit code and output,
// and fails unless it exits with want.
func (d *demo) cmd(want int, who, name string, args ...string) (string, error) {
	c, err := d.command(who, name, args...)
	if err != nil {
		return "", err
	}
	out, err := c.CombinedOutput()
	code, err := exitCode(err)
	if err != nil {
		return "", fmt.Errorf("%s: %w", name, err)
	}
	fmt.Printf("   %s$ %s %s   # exit %d\n", who, name, shellJoin(args), code)
	indent(string(out))
	if code != want {
		return string(out), fmt.Errorf("%s %s: exit %d, expected %d", name, strings.Join(args, " "), code, want)
	}
	return string(out), nil
}

// shellJoin is args as a shell would take them: an argument with any
// character but letters, digits and _./:=@,+- in single quotes.
func shellJoin(args []string) string {
	out := make([]string, len(args))
	for i, a := range args {
		out[i] = a
		if a == "" || strings.IndexFunc(a, func(r rune) bool {
			return !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || strings.ContainsRune("_./:=@,+-", r))
		}) >= 0 {
			out[i] = "'" + strings.ReplaceAll(a, "'", `'\''`) + "'"
		}
	}
	return strings.Join(out, " ")
}

// orch runs orchestrate quietly (warnings only on stderr) with the
// operator's token.
func (d *demo) orch(want int, args ...string) (string, error) {
	return d.orchAs(want, operator, args...)
}

// orchAs runs orchestrate quietly with who's token.
func (d *demo) orchAs(want int, who string, args ...string) (string, error) {
	return d.cmd(want, who, "orchestrate", append(args, "--log-level", "warn")...)
}

// bg is a child process running in the background.
type bg struct {
	cmd  *exec.Cmd
	out  string // its combined output file
	done chan error
}

// start runs bin/name in the background with who's token, its output in
// a file; stopAll stops it by PID (its process group) if it is still
// running.
func (d *demo) start(who, name string, args ...string) (*bg, error) {
	out := filepath.Join(d.dir, name+".out")
	f, err := os.Create(out)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	env, err := d.env(who)
	if err != nil {
		return nil, err
	}
	c := exec.Command(filepath.Join(d.bin, name), args...)
	c.Env = env
	c.Stdout, c.Stderr = f, f
	c.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := c.Start(); err != nil {
		return nil, fmt.Errorf("start %s: %w", name, err)
	}
	b := &bg{cmd: c, out: out, done: make(chan error, 1)}
	go func() { b.done <- c.Wait() }()
	fmt.Printf("   %s$ %s %s &   # pid %d\n", who, name, shellJoin(args), c.Process.Pid)
	d.stoppers = append(d.stoppers, func() { b.stop() })
	return b, nil
}

// output is what the process printed so far.
func (b *bg) output() string {
	data, _ := os.ReadFile(b.out)
	return string(data)
}

// stop sends SIGTERM to the process group, then SIGKILL after 5 seconds.
func (b *bg) stop() {
	select {
	case err := <-b.done:
		b.done <- err
		return
	default:
	}
	_ = syscall.Kill(-b.cmd.Process.Pid, syscall.SIGTERM)
	select {
	case err := <-b.done:
		b.done <- err
	case <-time.After(5 * time.Second):
		_ = syscall.Kill(-b.cmd.Process.Pid, syscall.SIGKILL)
	}
}

// wait waits up to limit for the process to exit and returns its exit code.
func (b *bg) wait(limit time.Duration) (int, error) {
	select {
	case err := <-b.done:
		b.done <- err
		return exitCode(err)
	case <-time.After(limit):
		return -1, fmt.Errorf("%s still running after %s", filepath.Base(b.cmd.Path), limit)
	}
}

// stopAll stops what the demo started, newest first.
func (d *demo) stopAll() {
	for i := len(d.stoppers) - 1; i >= 0; i-- {
		d.stoppers[i]()
	}
	d.stoppers = nil
}

// waitFor polls cond every 100ms until it holds or limit passes.
func (d *demo) waitFor(what string, limit time.Duration, cond func() bool) error {
	deadline := time.Now().Add(limit)
	for !cond() {
		if time.Now().After(deadline) {
			return fmt.Errorf("timed out after %s waiting for %s", limit, what)
		}
		select {
		case <-d.ctx.Done():
			return d.ctx.Err()
		case <-time.After(100 * time.Millisecond):
		}
	}
	return nil
}

// fileHas reports whether path contains every one of subs.
func fileHas(path string, subs ...string) bool {
	data, err := os.ReadFile(path)
	if err != nil {
		return false
	}
	for _, s := range subs {
		if !bytes.Contains(data, []byte(s)) {
			return false
		}
	}
	return true
}

// grepFile prints the lines of path that start with any of prefixes.
func grepFile(path string, prefixes ...string) {
	data, err := os.ReadFile(path)
	if err != nil {
		say("(cannot read %s: %v)", path, err)
		return
	}
	for _, line := range strings.Split(string(data), "\n") {
		for _, p := range prefixes {
			if strings.HasPrefix(line, p) {
				fmt.Printf("     %s\n", line)
				break
			}
		}
	}
}

// command is bin/name args with who's agent address and token.
func (d *demo) command(who, name string, args ...string) (*exec.Cmd, error) {
	env, err := d.env(who)
	if err != nil {
		return nil, err
	}
	c := exec.CommandContext(d.ctx, filepath.Join(d.bin, name), args...)
	c.Env = env
	return c, nil
}

// env is who's token file and no other token (a command has exactly the
// rights of whoever runs it), and the address of who's agent: a node's
// own (nodeAgents), the real agent for the operator and the reaper.
func (d *demo) env(who string) ([]string, error) {
	addr, err := d.agentAddr(who)
	if err != nil {
		return nil, err
	}
	var env []string
	for _, kv := range d.agent.Env() {
		if !strings.HasPrefix(kv, "CONSUL_HTTP_TOKEN") && !strings.HasPrefix(kv, "CONSUL_HTTP_ADDR=") {
			env = append(env, kv)
		}
	}
	return append(env, "CONSUL_HTTP_ADDR="+addr, "CONSUL_HTTP_TOKEN_FILE="+d.tokenFile(who)), nil
}

// agentAddr is the HTTP address of who's Consul agent.
func (d *demo) agentAddr(who string) (string, error) {
	switch who {
	case management, operator, reaperToken:
		return d.agent.HTTPAddr, nil
	}
	return d.agents.addr(who)
}

// exitCode turns Run's error into an exit code; other errors pass through.
func exitCode(err error) (int, error) {
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		return ee.ExitCode(), nil
	}
	return 0, err
}
