package hypervisor

// These tests need neither root nor Nova: the hypervisor's decisions on
// bad configuration, bad state and bad cloud replies. TestLabHypervisor
// (build tag lab) runs it on the real Nova and systemd-nspawn.

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"net/netip"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/gophercloud/gophercloud/v2"
)

func TestNextFree(t *testing.T) {
	p := netip.MustParsePrefix
	a := netip.MustParseAddr
	for _, tc := range []struct {
		name         string
		pool, subnet netip.Prefix
		used         []string
		after        string
		want         string // "" for no free address
	}{
		{"pool inside a larger subnet starts at its first", p("198.18.1.0/24"), p("198.18.0.0/16"), nil, "", "198.18.1.0"},
		{"subnet's network address skipped", p("198.19.0.0/24"), p("198.19.0.0/24"), nil, "", "198.19.0.1"},
		{"used skipped", p("198.19.0.16/28"), p("198.19.0.0/24"), []string{"198.19.0.16", "198.19.0.17"}, "", "198.19.0.18"},
		{"freed address not reused before the pool is round", p("198.19.0.16/28"), p("198.19.0.0/24"), nil, "198.19.0.16", "198.19.0.17"},
		{"going round", p("198.19.0.16/28"), p("198.19.0.0/24"), []string{"198.19.0.16"}, "198.19.0.31", "198.19.0.17"},
		{"after outside the pool", p("198.19.0.16/28"), p("198.19.0.0/24"), nil, "10.0.0.1", "198.19.0.16"},
		{"subnet's broadcast skipped", p("198.19.0.254/31"), p("198.19.0.0/24"), []string{"198.19.0.254"}, "", ""},
		{"pool full", p("198.19.0.16/32"), p("198.19.0.0/24"), []string{"198.19.0.16"}, "", ""},
		{"a /32 pool and subnet", p("198.19.0.7/32"), p("198.19.0.7/32"), nil, "", ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			used := map[netip.Addr]bool{}
			for _, u := range tc.used {
				used[a(u)] = true
			}
			var after netip.Addr
			if tc.after != "" {
				after = a(tc.after)
			}
			got, err := nextFree(tc.pool, tc.subnet, used, after)
			if tc.want == "" {
				if err == nil || !strings.Contains(err.Error(), "no free address") {
					t.Fatalf("got %v, %v; want no free address", got, err)
				}
				return
			}
			if err != nil || got != a(tc.want) {
				t.Fatalf("got %v, %v; want %s", got, err, tc.want)
			}
		})
	}
}

// config is a valid Config whose Nova is a closed port on 127.0.0.1.
func config(t *testing.T) Config {
	return Config{
		Compute:  &gophercloud.ServiceClient{ProviderClient: &gophercloud.ProviderClient{}, Endpoint: "http://127.0.0.1:1/v2.1/"},
		MakeRoot: func(context.Context, string) error { return errors.New("no root here") },
		Bridge:   "orchlabtest", Pool: netip.MustParsePrefix("198.19.0.16/28"), Subnet: netip.MustParsePrefix("198.19.0.0/24"),
		StateDir: t.TempDir(), Interval: 20 * time.Millisecond,
	}
}

// server writes a server's state dir as the hypervisor keeps it.
func serverDir(t *testing.T, stateDir, id, address string) string {
	dir := filepath.Join(stateDir, id)
	if err := os.MkdirAll(filepath.Join(dir, "root", "etc"), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "address"), []byte(address), 0o600); err != nil {
		t.Fatal(err)
	}
	return dir
}

func TestNewRefuses(t *testing.T) {
	for _, tc := range []struct {
		name, want string
		change     func(t *testing.T, c *Config)
	}{
		{"no nova", "no Nova client", func(_ *testing.T, c *Config) { c.Compute = nil }},
		{"no root maker", "no MakeRoot", func(_ *testing.T, c *Config) { c.MakeRoot = nil }},
		{"no bridge", "no bridge", func(_ *testing.T, c *Config) { c.Bridge = "" }},
		{"ipv6 pool", "want an IPv4 prefix", func(_ *testing.T, c *Config) { c.Pool = netip.MustParsePrefix("2001:db8::/64") }},
		{"relative state dir", "want an absolute path", func(_ *testing.T, c *Config) { c.StateDir = "state" }},
		{"pool outside subnet", "not inside subnet", func(_ *testing.T, c *Config) { c.Subnet = netip.MustParsePrefix("198.18.0.0/16") }},
		{"pool larger than subnet", "not inside subnet", func(_ *testing.T, c *Config) { c.Pool = netip.MustParsePrefix("198.19.0.0/23") }},
		{"address not an address", "address: ParseAddr", func(t *testing.T, c *Config) { serverDir(t, c.StateDir, "s1", "198.19.0.16\n- x: y") }},
		{"address outside pool", "outside pool", func(t *testing.T, c *Config) { serverDir(t, c.StateDir, "s1", "198.19.0.99") }},
		{"address twice", "both hold address", func(t *testing.T, c *Config) {
			serverDir(t, c.StateDir, "s1", "198.19.0.16")
			serverDir(t, c.StateDir, "s2", "198.19.0.16\n")
		}},
		{"address file missing", "no such file", func(t *testing.T, c *Config) {
			dir := serverDir(t, c.StateDir, "s1", "198.19.0.16")
			_ = os.Remove(filepath.Join(dir, "address"))
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg := config(t)
			tc.change(t, &cfg)
			_, err := New(cfg)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("New: %v, want an error with %q", err, tc.want)
			}
		})
	}
}

// TestMakeMachineRefusesBadReplies: a server ID that is not one (a path)
// or user_data that is not base64 writes nothing; a MakeRoot failure leaves
// no state dir and is retried only after retryAfter.
func TestMakeMachineRefusesBadReplies(t *testing.T) {
	cfg := config(t)
	var logs bytes.Buffer
	cfg.Logger = slog.New(slog.NewTextHandler(&logs, nil))
	roots := 0
	cfg.MakeRoot = func(context.Context, string) error { roots++; return errors.New("no root here") }
	h, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	for _, s := range []server{
		{ID: "../../etc", Name: "x", Status: "ACTIVE"},
		{ID: "", Name: "x", Status: "ACTIVE"},
		{ID: strings.Repeat("a", 65), Name: "x", Status: "ACTIVE"},
		{ID: "s1", Name: "x", Status: "ACTIVE", UserData: "#cloud-config\nruncmd: [reboot]"},
		{ID: "s2", Name: "x", Status: "ACTIVE", UserData: "aGk"}, // unpadded
	} {
		if m, err := h.makeMachine(ctx, s); err == nil {
			t.Errorf("server %+v: made %+v, want an error", s, m)
		}
	}
	for i := 0; i < 3; i++ {
		h.follow(ctx, server{ID: "s3", Name: "x", Status: "ACTIVE", UserData: "aGk="})
	}
	if roots != 1 {
		t.Errorf("MakeRoot called %d times in a row, want once (then not before %v)", roots, retryAfter)
	}
	if n := strings.Count(logs.String(), "cannot make container"); n != 1 {
		t.Errorf("%d log lines for one failing root, want 1:\n%s", n, logs.String())
	}
	if f := h.failures["s3"]; !strings.Contains(f.msg, "no root here") || time.Until(f.at) < retryAfter/2 {
		t.Errorf("failure of s3: %+v, want retried after %v", f, retryAfter)
	}
	if entries, _ := os.ReadDir(cfg.StateDir); len(entries) != 0 || len(h.Containers()) != 0 {
		t.Errorf("state dir holds %v, containers %v: want nothing", entries, h.Containers())
	}
}

// TestNovaDownChangesNothing: while Nova does not answer, no container is
// removed (a failed list is not an empty one), and the failure is one log
// line, not one per poll.
func TestNovaDownChangesNothing(t *testing.T) {
	cfg := config(t)
	var logs bytes.Buffer
	cfg.Logger = slog.New(slog.NewTextHandler(&logs, nil))
	dir := serverDir(t, cfg.StateDir, "0b7c2d1e-4f5a-4b6c-8d9e-0f1a2b3c4d5e", "198.19.0.20")
	h, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 15*cfg.Interval)
	defer cancel()
	if err := h.Run(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(dir, "root", "etc")); err != nil {
		t.Fatalf("root removed while Nova was down: %v", err)
	}
	cs := h.Containers()
	if len(cs) != 1 || cs[0].Address != netip.MustParseAddr("198.19.0.20") || cs[0].PID != 0 || cs[0].Veth != "vb-0b7c2d1e4f5a" {
		t.Errorf("containers %+v", cs)
	}
	if n := strings.Count(logs.String(), "nova list failed"); n != 1 {
		t.Errorf("%d log lines for one outage, want 1:\n%s", n, logs.String())
	}
	if _, err := h.Address("nobody"); err == nil {
		t.Error("Address of an unknown server: no error")
	}
	if _, err := h.Exec(ctx, "0b7c2d1e-4f5a-4b6c-8d9e-0f1a2b3c4d5e", "true"); err == nil {
		t.Error("Exec in a container that is not running: no error")
	}
}

// TestStalePIDFileNotAdopted: a PID file that names no process, PID 1, a
// PID past the kernel's limit, garbage, or a live process that is not
// this root's systemd-nspawn (the test itself) adopts nothing, and is
// removed; Down then has nothing to stop.
func TestStalePIDFileNotAdopted(t *testing.T) {
	for _, pid := range []string{"", "abc", "-5", "0", "1", "99999999999999999999", "4194305", strconv.Itoa(os.Getpid())} {
		cfg := config(t)
		dir := serverDir(t, cfg.StateDir, "s1", "198.19.0.16")
		file := filepath.Join(dir, "nspawn.pid")
		if err := os.WriteFile(file, []byte(pid+"\n"), 0o600); err != nil {
			t.Fatal(err)
		}
		h, err := New(cfg)
		if err != nil {
			t.Fatal(err)
		}
		if c := h.Containers(); len(c) != 1 || c[0].PID != 0 {
			t.Errorf("pid file %q: containers %+v, want one, not running", pid, c)
		}
		if _, err := os.Stat(file); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("pid file %q: %v, want removed", pid, err)
		}
		if err := Down(cfg.StateDir, time.Second, nil); err != nil {
			t.Errorf("Down: %v", err)
		}
	}
	if err := Down(filepath.Join(t.TempDir(), "none"), time.Second, nil); err != nil {
		t.Errorf("Down of a state dir that does not exist: %v", err)
	}
}

// Remove leaves nothing of a state dir: a machine that never got its
// address, and one whose root is a mount (an overlay in the lab; tmpfs
// here). os.RemoveAll alone would empty the mounted root and then fail on
// its mount point, which an earlier lab did, leaving every later run's
// start to fail.
func TestRemoveDetachesRoots(t *testing.T) {
	cfg := config(t)
	booted := serverDir(t, cfg.StateDir, "s1", "198.19.0.16")
	never := filepath.Join(cfg.StateDir, "00000000-0000-4000-8000-000000000002")
	for _, d := range []string{filepath.Join(booted, "root"), filepath.Join(never, "root")} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	mounted := os.Geteuid() == 0
	if mounted {
		if err := syscall.Mount("tmpfs", filepath.Join(booted, "root"), "tmpfs", 0, "size=1m"); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = syscall.Unmount(filepath.Join(booted, "root"), syscall.MNT_DETACH) })
	} else if os.Getenv("CI") == "true" {
		t.Fatal("CI runs as root: the mounted root must be tried")
	}
	if err := os.WriteFile(filepath.Join(booted, "root", "etc-hostname"), []byte("s1\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := Remove(cfg.StateDir, time.Second, nil); err != nil {
		t.Fatalf("Remove: %v (mounted root: %v)", err, mounted)
	}
	if _, err := os.Stat(cfg.StateDir); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("state dir after Remove: %v, want gone", err)
	}
	if err := Remove(cfg.StateDir, time.Second, nil); err != nil {
		t.Errorf("Remove of a state dir that does not exist: %v", err)
	}
}
