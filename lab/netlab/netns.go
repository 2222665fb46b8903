package netlab

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"regexp"
	"runtime"
	"slices"

	"golang.org/x/sys/unix"
)

// Namespace is a network namespace attached to the bridge by a veth pair,
// as a container's network is: one interface, eth0, with one address of
// the lab's subnet, and no route but the subnet's. The lab uses it for
// clients that are no container (the tests' probes, a load generator).
type Namespace struct {
	// Name is the namespace's name, "<bridge>-<name>" (ip netns).
	Name string
	// Addr is its address on the bridge.
	Addr netip.Addr
	path string
}

var nsName = regexp.MustCompile(`^[a-z0-9]{1,16}$`)

// AddNamespace makes namespace "<bridge>-<name>" with address addr on the
// bridge, replacing one of that name left by an earlier run.
func (n *Net) AddNamespace(ctx context.Context, name string, addr netip.Addr) (*Namespace, error) {
	if !nsName.MatchString(name) {
		return nil, fmt.Errorf("netlab: namespace name %q: want 1 to 16 of a-z and 0-9", name)
	}
	if err := n.cfg.inSubnet(addr); err != nil {
		return nil, fmt.Errorf("netlab: namespace %s: %w", name, err)
	}
	if addr == n.cfg.Host.Addr() || slices.Contains(n.cfg.Extra, addr) {
		return nil, fmt.Errorf("netlab: namespace %s: %s is the host's", name, addr)
	}
	full := n.cfg.Bridge + "-" + name
	ns := &Namespace{Name: full, Addr: addr, path: "/run/netns/" + full}
	if _, err := os.Stat(ns.path); err == nil {
		if err := run(ctx, "ip", "netns", "delete", full); err != nil {
			return nil, err
		}
	}
	// Interface names hold at most 15 bytes: derive both ends' from the
	// namespace's name.
	sum := sha256.Sum256([]byte(full))
	host, peer := "olv"+hex.EncodeToString(sum[:4]), "olp"+hex.EncodeToString(sum[:4])
	if linkExists(ctx, host) {
		if err := run(ctx, "ip", "link", "delete", host); err != nil {
			return nil, err
		}
	}
	prefix := netip.PrefixFrom(addr, n.cfg.Host.Bits()).String()
	steps := [][]string{
		{"ip", "netns", "add", full},
		{"ip", "link", "add", host, "type", "veth", "peer", "name", peer},
		{"ip", "link", "set", peer, "netns", full},
		{"ip", "-n", full, "link", "set", peer, "name", "eth0"},
		{"ip", "-n", full, "addr", "add", prefix, "dev", "eth0"},
		{"ip", "-n", full, "link", "set", "lo", "up"},
		{"ip", "-n", full, "link", "set", "eth0", "up"},
		{"ip", "link", "set", host, "master", n.cfg.Bridge},
		{"ip", "link", "set", host, "up"},
	}
	for _, s := range steps {
		if err := run(ctx, s[0], s[1:]...); err != nil {
			_ = run(ctx, "ip", "netns", "delete", full)
			_ = run(ctx, "ip", "link", "delete", host)
			return nil, err
		}
	}
	return ns, nil
}

// Close deletes the namespace; its veth pair goes with it once no
// process runs in it.
func (ns *Namespace) Close(ctx context.Context) error {
	if _, err := os.Stat(ns.path); errors.Is(err, os.ErrNotExist) {
		return nil
	}
	return run(ctx, "ip", "netns", "delete", ns.Name)
}

// Command is a command that runs in the namespace (ip netns exec).
func (ns *Namespace) Command(ctx context.Context, name string, args ...string) *exec.Cmd {
	return exec.CommandContext(ctx, "ip", append([]string{"netns", "exec", ns.Name, name}, args...)...)
}

// Do runs f on an OS thread that is in the namespace. Sockets f creates
// stay in the namespace after it returns.
func (ns *Namespace) Do(f func() error) error {
	errCh := make(chan error, 1)
	go func() {
		runtime.LockOSThread()
		orig, err := os.Open("/proc/thread-self/ns/net")
		if err != nil {
			runtime.UnlockOSThread()
			errCh <- fmt.Errorf("netlab: %w", err)
			return
		}
		defer orig.Close()
		target, err := os.Open(ns.path)
		if err != nil {
			runtime.UnlockOSThread()
			errCh <- fmt.Errorf("netlab: namespace %s: %w", ns.Name, err)
			return
		}
		defer target.Close()
		if err := unix.Setns(int(target.Fd()), unix.CLONE_NEWNET); err != nil {
			runtime.UnlockOSThread()
			errCh <- fmt.Errorf("netlab: enter namespace %s: %w", ns.Name, err)
			return
		}
		ferr := f()
		if err := unix.Setns(int(orig.Fd()), unix.CLONE_NEWNET); err != nil {
			// The thread stays locked and ends with this goroutine: no
			// other goroutine runs in the wrong namespace.
			errCh <- errors.Join(ferr, fmt.Errorf("netlab: leave namespace %s: %w", ns.Name, err))
			return
		}
		runtime.UnlockOSThread()
		errCh <- ferr
	}()
	return <-errCh
}

// DialContext connects from inside the namespace (for an http.Transport's
// DialContext: clients that reach the lab the way a container does).
func (ns *Namespace) DialContext(ctx context.Context, network, address string) (net.Conn, error) {
	var c net.Conn
	err := ns.Do(func() error {
		var err error
		c, err = (&net.Dialer{}).DialContext(ctx, network, address)
		return err
	})
	return c, err
}

// Listen listens inside the namespace.
func (ns *Namespace) Listen(network, address string) (net.Listener, error) {
	var l net.Listener
	err := ns.Do(func() error {
		var err error
		l, err = net.Listen(network, address)
		return err
	})
	return l, err
}
