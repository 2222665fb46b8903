package image_test

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/jiocloud/orchestrate/internal/testutil"
	"github.com/jiocloud/orchestrate/lab/image"
	"github.com/jiocloud/orchestrate/lab/internal/labenv"
)

// container is a booted systemd-nspawn container of the image, on a veth
// of its own (host side up, no address: nothing leaves it), which the
// test powers off and removes at the end.
type container struct {
	name, root, log string
	nspawn          *exec.Cmd
	done            chan error
}

// boot makes a root from the image, writes the NoCloud seed (meta-data
// with the instance ID and hostname, the user data given) and a
// systemd-networkd file for host0 as the lab hypervisor does, binds the
// given host directories read-only, and boots it.
func boot(t *testing.T, tar, userData string, binds ...string) *container {
	t.Helper()
	nspawn := testutil.RequireTool(t, "systemd-nspawn", "systemd-container")
	testutil.RequireTool(t, "nsenter", "util-linux")
	// ve-NAME must fit IFNAMSIZ: a short name.
	c := &container{name: fmt.Sprintf("imgt%d", os.Getpid()%100000), root: filepath.Join(t.TempDir(), "root"), done: make(chan error, 1)}
	if err := image.Root(context.Background(), tar, c.root); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := image.Remove(c.root); err != nil {
			t.Errorf("remove the container's root: %v", err)
		}
	})
	files := map[string]string{
		"var/lib/cloud/seed/nocloud/meta-data": "instance-id: iid-" + c.name + "\nlocal-hostname: " + c.name + "\n",
		"var/lib/cloud/seed/nocloud/user-data": userData,
		"etc/systemd/network/10-host0.network": "[Match]\nName=host0\n\n[Network]\nAddress=198.18.255.2/24\nLinkLocalAddressing=no\n",
	}
	for rel, text := range files {
		p := filepath.Join(c.root, rel)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	args := []string{"-D", c.root, "--boot", "--network-veth", "--register=no", "--keep-unit", "--machine=" + c.name, "--console=read-only"}
	for _, b := range binds {
		args = append(args, "--bind-ro="+b)
	}
	c.log = filepath.Join(t.TempDir(), "console.log")
	logf, err := os.Create(c.log)
	if err != nil {
		t.Fatal(err)
	}
	c.nspawn = exec.Command(nspawn, args...)
	c.nspawn.Stdout, c.nspawn.Stderr = logf, logf
	if err := c.nspawn.Start(); err != nil {
		t.Fatal(err)
	}
	go func() { c.done <- c.nspawn.Wait(); logf.Close() }()
	t.Cleanup(func() { c.powerOff(t) })
	// The host's side of the veth up, so host0 has a carrier and
	// systemd-networkd-wait-online (network-online.target) finishes.
	testutil.Eventually(t, 20*time.Second, "the container's veth", func() bool {
		return exec.Command("ip", "link", "set", "ve-"+c.name, "up").Run() == nil
	}, c.console)
	return c
}

// console is the container's console output, for a failure.
func (c *container) console() string {
	b, _ := os.ReadFile(c.log)
	return "console:\n" + string(b)
}

// init is the PID of the container's init, nspawn's child.
func (c *container) init() (int, error) {
	tasks, err := filepath.Glob(fmt.Sprintf("/proc/%d/task/*/children", c.nspawn.Process.Pid))
	if err != nil {
		return 0, err
	}
	for _, f := range tasks {
		b, _ := os.ReadFile(f)
		if fields := strings.Fields(string(b)); len(fields) > 0 {
			return strconv.Atoi(fields[0])
		}
	}
	return 0, fmt.Errorf("systemd-nspawn %d has no child", c.nspawn.Process.Pid)
}

// exec runs a command inside the container (nsenter into its init's
// namespaces) and returns its output and error.
func (c *container) exec(t *testing.T, timeout time.Duration, args ...string) (string, error) {
	t.Helper()
	pid, err := c.init()
	if err != nil {
		return "", err
	}
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, "nsenter", append([]string{"-t", strconv.Itoa(pid), "-m", "-u", "-i", "-n", "-p", "--"}, args...)...)
	cmd.Env = []string{"PATH=/usr/sbin:/usr/bin:/sbin:/bin", "LANG=C.UTF-8"}
	out, err := cmd.CombinedOutput()
	return string(out), err
}

// must is exec that fails the test on an error.
func (c *container) must(t *testing.T, args ...string) string {
	t.Helper()
	out, err := c.exec(t, 2*time.Minute, args...)
	if err != nil {
		t.Fatalf("in the container: %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	return out
}

// footprint is the container's memory (the sum of its processes'
// proportional set size) and the disk its own overlay layer holds.
func (c *container) footprint(t *testing.T) string {
	t.Helper()
	pid, err := c.init()
	if err != nil {
		return err.Error()
	}
	ns, err := os.Readlink(fmt.Sprintf("/proc/%d/ns/pid", pid))
	if err != nil {
		return err.Error()
	}
	var pss int64
	procs, _ := filepath.Glob("/proc/[0-9]*")
	for _, p := range procs {
		if l, err := os.Readlink(p + "/ns/pid"); err != nil || l != ns {
			continue
		}
		b, _ := os.ReadFile(p + "/smaps_rollup")
		for _, line := range strings.Split(string(b), "\n") {
			if f := strings.Fields(line); len(f) >= 2 && f[0] == "Pss:" {
				kb, _ := strconv.ParseInt(f[1], 10, 64)
				pss += kb
			}
		}
	}
	du, _ := exec.Command("du", "-sm", c.root+".lab/upper").Output()
	return fmt.Sprintf("memory (PSS) %d MiB, own layer %s MiB", pss>>10, strings.Fields(string(du) + " ?")[0])
}

// powerOff asks the container to power off (SIGTERM to systemd-nspawn,
// which has its init halt) and kills it after 30 s.
func (c *container) powerOff(t *testing.T) {
	c.nspawn.Process.Signal(syscall.SIGTERM) //nolint:errcheck
	select {
	case <-c.done:
	case <-time.After(30 * time.Second):
		t.Errorf("the container did not power off in 30 s; killing it")
		c.nspawn.Process.Kill() //nolint:errcheck
		<-c.done
	}
}

// waitBooted waits until cloud-init finished and systemd reports the
// boot's end, and returns how long that took.
func (c *container) waitBooted(t *testing.T) time.Duration {
	t.Helper()
	start := time.Now()
	out, err := c.exec(t, 5*time.Minute, "cloud-init", "status", "--wait", "--long")
	if err != nil {
		t.Fatalf("cloud-init status --wait: %v\n%s\n%s", err, out, c.console())
	}
	if !strings.Contains(out, "status: done") {
		t.Fatalf("cloud-init: %s\n%s", out, c.console())
	}
	state, _ := c.exec(t, time.Minute, "systemctl", "is-system-running", "--wait")
	if strings.TrimSpace(state) != "running" {
		failed, _ := c.exec(t, time.Minute, "systemctl", "--failed", "--no-legend")
		t.Fatalf("systemctl is-system-running: %s; failed units:\n%s", state, failed)
	}
	return time.Since(start)
}

var (
	ensureOnce sync.Once
	imageTar   string
	ensureErr  error
	ensureTook time.Duration
)

// ensured is image.Ensure on the lab's directory ($LAB_DIR, as `make lab`
// uses it, so the image is built once for both), once per test binary.
func ensured(t testing.TB) string {
	t.Helper()
	testutil.RequireRoot(t, "mmdebstrap --mode=root and mounts")
	testutil.RequireTool(t, "mmdebstrap", "mmdebstrap")
	ensureOnce.Do(func() {
		dir, err := labenv.Dir()
		if err != nil {
			ensureErr = err
			return
		}
		start := time.Now()
		imageTar, ensureErr = image.Ensure(context.Background(), dir)
		ensureTook = time.Since(start)
	})
	if ensureErr != nil {
		t.Fatal(ensureErr)
	}
	return imageTar
}
