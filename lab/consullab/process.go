package consullab

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"syscall"
	"time"

	"github.com/hashicorp/consul/api"
)

// server is one server agent process.
type server struct {
	cmd  *exec.Cmd
	done chan struct{} // closed when the process was reaped
}

// stopGrace is how long a SIGTERM'd server may take before SIGKILL: a
// server shuts down in well under a second.
const stopGrace = 15 * time.Second

// start runs server i in a session of its own (a test's or the lab's
// process group signals never reach it), output appended to its
// consul.log, PID in its consul.pid. Caller holds mu or is StartWith.
func (c *Cluster) start(i int) error {
	dir := c.serverDir(i)
	logf, err := os.OpenFile(filepath.Join(dir, "consul.log"), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		return fmt.Errorf("consullab: %w", err)
	}
	defer logf.Close()
	cmd := exec.Command(c.bin, "agent", "-config-file", filepath.Join(dir, "config.json"))
	cmd.Stdout, cmd.Stderr = logf, logf
	cmd.Env = cleanEnv()
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("consullab: run %s: %w", c.bin, err)
	}
	s := &server{cmd: cmd, done: make(chan struct{})}
	go func() { _ = cmd.Wait(); close(s.done) }()
	c.servers[i] = s
	if err := os.WriteFile(pidFile(dir), []byte(strconv.Itoa(cmd.Process.Pid)+"\n"), 0o600); err != nil {
		return fmt.Errorf("consullab: %w", err)
	}
	c.log.Info("consul server started", "server", i+1, "addr", c.Addrs[i], "pid", cmd.Process.Pid)
	return nil
}

// Running reports whether server i's process runs.
func (c *Cluster) Running(i int) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.running(i)
}

func (c *Cluster) running(i int) bool {
	if i < 0 || i >= len(c.servers) || c.servers[i] == nil {
		return false
	}
	select {
	case <-c.servers[i].done:
		return false
	default:
		return true
	}
}

// PID is server i's process ID, 0 when it does not run.
func (c *Cluster) PID(i int) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	if !c.running(i) {
		return 0
	}
	return c.servers[i].cmd.Process.Pid
}

// Kill powers server i off hard (SIGKILL), as a machine that dies: no
// leave, no shutdown. It waits until the process is gone.
func (c *Cluster) Kill(i int) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if !c.running(i) {
		return fmt.Errorf("consullab: server %d does not run", i+1)
	}
	s := c.servers[i]
	if err := s.cmd.Process.Signal(syscall.SIGKILL); err != nil {
		return fmt.Errorf("consullab: kill server %d: %w", i+1, err)
	}
	<-s.done
	c.log.Info("consul server killed", "server", i+1, "pid", s.cmd.Process.Pid)
	return nil
}

// Restart starts server i again on its data (after Kill, or stopping it
// first with SIGTERM when it runs) and waits until its HTTP API answers.
// It does not wait for a leader: with quorum lost there is none.
func (c *Cluster) Restart(ctx context.Context, i int) error {
	if i < 0 || i >= len(c.Addrs) {
		return fmt.Errorf("consullab: no server %d", i+1)
	}
	c.mu.Lock()
	c.terminate(i)
	err := c.start(i)
	c.mu.Unlock()
	if err != nil {
		return err
	}
	cl, err := c.Client(i, "")
	if err != nil {
		return err
	}
	for {
		// The status endpoints are answered by the server itself, leader
		// or not.
		qctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		_, err := cl.Status().LeaderWithQueryOptions((&api.QueryOptions{}).WithContext(qctx))
		cancel()
		if err == nil {
			return nil
		}
		if !c.Running(i) {
			return fmt.Errorf("consullab: server %d exited on restart (see %s)", i+1, filepath.Join(c.serverDir(i), "consul.log"))
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("consullab: server %d: %w", i+1, ctx.Err())
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// Stop stops every server (SIGTERM, SIGKILL after 15 s) and waits for
// them. It may be called more than once.
func (c *Cluster) Stop() {
	c.mu.Lock()
	defer c.mu.Unlock()
	for i := range c.servers {
		c.terminate(i)
	}
}

// terminate stops server i when it runs. Caller holds mu.
func (c *Cluster) terminate(i int) {
	if !c.running(i) {
		return
	}
	s := c.servers[i]
	_ = s.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-s.done:
	case <-time.After(stopGrace):
		_ = s.cmd.Process.Signal(syscall.SIGKILL)
		<-s.done
	}
	_ = os.Remove(pidFile(c.serverDir(i)))
	c.log.Info("consul server stopped", "server", i+1)
}

// StopDir stops the servers a cluster in dir left running (a crashed
// run; make lab-down), by the PIDs recorded there, each only while its
// command line still names its configuration in dir: SIGTERM, SIGKILL
// after 15 s. Nothing recorded, or nothing running, is no error.
func StopDir(ctx context.Context, dir string) error {
	dirs, err := filepath.Glob(filepath.Join(dir, "consul-server-*"))
	if err != nil {
		return err
	}
	var errs []error
	for _, d := range dirs {
		pid, ok := livePID(d)
		if !ok {
			continue
		}
		if err := syscall.Kill(pid, syscall.SIGTERM); err != nil {
			errs = append(errs, fmt.Errorf("consullab: stop pid %d: %w", pid, err))
			continue
		}
		deadline := time.Now().Add(stopGrace)
		for {
			if _, alive := livePID(d); !alive {
				break
			}
			if time.Now().After(deadline) {
				_ = syscall.Kill(pid, syscall.SIGKILL)
				deadline = time.Now().Add(stopGrace)
			}
			select {
			case <-ctx.Done():
				return ctx.Err()
			case <-time.After(100 * time.Millisecond):
			}
		}
		_ = os.Remove(pidFile(d))
	}
	return errors.Join(errs...)
}
