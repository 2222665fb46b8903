package hypervisor

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// machine is one server's container. Its fields are guarded by the
// Hypervisor's mu.
type machine struct {
	id, name, machine string
	addr              netip.Addr
	dir               string        // the state dir: root/, address, name, nspawn.pid, console.log
	proc              *os.Process   // systemd-nspawn; nil when off
	done              chan struct{} // closed when proc has exited
	reason            string        // why the hypervisor stops proc ("" while it does not)
	dead              bool          // stopped without Nova being told (kept as the file "dead")
	died              time.Time     // when it died (the file's time)
}

// setDead records whether m is dead, in its state dir too: a dead machine
// stays dead across a restart of the hypervisor.
func (m *machine) setDead(dead bool) {
	m.dead, m.died = dead, time.Now()
	if p := filepath.Join(m.dir, "dead"); dead {
		_ = os.WriteFile(p, nil, 0o600)
	} else {
		_ = os.Remove(p)
	}
}

func (h *Hypervisor) newMachine(id, name string, addr netip.Addr) *machine {
	// The machine name makes the host-side veth "vb-" + 12 characters,
	// within Linux's 15; 48 bits of the server's UUID keep it unique.
	short := strings.ToLower(strings.ReplaceAll(id, "-", ""))
	if len(short) > 12 {
		short = short[:12]
	}
	return &machine{id: id, name: name, machine: short, addr: addr, dir: filepath.Join(h.cfg.StateDir, id)}
}

func (m *machine) root() string    { return filepath.Join(m.dir, "root") }
func (m *machine) pidFile() string { return filepath.Join(m.dir, "nspawn.pid") }

func (m *machine) info() Container {
	c := Container{ID: m.id, Name: m.name, Machine: m.machine, Veth: "vb-" + m.machine, Address: m.addr, Root: m.root(), Dead: m.dead}
	if m.proc != nil {
		c.PID = m.proc.Pid
	}
	return c
}

// prepare writes a new server's state dir: its address and name, the root
// filesystem, the NoCloud seed (meta-data in JSON, which is YAML and
// cannot be broken by a crafted server name; user-data as Nova holds it, an
// empty file when there is none), a systemd-networkd file for the static
// address with no gateway (cloud-init's own network config off), and
// systemd-networkd enabled.
func (m *machine) prepare(ctx context.Context, cfg Config, userData []byte) error {
	if err := os.Mkdir(m.dir, 0o700); err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(m.dir, "address"), []byte(m.addr.String()+"\n"), 0o600); err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(m.dir, "name"), []byte(m.name), 0o600); err != nil {
		return err
	}
	if err := cfg.MakeRoot(ctx, m.root()); err != nil {
		return fmt.Errorf("make root: %w", err)
	}
	meta, err := json.Marshal(map[string]string{"instance-id": m.id, "local-hostname": m.name})
	if err != nil {
		return err
	}
	network := fmt.Sprintf("[Match]\nName=host0\n\n[Network]\nAddress=%s/%d\nLinkLocalAddressing=no\nIPv6AcceptRA=no\n", m.addr, cfg.Subnet.Bits())
	files := []struct {
		path string
		data []byte
		mode os.FileMode // user data carries secrets; networkd reads as its own user
	}{
		{"var/lib/cloud/seed/nocloud/meta-data", meta, 0o644},
		{"var/lib/cloud/seed/nocloud/user-data", userData, 0o600},
		{"etc/systemd/network/10-lab-hypervisor.network", []byte(network), 0o644},
		{"etc/cloud/cloud.cfg.d/99-lab-hypervisor.cfg", []byte("network: {config: disabled}\n"), 0o644},
	}
	for _, f := range files {
		p := filepath.Join(m.root(), f.path)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			return err
		}
		if err := os.WriteFile(p, f.data, f.mode); err != nil {
			return err
		}
	}
	if out, err := exec.CommandContext(ctx, "systemctl", "--root="+m.root(), "enable", "systemd-networkd.service").CombinedOutput(); err != nil {
		return fmt.Errorf("enable systemd-networkd: %w: %s", err, bytes.TrimSpace(out))
	}
	return nil
}

// start boots the container: systemd-nspawn in a process group of its own
// (a Ctrl-C of the lab does not reach it), its console appended to
// console.log, its PID in nspawn.pid.
func (h *Hypervisor) start(m *machine) error {
	console, err := os.OpenFile(filepath.Join(m.dir, "console.log"), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		return err
	}
	defer console.Close()
	cmd := exec.Command("systemd-nspawn", "-D", m.root(), "--boot", "--network-bridge="+h.cfg.Bridge,
		"--register=no", "--keep-unit", "--machine="+m.machine, "--console=read-only")
	cmd.Stdout, cmd.Stderr = console, console
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("systemd-nspawn: %w", err)
	}
	if err := os.WriteFile(m.pidFile(), []byte(strconv.Itoa(cmd.Process.Pid)+"\n"), 0o600); err != nil {
		h.log.Error("hypervisor: cannot write pid file: make lab-down will not find this container", "file", m.pidFile(), "err", err)
	}
	h.track(m, cmd.Process, func() { _ = cmd.Wait() })
	h.log.Info("hypervisor: container booting", "server", m.name, "id", m.id, "machine", m.machine, "address", m.addr, "pid", cmd.Process.Pid)
	return nil
}

// track records proc as m's running nspawn and, when wait returns, records
// its end: stopped as asked, or died by itself (then dead until Nova is
// told).
func (h *Hypervisor) track(m *machine, proc *os.Process, wait func()) {
	done := make(chan struct{})
	h.mu.Lock()
	m.proc, m.done, m.reason = proc, done, ""
	h.mu.Unlock()
	go func() {
		wait()
		h.mu.Lock()
		defer h.mu.Unlock()
		m.proc = nil
		switch m.reason {
		case leftRunning: // the next hypervisor, or Down, tells (and owns the PID file)
			close(done)
			return
		case "":
			m.setDead(true)
			h.log.Warn("hypervisor: container died by itself; not restarted while Nova says ACTIVE", "server", m.name, "id", m.id,
				"console", filepath.Join(m.dir, "console.log"))
		default:
			h.log.Info("hypervisor: container stopped", "server", m.name, "id", m.id, "why", m.reason)
		}
		_ = os.Remove(m.pidFile())
		close(done)
	}()
}

// powerOff asks the container to shut down cleanly: SIGTERM makes nspawn
// send its init SIGRTMIN+3 (halt), again every 2 s (a systemd still
// booting may not handle it yet). After StopTimeout it is killed hard.
func (h *Hypervisor) powerOff(m *machine, why string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if m.proc == nil || m.reason != "" {
		return
	}
	m.reason = why
	proc, done := m.proc, m.done
	_ = proc.Signal(syscall.SIGTERM)
	h.wg.Add(1)
	go func() {
		defer h.wg.Done()
		again := time.NewTicker(2 * time.Second)
		defer again.Stop()
		timeout := time.After(h.cfg.StopTimeout)
		for {
			select {
			case <-done:
				return
			case <-again.C:
				_ = proc.Signal(syscall.SIGTERM)
			case <-timeout:
				h.log.Warn("hypervisor: clean power-off too slow, killing", "server", m.name, "after", h.cfg.StopTimeout)
				killHard(proc, done)
				return
			}
		}
	}()
}

// killHard powers a container off at once: SIGKILL to its init kills every
// process of its PID namespace, and nspawn, left without its child, cleans
// up and exits; nspawn is SIGKILLed too if it has not within 5 s.
func killHard(proc *os.Process, done <-chan struct{}) {
	if pid := initPID(proc.Pid); pid > 0 {
		_ = syscall.Kill(pid, syscall.SIGKILL)
	}
	select {
	case <-done:
	case <-time.After(5 * time.Second):
		_ = proc.Kill()
		<-done
	}
}

// initPID returns the host PID of the container's init: the child of
// nspawn that is PID 1 of its own namespace (0 when there is none yet).
func initPID(nspawn int) int {
	children, _ := os.ReadFile(fmt.Sprintf("/proc/%d/task/%d/children", nspawn, nspawn))
	for _, c := range strings.Fields(string(children)) {
		status, _ := os.ReadFile("/proc/" + c + "/status")
		for _, line := range strings.Split(string(status), "\n") {
			f := strings.Fields(line)
			if len(f) > 2 && f[0] == "NSpid:" && f[len(f)-1] == "1" {
				pid, _ := strconv.Atoi(c)
				return pid
			}
		}
	}
	return 0
}

// Kill powers the container of server name (or ID) off hard, without
// telling Nova: the lab's machine death. It stays off while Nova says
// ACTIVE.
func (h *Hypervisor) Kill(name string) error {
	h.mu.Lock()
	m, err := h.find(name)
	if err == nil && m.proc == nil {
		err = fmt.Errorf("container of %q is not running", name)
	}
	if err != nil {
		h.mu.Unlock()
		return err
	}
	m.reason = "killed (machine death)"
	m.setDead(true)
	proc, done := m.proc, m.done
	h.mu.Unlock()
	killHard(proc, done)
	return nil
}

// Exec runs argv inside the running container of server name (or ID), in
// all its namespaces (nsenter on its init), and returns its combined output.
func (h *Hypervisor) Exec(ctx context.Context, name string, argv ...string) ([]byte, error) {
	h.mu.Lock()
	m, err := h.find(name)
	pid := 0
	if err == nil && m.proc != nil {
		pid = initPID(m.proc.Pid)
	}
	h.mu.Unlock()
	if err != nil {
		return nil, err
	}
	if pid == 0 {
		return nil, fmt.Errorf("container of %q is not running", name)
	}
	out, err := exec.CommandContext(ctx, "nsenter", append([]string{"-t", strconv.Itoa(pid), "-a", "--"}, argv...)...).CombinedOutput()
	if err != nil {
		return out, fmt.Errorf("exec in %s: %w", name, err)
	}
	return out, nil
}

// remove stops the container of a server gone from Nova, at once, and
// removes its state dir and root.
func (h *Hypervisor) remove(m *machine) {
	h.mu.Lock()
	proc, done := m.proc, m.done
	if proc != nil {
		m.reason = "server deleted"
	}
	h.mu.Unlock()
	if proc != nil {
		killHard(proc, done)
	}
	err := removeDir(m.dir)
	h.mu.Lock()
	defer h.mu.Unlock()
	if err != nil { // retried every poll, logged once
		if h.failures[m.id].msg != err.Error() {
			h.log.Error("hypervisor: cannot remove container root", "server", m.name, "id", m.id, "err", err)
		}
		h.failures[m.id] = failure{msg: err.Error()}
		return
	}
	delete(h.machines, m.id)
	delete(h.failures, m.id)
	h.log.Info("hypervisor: container removed", "server", m.name, "id", m.id, "address", m.addr)
}

// Remove powers off every container of stateDir (as Down) and removes
// their state, each root's mount detached first: never os.RemoveAll over a
// mounted overlay, which would whiteout its files and then fail on the
// mount point.
func Remove(stateDir string, stopTimeout time.Duration, log *slog.Logger) error {
	if err := Down(stateDir, stopTimeout, log); err != nil {
		return err
	}
	entries, err := os.ReadDir(stateDir)
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		return err
	}
	for _, e := range entries {
		if err := removeDir(filepath.Join(stateDir, e.Name())); err != nil {
			return fmt.Errorf("hypervisor remove %s: %w", e.Name(), err)
		}
	}
	return os.Remove(stateDir)
}

// removeDir removes a state dir, first detaching a mount MakeRoot may have
// put on its root (an overlay).
func removeDir(dir string) error {
	if err := syscall.Unmount(filepath.Join(dir, "root"), syscall.MNT_DETACH); err != nil && !errors.Is(err, syscall.EINVAL) && !errors.Is(err, syscall.ENOENT) {
		return fmt.Errorf("unmount root: %w", err)
	}
	return os.RemoveAll(dir)
}

// leftRunning is the stop reason of a container a KeepRunning hypervisor
// left: its end is logged by whoever ends it.
const leftRunning = "left running"

// shutdown ends Run: with KeepRunning it leaves the containers (their
// nspawn.pid files stay), else it powers every one off and waits.
func (h *Hypervisor) shutdown() {
	if h.cfg.KeepRunning {
		h.mu.Lock()
		for _, m := range h.machines {
			if m.proc != nil {
				m.reason = leftRunning
			}
		}
		h.mu.Unlock()
		h.log.Info("hypervisor: leaving containers running", "pid files", filepath.Join(h.cfg.StateDir, "*", "nspawn.pid"))
		return
	}
	h.mu.Lock()
	var running []*machine
	for _, m := range h.machines {
		if m.proc != nil {
			running = append(running, m)
		}
	}
	h.mu.Unlock()
	for _, m := range running {
		h.powerOff(m, "hypervisor stopping")
	}
	for _, m := range running {
		h.mu.Lock()
		done := m.done
		h.mu.Unlock()
		<-done
	}
	h.wg.Wait()
}

// load reads the state dir: one directory per server. For a teardown
// (Down, Remove) a directory without an address is skipped.
func (h *Hypervisor) load(teardown bool) (map[string]*machine, error) {
	entries, err := os.ReadDir(h.cfg.StateDir)
	if err != nil {
		return nil, err
	}
	machines := map[string]*machine{}
	for _, e := range entries {
		if !e.IsDir() || !validID.MatchString(e.Name()) {
			continue
		}
		dir := filepath.Join(h.cfg.StateDir, e.Name())
		raw, err := os.ReadFile(filepath.Join(dir, "address"))
		if errors.Is(err, os.ErrNotExist) && teardown {
			// The address is written first: a machine without one never
			// got further, and never booted: nothing to power off. A
			// hypervisor taking the state over (New) refuses it.
			h.log.Warn("hypervisor: state dir without an address, never booted", "dir", dir)
			continue
		}
		if err != nil {
			return nil, err
		}
		addr, err := netip.ParseAddr(strings.TrimSpace(string(raw)))
		if err != nil {
			return nil, fmt.Errorf("%s/address: %w", dir, err)
		}
		name, _ := os.ReadFile(filepath.Join(dir, "name"))
		m := h.newMachine(e.Name(), string(name), addr)
		if fi, err := os.Stat(filepath.Join(dir, "dead")); err == nil {
			m.dead, m.died = true, fi.ModTime()
		}
		machines[m.id] = m
	}
	return machines, nil
}

// adopt tracks the containers a previous run left running: those whose
// nspawn.pid names a live systemd-nspawn of their root. A stale PID file
// is removed.
func (h *Hypervisor) adopt() {
	for _, m := range h.machines {
		if proc := findNspawn(m); proc != nil {
			h.track(m, proc, func() { waitGone(proc) })
			h.log.Info("hypervisor: container adopted", "server", m.name, "id", m.id, "pid", proc.Pid)
		} else {
			_ = os.Remove(m.pidFile())
		}
	}
}

// findNspawn returns the live systemd-nspawn that m's PID file names, if it
// runs m's root.
func findNspawn(m *machine) *os.Process {
	raw, err := os.ReadFile(m.pidFile())
	if err != nil {
		return nil
	}
	pid, err := strconv.Atoi(strings.TrimSpace(string(raw)))
	if err != nil || pid <= 1 {
		return nil
	}
	proc, err := os.FindProcess(pid) // a pidfd: no mix-up once opened
	if err != nil || proc.Signal(syscall.Signal(0)) != nil {
		return nil
	}
	cmdline, _ := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid))
	args := strings.Split(string(cmdline), "\x00")
	if len(args) < 3 || filepath.Base(args[0]) != "systemd-nspawn" || args[1] != "-D" || args[2] != m.root() {
		return nil
	}
	return proc
}

// waitGone waits for a process that is not our child to exit.
func waitGone(proc *os.Process) {
	for proc.Signal(syscall.Signal(0)) == nil {
		time.Sleep(200 * time.Millisecond)
	}
}

// Down powers off every container a Run with KeepRunning left running, as
// its state dir's nspawn.pid files name them (make lab-down). Roots stay.
// A state dir that does not exist is nothing to do.
func Down(stateDir string, stopTimeout time.Duration, log *slog.Logger) error {
	if stopTimeout <= 0 {
		stopTimeout = 30 * time.Second
	}
	if log == nil {
		log = slog.Default()
	}
	if _, err := os.Stat(stateDir); errors.Is(err, os.ErrNotExist) {
		return nil
	}
	h := &Hypervisor{cfg: Config{StateDir: stateDir, StopTimeout: stopTimeout}, log: log}
	var err error
	if h.machines, err = h.load(true); err != nil {
		return fmt.Errorf("hypervisor down: %w", err)
	}
	h.adopt()
	h.shutdown()
	return nil
}
