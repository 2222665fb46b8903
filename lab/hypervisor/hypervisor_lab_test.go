//go:build lab

package hypervisor

import (
	"context"
	"crypto/rand"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/gophercloud/gophercloud/v2/openstack/compute/v2/servers"
	"github.com/jiocloud/orchestrate/internal/novatest"
)

const (
	testBridge = "orchlabtest"
	hostAddr   = "198.19.0.1/24"
)

var (
	testPool   = netip.MustParsePrefix("198.19.0.16/28")
	testSubnet = netip.MustParsePrefix("198.19.0.0/24")
)

// rootfsTar is the cached Debian rootfs ($LAB_ROOTFS, else the one
// lab-findings.md built).
func rootfsTar(t *testing.T) string {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Fatal("the lab hypervisor needs root (bridge, systemd-nspawn)")
	}
	p := os.Getenv("LAB_ROOTFS")
	if p == "" {
		p = "/var/tmp/lab/rootfs.tar"
	}
	if _, err := os.Stat(p); err != nil {
		t.Fatalf("no rootfs tar (%v): build one with mmdebstrap --variant=minbase "+
			"--include=systemd,systemd-sysv,dbus,iproute2,cloud-init bookworm %s", err, p)
	}
	return p
}

// extract is a MakeRoot: the rootfs tar unpacked into dest.
func extract(tarball string) func(ctx context.Context, dest string) error {
	return func(ctx context.Context, dest string) error {
		if err := os.Mkdir(dest, 0o755); err != nil {
			return err
		}
		out, err := exec.CommandContext(ctx, "tar", "-xf", tarball, "-C", dest).CombinedOutput()
		if err != nil {
			return fmt.Errorf("tar: %w: %s", err, out)
		}
		return nil
	}
}

// bridge makes the test bridge (a leftover of a crashed run replaced) and
// removes it at the end.
func bridge(t *testing.T) {
	t.Helper()
	_ = exec.Command("ip", "link", "del", testBridge).Run()
	for _, args := range [][]string{
		{"link", "add", testBridge, "type", "bridge"},
		{"addr", "add", hostAddr, "dev", testBridge},
		{"link", "set", testBridge, "up"},
	} {
		if out, err := exec.Command("ip", args...).CombinedOutput(); err != nil {
			t.Fatalf("ip %v: %v: %s", args, err, out)
		}
	}
	t.Cleanup(func() { _ = exec.Command("ip", "link", "del", testBridge).Run() })
}

// run starts h.Run and returns the function that ends it and waits.
func run(t *testing.T, h *Hypervisor) (stop func()) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- h.Run(ctx) }()
	stopped := false
	stop = func() {
		if stopped {
			return
		}
		stopped = true
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Run: %v", err)
		}
	}
	t.Cleanup(stop)
	return stop
}

// cleanup shows, when the test failed, each container's console and
// cloud-init output, then powers off what a KeepRunning run left.
func cleanup(t *testing.T, stateDir string) {
	if t.Failed() {
		logs, _ := filepath.Glob(filepath.Join(stateDir, "*", "console.log"))
		more, _ := filepath.Glob(filepath.Join(stateDir, "*", "root/var/log/cloud-init-output.log"))
		for _, p := range append(logs, more...) {
			raw, _ := os.ReadFile(p)
			if len(raw) > 4000 {
				raw = raw[len(raw)-4000:]
			}
			t.Logf("%s (end):\n%s", p, raw)
		}
	}
	if err := Down(stateDir, 10*time.Second, nil); err != nil {
		t.Errorf("Down: %v", err)
	}
	cmdlines, _ := filepath.Glob("/proc/[0-9]*/cmdline")
	for _, p := range cmdlines {
		if raw, _ := os.ReadFile(p); strings.Contains(string(raw), stateDir) {
			t.Errorf("left running: %s", strings.ReplaceAll(string(raw), "\x00", " "))
		}
	}
}

func waitFor(t *testing.T, what string, timeout time.Duration, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("%s: not after %s", what, timeout)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

func get(h *Hypervisor, id string) Container {
	for _, c := range h.Containers() {
		if c.ID == id {
			return c
		}
	}
	return Container{}
}

func alive(pid int) bool { return pid > 0 && syscall.Kill(pid, 0) == nil }

// pss is the proportional set size of every process in the container's
// PID namespace, in KiB (shared pages split among their users).
func pss(t *testing.T, nspawn int) int {
	t.Helper()
	init := initPID(nspawn)
	ns, err := os.Readlink(fmt.Sprintf("/proc/%d/ns/pid", init))
	if err != nil {
		t.Fatalf("pid namespace of %d: %v", init, err)
	}
	total := 0
	procs, _ := filepath.Glob("/proc/[0-9]*")
	for _, p := range procs {
		if l, _ := os.Readlink(p + "/ns/pid"); l != ns {
			continue
		}
		raw, _ := os.ReadFile(p + "/smaps_rollup")
		for _, line := range strings.Split(string(raw), "\n") {
			var kb int
			if _, err := fmt.Sscanf(line, "Pss: %d kB", &kb); err == nil {
				total += kb
			}
		}
	}
	return total
}

// reached reports whether url answers want within timeout.
func reached(url, want string, timeout time.Duration) bool {
	c := http.Client{Timeout: 2 * time.Second}
	for deadline := time.Now().Add(timeout); time.Now().Before(deadline); time.Sleep(200 * time.Millisecond) {
		resp, err := c.Get(url)
		if err != nil {
			continue
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if string(b) == want {
			return true
		}
	}
	return false
}

const userDataA = `#cloud-config
write_files:
- path: /srv/hvtest/hello
  content: %s
- path: /etc/systemd/system/hvtest-http.service
  content: |
    [Service]
    ExecStart=/usr/bin/python3 -m http.server 8080 --directory /srv/hvtest
    [Install]
    WantedBy=multi-user.target
runcmd:
- [sh, -c, 'echo ran >> /var/lib/hvtest-runs']
- [systemctl, enable, --now, --no-block, hvtest-http.service]
`

// TestLabHypervisor drives the hypervisor through the real Nova and real
// systemd-nspawn: boot with cloud-init running the server's user data, the
// static address reachable over the bridge, a hypervisor restart adopting
// running containers, Nova stop and start (cloud-init not rerun), a
// container that dies by itself and one Killed staying off while Nova says
// ACTIVE (and across a restart of the hypervisor) until Nova stops and
// starts it, Down and a hypervisor's end powering containers off, Nova
// delete removing container and root.
func TestLabHypervisor(t *testing.T) {
	tarball := rootfsTar(t)
	cloud := novatest.Start(t)
	bridge(t)
	cfg := Config{Compute: cloud.AdminCompute(t), Project: cloud.ProjectID, MakeRoot: extract(tarball), Bridge: testBridge,
		Pool: testPool, Subnet: testSubnet, StateDir: t.TempDir(), KeepRunning: true, StopTimeout: 20 * time.Second}
	t.Cleanup(func() { cleanup(t, cfg.StateDir) })
	h, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	stop := run(t, h)

	token := strings.ToLower(rand.Text()[:12])
	compute := cloud.Compute(t)
	create := func(name string, userData []byte) string {
		opts := cloud.CreateOpts(name, nil)
		opts.UserData = userData
		s, err := servers.Create(context.Background(), compute, opts, nil).Extract()
		if err != nil {
			t.Fatalf("create %s: %v", name, err)
		}
		return s.ID
	}
	// One after the other, each timed from the moment Nova says ACTIVE:
	// to nspawn started (the root made), to cloud-init's final stage done.
	boot := func(name string, userData []byte) string {
		id := create(name, userData)
		cloud.WaitForStatus(t, id, "ACTIVE")
		active := time.Now()
		waitFor(t, "nspawn of "+name, time.Minute, func() bool { return get(h, id).PID != 0 })
		started := time.Now()
		finished := filepath.Join(cfg.StateDir, id, "root/var/lib/cloud/instances", id, "boot-finished")
		var fi os.FileInfo
		waitFor(t, "cloud-init final of "+name, 3*time.Minute, func() bool { fi, err = os.Stat(finished); return err == nil })
		t.Logf("boot of %s: Nova ACTIVE -> nspawn started %v, -> cloud-init final done %v", name,
			started.Sub(active).Round(10*time.Millisecond), fi.ModTime().Sub(active).Round(10*time.Millisecond))
		return id
	}
	nameB := `hvtest-b: [x] #"y"`
	a := boot("hvtest-a", []byte(fmt.Sprintf(userDataA, token)))
	b := boot(nameB, nil)

	checkA := func(what string) Container {
		c := get(h, a)
		if !alive(c.PID) || !testPool.Contains(c.Address) {
			t.Fatalf("%s: container of a %+v: want running with an address of %v", what, c, testPool)
		}
		url := "http://" + c.Address.String() + ":8080/hello"
		if !reached(url, token, time.Minute) {
			for _, argv := range []string{"ip addr", "ip route", "ss -ltn", "systemctl status hvtest-http"} {
				out, err := h.Exec(context.Background(), a, strings.Fields(argv)...)
				t.Logf("%s: %v\n%s", argv, err, out)
			}
			t.Fatalf("%s: %s from the host: not %q after a minute", what, url, token)
		}
		runs, err := os.ReadFile(filepath.Join(c.Root, "var/lib/hvtest-runs"))
		if string(runs) != "ran\n" {
			t.Fatalf("%s: runcmd ran %q (err %v), want once", what, runs, err)
		}
		return c
	}
	ca := checkA("first boot")
	ctx := context.Background()
	for _, tc := range []struct{ argv, want string }{
		{"cat /srv/hvtest/hello", token},
		{"hostname", "hvtest-a"},
		{"ip -4 route show default", ""},
		{"ip -4 -o addr show host0", ca.Address.String() + "/24"},
	} {
		out, err := h.Exec(ctx, "hvtest-a", strings.Fields(tc.argv)...)
		if err != nil || !strings.Contains(string(out), tc.want) || (tc.want == "" && len(out) != 0) {
			t.Errorf("exec %s: %q (err %v), want %q", tc.argv, out, err, tc.want)
		}
	}
	cb := get(h, b)
	var meta map[string]string
	raw, _ := os.ReadFile(filepath.Join(cb.Root, "var/lib/cloud/seed/nocloud/meta-data"))
	if err := json.Unmarshal(raw, &meta); err != nil || meta["local-hostname"] != nameB || meta["instance-id"] != b {
		t.Errorf("b's meta-data %q (err %v): want instance-id %s, local-hostname %q", raw, err, b, nameB)
	}
	if ud, err := os.ReadFile(filepath.Join(cb.Root, "var/lib/cloud/seed/nocloud/user-data")); err != nil || len(ud) != 0 {
		t.Errorf("b's user-data %q (err %v): want an empty file", ud, err)
	}
	if !alive(cb.PID) || cb.Address == ca.Address || !testPool.Contains(cb.Address) {
		t.Errorf("b %+v: want running at an address of its own (a has %v)", cb, ca.Address)
	}

	time.Sleep(10 * time.Second) // idle
	t.Logf("RAM per idle container (PSS of its processes): a %d MiB (python http.server running), b %d MiB",
		pss(t, ca.PID)/1024, pss(t, cb.PID)/1024)

	// restart ends the running hypervisor and starts another on the same
	// state dir, keeping the containers running at its end or not.
	restart := func(keep bool) {
		t.Helper()
		stop()
		cfg.KeepRunning = keep
		if h, err = New(cfg); err != nil {
			t.Fatal(err)
		}
		stop = run(t, h)
	}
	// KeepRunning leaves the containers; the next hypervisor adopts them
	// from their PID files, addresses unchanged.
	stop()
	if !alive(ca.PID) || !alive(cb.PID) {
		t.Fatal("KeepRunning: containers stopped with the hypervisor")
	}
	restart(false)
	if c := get(h, a); c.PID != ca.PID || c.Address != ca.Address {
		t.Fatalf("after restart a is %+v, want adopted pid %d at %v", c, ca.PID, ca.Address)
	}

	// Nova stop: powered off cleanly, root kept; Nova start: booted again,
	// same address, cloud-init not rerun.
	if err := servers.Stop(ctx, compute, a).ExtractErr(); err != nil {
		t.Fatal(err)
	}
	cloud.WaitForStatus(t, a, "SHUTOFF")
	shutoff := time.Now()
	waitFor(t, "a powered off", 30*time.Second, func() bool { return !alive(ca.PID) && get(h, a).PID == 0 })
	t.Logf("Nova SHUTOFF -> container off (clean power-off): %v", time.Since(shutoff).Round(10*time.Millisecond))
	if _, err := os.Stat(filepath.Join(ca.Root, "srv/hvtest/hello")); err != nil || get(h, a).Dead {
		t.Fatalf("a after SHUTOFF: root %v, %+v", err, get(h, a))
	}
	if err := servers.Start(ctx, compute, a).ExtractErr(); err != nil {
		t.Fatal(err)
	}
	cloud.WaitForStatus(t, a, "ACTIVE")
	waitFor(t, "a booted again", 30*time.Second, func() bool { return get(h, a).PID != 0 })
	if c := checkA("after Nova start"); c.Address != ca.Address {
		t.Errorf("a's address went from %v to %v", ca.Address, c.Address)
	}

	// Machine death: b powers itself off, a is Killed; both stay off while
	// Nova says ACTIVE.
	if out, err := h.Exec(ctx, b, "systemctl", "poweroff"); err != nil {
		t.Fatalf("poweroff in b: %v: %s", err, out)
	}
	ca = get(h, a)
	if err := h.Kill("hvtest-a"); err != nil {
		t.Fatal(err)
	}
	if alive(ca.PID) || get(h, a).PID != 0 {
		t.Fatalf("a still running after Kill: %+v", get(h, a))
	}
	waitFor(t, "b off", 30*time.Second, func() bool { return get(h, b).PID == 0 })
	time.Sleep(3 * time.Second) // three polls
	for _, id := range []string{a, b} {
		if c := get(h, id); c.PID != 0 || !c.Dead {
			t.Errorf("%s restarted without Nova being told: %+v", id, c)
		}
		if s := cloud.WaitForStatus(t, id, "ACTIVE"); s.Status != "ACTIVE" {
			t.Errorf("Nova says %s for %s", s.Status, id)
		}
	}
	if err := h.Kill(a); err == nil {
		t.Error("Kill of a dead container: no error")
	}

	// Death outlives a restart of the hypervisor; Nova stop and start
	// clears it.
	restart(true)
	time.Sleep(3 * time.Second) // three polls of the new hypervisor, none may start them
	if ca, cb = get(h, a), get(h, b); ca.PID != 0 || cb.PID != 0 || !ca.Dead || !cb.Dead {
		t.Fatalf("dead containers after a restart: %+v, %+v; want off and dead", ca, cb)
	}
	if err := servers.Stop(ctx, compute, b).ExtractErr(); err != nil {
		t.Fatal(err)
	}
	cloud.WaitForStatus(t, b, "SHUTOFF")
	if err := servers.Start(ctx, compute, b).ExtractErr(); err != nil {
		t.Fatal(err)
	}
	cloud.WaitForStatus(t, b, "ACTIVE")
	waitFor(t, "b booted after Nova stop and start", 30*time.Second, func() bool { return get(h, b).PID != 0 })

	// make lab-down: Down powers off what a KeepRunning hypervisor left.
	// A hypervisor that does not keep them powers them off at its end.
	cb = get(h, b)
	stop()
	if err := Down(cfg.StateDir, 20*time.Second, nil); err != nil || alive(cb.PID) {
		t.Fatalf("Down: %v, b's nspawn alive %v", err, alive(cb.PID))
	}
	if _, err := os.Stat(filepath.Join(cfg.StateDir, b, "nspawn.pid")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("b's PID file after Down: %v", err)
	}
	restart(false)
	waitFor(t, "b booted by the next hypervisor", 30*time.Second, func() bool { return get(h, b).PID != 0 })
	cb = get(h, b)
	restart(false)
	if alive(cb.PID) {
		t.Fatal("b still running after its hypervisor ended without KeepRunning")
	}

	// Nova delete: containers gone, roots removed.
	for _, id := range []string{a, b} {
		if err := servers.Delete(ctx, compute, id).ExtractErr(); err != nil {
			t.Fatal(err)
		}
		cloud.WaitGone(t, id)
	}
	waitFor(t, "containers removed", 30*time.Second, func() bool { return len(h.Containers()) == 0 })
	for _, id := range []string{a, b} {
		if _, err := os.Stat(filepath.Join(cfg.StateDir, id)); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("state dir of %s: %v, want removed", id, err)
		}
	}
}
