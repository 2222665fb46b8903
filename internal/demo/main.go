// Command demo runs the whole of orchestrate on one machine, against a real
// local Consul dev agent on free loopback ports and a simulated cloud, and
// prints each step for a person to read: hiera-services rendering the
// dependency state, service-blocker waiting for a third database, a rolling
// version with converge on every node, and the reaper replacing a dead node
// and pausing when most of the fleet looks unhealthy at once. ACLs are on
// (default deny): the operator, the reaper and every node run with their
// own tokens, set up as docs/acl.md tells an operator.
//
// `make demo` runs it. It stops everything it started, by PID, and leaves no
// files outside a temporary directory it removes (or --keep DIR).
package main

import (
	"context"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"syscall"

	"github.com/spf13/pflag"

	"github.com/jiocloud/orchestrate/internal/consultest"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	err := run(ctx, os.Args[1:])
	stop()
	if err != nil {
		fmt.Fprintf(os.Stderr, "\ndemo failed: %v\n", err)
		os.Exit(1)
	}
	fmt.Println("\ndemo finished: every step behaved as described.")
}

func run(ctx context.Context, args []string) error {
	fs := pflag.NewFlagSet("demo", pflag.ContinueOnError)
	binDir := fs.String("bin", "bin", "directory holding the built binaries and consul")
	keep := fs.String("keep", "", "keep data, logs and rendered files in this directory instead of a removed temp dir")
	aclDir := fs.String("acl", "packaging/acl", "directory holding the shipped Consul ACL policies (node.hcl, reaper.hcl)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	dir := *keep
	if dir == "" {
		tmp, err := os.MkdirTemp("", "orchestrate-demo-")
		if err != nil {
			return err
		}
		defer os.RemoveAll(tmp)
		dir = tmp
	} else if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	bin, err := filepath.Abs(*binDir)
	if err != nil {
		return err
	}
	d := &demo{ctx: ctx, bin: bin, dir: dir}
	defer d.stopAll()

	step(1, "A real Consul dev agent on free loopback ports, with ACLs on and a token of its own for every node")
	mgmt, err := newUUID()
	if err != nil {
		return err
	}
	d.agent, err = consultest.New(ctx, filepath.Join(bin, "consul"), filepath.Join(dir, "consul"), consultest.Options{NodeName: "bootstrap1", ACLToken: mgmt})
	if err != nil {
		return err
	}
	d.stoppers = append(d.stoppers, d.agent.Stop)
	d.sim = newSimNodes(d.agent.Client)
	d.stoppers = append(d.stoppers, d.sim.close)
	d.agents = newNodeAgents(d.agent.HTTPAddr)
	d.stoppers = append(d.stoppers, d.agents.close)
	say("agent %s: HTTP %s, DNS %s; working directory %s", d.agent.NodeName, d.agent.HTTPAddr, d.agent.DNSAddr, dir)
	say("the simulated cloud: db x3, lb x2, controller x3, compute x4, each a Consul catalog node")
	say("with its service on its own 127.0.0.x address, tagged addresses eth0/eth1 and health checks;")
	say("the nodes share this one agent: each reaches it through a loopback port of its own that plays its own agent")
	say("in the one way a command can tell (the sessions it creates are on its own node), passing all else through")
	if err := d.aclSetup(*aclDir); err != nil {
		return err
	}

	for _, s := range []func() error{d.hieraStep, d.blockerStep, d.rollingStep, d.reaperStep} {
		if err := s(); err != nil {
			return err
		}
	}
	step(9, "Stop everything this demo started")
	return nil
}
