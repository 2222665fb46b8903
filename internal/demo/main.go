// Command demo runs orchestrate's binaries against a real local Consul dev
// agent on free loopback ports, printing each step for a person to read.
// `make demo` runs it; it stops everything it started and, unless --keep is
// given, leaves nothing behind outside a temporary directory it removes.
package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"

	"github.com/spf13/pflag"

	"github.com/jiocloud/orchestrate/internal/consultest"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, os.Args[1:]); err != nil {
		fmt.Fprintf(os.Stderr, "demo: %v\n", err)
		stop()
		os.Exit(1)
	}
}

type demo struct {
	// err is the first failure; once set, later steps are skipped.
	err   error
	ctx   context.Context
	bin   string
	agent *consultest.Agent
}

func run(ctx context.Context, args []string) error {
	fs := pflag.NewFlagSet("demo", pflag.ContinueOnError)
	binDir := fs.String("bin", "bin", "directory holding the built binaries and consul")
	keep := fs.String("keep", "", "keep the agent's data and logs in this directory instead of a removed temp dir")
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
	d := &demo{ctx: ctx, bin: bin}

	step("Start a real Consul dev agent on free loopback ports")
	d.agent, err = consultest.New(ctx, filepath.Join(bin, "consul"), dir, consultest.Options{NodeName: "bootstrap1"})
	if err != nil {
		return err
	}
	defer func() {
		step("Stop the agent (by PID)")
		d.agent.Stop()
	}()
	fmt.Printf("   agent %s, HTTP %s, DNS %s, data in %s\n", d.agent.NodeName, d.agent.HTTPAddr, d.agent.DNSAddr, dir)

	step("An operator sets the desired version of the cloud")
	d.orch(0, "trigger-update", "v1")
	d.orch(0, "current-version")

	step("Three hosts build v1 and report it; one fails Puppet first")
	for _, h := range []string{"db1", "db2", "lb1"} {
		d.orch(0, "update-status", "puppet", "running", "--host", h)
	}
	d.orch(0, "update-status", "puppet", "failed", "--host", "db2", "--detail", "Exec[mysql-init] returned 1", "--log-url", "file:///var/log/orchestrate/db2-puppet.log")
	d.orch(1, "get-failures")
	for _, h := range []string{"db1", "db2", "lb1"} {
		d.orch(0, "update-status", "puppet", "success", "--host", h)
		d.orch(0, "update-status", "validation", "success", "--host", h)
		d.orch(0, "report-version", "v1", "--host", h)
	}
	d.orch(0, "get-failures")
	d.orch(0, "verify-hosts", "v1", "db1", "db2", "lb1")

	step("A new version: v2 is pending on every host until it reports it")
	d.orch(0, "trigger-update", "v2")
	d.orch(0, "pending-update", "--host", "db1")
	d.orch(0, "report-version", "v2", "--host", "db1")
	d.orch(1, "pending-update", "--host", "db1")
	d.orch(1, "verify-hosts", "v2", "db1", "db2", "lb1")
	d.orch(0, "running-versions")
	d.orch(0, "scale", "db", "3")

	step("The status table")
	d.orch(0, "status")
	return d.err
}

func step(title string) {
	fmt.Printf("\n== %s\n", title)
}

// orch runs bin/orchestrate against the agent and checks its exit code.
func (d *demo) orch(want int, args ...string) {
	if d.err != nil {
		return
	}
	cmd := exec.CommandContext(d.ctx, filepath.Join(d.bin, "orchestrate"), args...)
	cmd.Env = d.agent.Env()
	out, err := cmd.CombinedOutput()
	code := 0
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		code = ee.ExitCode()
	} else if err != nil {
		d.err = fmt.Errorf("orchestrate %s: %w", strings.Join(args, " "), err)
		return
	}
	fmt.Printf("$ orchestrate %s   # exit %d\n", strings.Join(args, " "), code)
	for _, line := range strings.Split(strings.TrimRight(string(out), "\n"), "\n") {
		if line != "" {
			fmt.Printf("   %s\n", line)
		}
	}
	if code != want {
		d.err = fmt.Errorf("orchestrate %s: exit %d, expected %d", strings.Join(args, " "), code, want)
	}
}
