package netlab

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
	"slices"
	"strings"
	"sync"
)

// Net is a lab network Up made. Its methods may be called from several
// goroutines.
type Net struct {
	cfg Config
	log *slog.Logger

	mu    sync.Mutex // guards parts and the nftables tables
	parts map[string]partition
}

// Up makes the lab's network, or brings a half-made or earlier one to
// exactly cfg: the bridge, up, with IPv6 off and IPv4 forwarding off on it;
// cfg.Host and cfg.Extra as its only IPv4 addresses (the extra ones /32,
// so the subnet has one route); and the nftables guard with no partition.
// It never enables forwarding: net.ipv4.ip_forward is left as it is, and
// the guard drops lab traffic the host would route whatever its value.
// On an error it leaves what it made so far: Clean removes it.
func Up(ctx context.Context, cfg Config) (*Net, error) {
	if err := cfg.Validate(); err != nil {
		return nil, fmt.Errorf("netlab: %w", err)
	}
	log := cfg.Log
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	n := &Net{cfg: cfg, log: log, parts: map[string]partition{}}
	// The guard first: from here on nothing of the lab is routed.
	if err := n.apply(ctx); err != nil {
		return nil, err
	}
	if err := ensureBridge(ctx, cfg.Bridge); err != nil {
		return nil, err
	}
	for _, s := range [][2]string{
		{"/proc/sys/net/ipv6/conf/" + cfg.Bridge + "/disable_ipv6", "1"},
		{"/proc/sys/net/ipv4/conf/" + cfg.Bridge + "/forwarding", "0"},
	} {
		if err := os.WriteFile(s[0], []byte(s[1]+"\n"), 0o644); err != nil {
			return nil, fmt.Errorf("netlab: %w", err)
		}
	}
	if err := ensureAddrs(ctx, cfg); err != nil {
		return nil, err
	}
	fwd, err := IPForwarding()
	if err != nil {
		return nil, err
	}
	log.Info("lab network up", "bridge", cfg.Bridge, "host", cfg.Host, "extra", cfg.Extra, "ip_forward", fwd)
	return n, nil
}

// Config is the configuration the network was made with.
func (n *Net) Config() Config { return n.cfg }

// Down removes everything Up and AddNamespace made (Clean).
func (n *Net) Down(ctx context.Context) error {
	n.mu.Lock()
	defer n.mu.Unlock()
	n.parts = map[string]partition{}
	return Clean(ctx, n.cfg)
}

// Clean removes what a lab network of cfg consists of, whoever made it
// and however far it got: the network namespaces named "<bridge>-*", the
// bridge, and both nftables tables. What is already gone is no error, so
// it cleans up after a crashed run, and a second call does nothing. An
// interface of the bridge's name that is no bridge is not the lab's: it
// is left alone, and named in the error.
func Clean(ctx context.Context, cfg Config) error {
	if err := cfg.Validate(); err != nil {
		return fmt.Errorf("netlab: %w", err)
	}
	var errs []error
	nss, err := namespaces(cfg.Bridge)
	errs = append(errs, err)
	for _, ns := range nss {
		errs = append(errs, run(ctx, "ip", "netns", "delete", ns))
	}
	switch kind, exists, err := linkKind(ctx, cfg.Bridge); {
	case err != nil:
		errs = append(errs, err)
	case exists && kind == "bridge":
		errs = append(errs, run(ctx, "ip", "link", "delete", cfg.Bridge))
	case exists:
		errs = append(errs, fmt.Errorf("netlab: interface %s is no bridge (%q): not the lab's, left alone", cfg.Bridge, kind))
	}
	for _, fam := range []string{"inet", "bridge"} {
		if run(ctx, "nft", "list", "table", fam, cfg.Table) == nil {
			errs = append(errs, run(ctx, "nft", "delete", "table", fam, cfg.Table))
		}
	}
	return errors.Join(errs...)
}

// Partition cuts the traffic between every address of from and every
// address of to, both ways, until Heal(name): TCP connections stall
// (nothing is reset), as on a real network that broke. A partition of the
// same name is replaced. Addresses must be the lab subnet's and may not be
// on both sides.
func (n *Net) Partition(ctx context.Context, name string, from, to []netip.Addr) error {
	if !ident.MatchString(name) {
		return fmt.Errorf("netlab: partition name %q: want 1 to 32 of a-z, 0-9 and _, starting with a letter", name)
	}
	a, err := n.addrSet("from", from)
	if err != nil {
		return err
	}
	b, err := n.addrSet("to", to)
	if err != nil {
		return err
	}
	for _, x := range a {
		if _, both := slices.BinarySearchFunc(b, x, netip.Addr.Compare); both {
			return fmt.Errorf("netlab: partition %s: %s is on both sides", name, x)
		}
	}
	n.mu.Lock()
	defer n.mu.Unlock()
	old, had := n.parts[name]
	n.parts[name] = partition{a: a, b: b}
	if err := n.apply(ctx); err != nil {
		if had {
			n.parts[name] = old
		} else {
			delete(n.parts, name)
		}
		return err
	}
	n.log.Info("partition", "name", name, "from", a, "to", b)
	return nil
}

// Heal removes partition name; one that does not exist is no error.
func (n *Net) Heal(ctx context.Context, name string) error {
	n.mu.Lock()
	defer n.mu.Unlock()
	old, had := n.parts[name]
	if !had {
		return nil
	}
	delete(n.parts, name)
	if err := n.apply(ctx); err != nil {
		n.parts[name] = old
		return err
	}
	n.log.Info("healed", "name", name)
	return nil
}

// Partitions are the names of the partitions in place, sorted.
func (n *Net) Partitions() []string {
	n.mu.Lock()
	defer n.mu.Unlock()
	out := make([]string, 0, len(n.parts))
	for name := range n.parts {
		out = append(out, name)
	}
	slices.Sort(out)
	return out
}

// addrSet checks one side of a partition and returns it sorted, without
// duplicates.
func (n *Net) addrSet(side string, addrs []netip.Addr) ([]netip.Addr, error) {
	if len(addrs) == 0 || len(addrs) > 65536 {
		return nil, fmt.Errorf("netlab: partition %s: %d addresses, want 1 to 65536", side, len(addrs))
	}
	for _, a := range addrs {
		if err := n.cfg.inSubnet(a); err != nil {
			return nil, fmt.Errorf("netlab: partition %s: %w", side, err)
		}
	}
	out := slices.Clone(addrs)
	slices.SortFunc(out, netip.Addr.Compare)
	return slices.Compact(out), nil
}

// apply replaces the nftables tables with the guard and n.parts, in one
// nft transaction.
func (n *Net) apply(ctx context.Context) error {
	cmd := exec.CommandContext(ctx, "nft", "-f", "-")
	cmd.Stdin = strings.NewReader(ruleset(n.cfg, n.parts))
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("netlab: nft -f: %w: %s", err, bytes.TrimSpace(out))
	}
	return nil
}

// IPForwarding reports net.ipv4.ip_forward: whether the host routes IPv4
// between its interfaces at all. The lab works either way.
func IPForwarding() (bool, error) {
	b, err := os.ReadFile("/proc/sys/net/ipv4/ip_forward")
	if err != nil {
		return false, fmt.Errorf("netlab: %w", err)
	}
	return strings.TrimSpace(string(b)) == "1", nil
}

// ensureBridge creates the bridge unless it exists, and sets it up.
func ensureBridge(ctx context.Context, name string) error {
	kind, exists, err := linkKind(ctx, name)
	switch {
	case err != nil:
		return err
	case !exists:
		if err := run(ctx, "ip", "link", "add", name, "type", "bridge"); err != nil {
			return err
		}
	case kind != "bridge":
		return fmt.Errorf("netlab: interface %s exists and is no bridge (%q): remove it or name another bridge", name, kind)
	}
	return run(ctx, "ip", "link", "set", name, "up")
}

// linkKind is the kind of interface name ("bridge", "veth", "" for a
// physical one), and whether it exists.
func linkKind(ctx context.Context, name string) (string, bool, error) {
	if !linkExists(ctx, name) {
		return "", false, nil
	}
	var links []struct {
		Info struct {
			Kind string `json:"info_kind"`
		} `json:"linkinfo"`
	}
	out, err := output(ctx, "ip", "-j", "-d", "link", "show", "dev", name)
	if err != nil {
		return "", false, err
	}
	if err := json.Unmarshal(out, &links); err != nil || len(links) != 1 {
		return "", false, fmt.Errorf("netlab: ip -j link show %s: unexpected output (%v)", name, err)
	}
	return links[0].Info.Kind, true, nil
}

// ensureAddrs makes the bridge's IPv4 addresses exactly cfg's.
func ensureAddrs(ctx context.Context, cfg Config) error {
	want := map[netip.Prefix]bool{cfg.Host: true}
	for _, a := range cfg.Extra {
		want[netip.PrefixFrom(a, 32)] = true
	}
	var links []struct {
		Addrs []struct {
			Family string `json:"family"`
			Local  string `json:"local"`
			Len    int    `json:"prefixlen"`
		} `json:"addr_info"`
	}
	out, err := output(ctx, "ip", "-j", "addr", "show", "dev", cfg.Bridge)
	if err != nil {
		return err
	}
	if err := json.Unmarshal(out, &links); err != nil || len(links) != 1 {
		return fmt.Errorf("netlab: ip -j addr show %s: unexpected output (%v)", cfg.Bridge, err)
	}
	for _, a := range links[0].Addrs {
		if a.Family != "inet" {
			continue
		}
		p, err := netip.ParsePrefix(fmt.Sprintf("%s/%d", a.Local, a.Len))
		if err == nil && want[p] {
			delete(want, p)
			continue
		}
		if err := run(ctx, "ip", "addr", "delete", fmt.Sprintf("%s/%d", a.Local, a.Len), "dev", cfg.Bridge); err != nil {
			return err
		}
	}
	for p := range want {
		if err := run(ctx, "ip", "addr", "add", p.String(), "dev", cfg.Bridge); err != nil {
			return err
		}
	}
	return nil
}

// namespaces lists the network namespaces named "<bridge>-*".
func namespaces(bridge string) ([]string, error) {
	names, err := filepath.Glob("/run/netns/" + bridge + "-*")
	if err != nil {
		return nil, fmt.Errorf("netlab: %w", err)
	}
	for i := range names {
		names[i] = filepath.Base(names[i])
	}
	return names, nil
}

func linkExists(ctx context.Context, name string) bool {
	return run(ctx, "ip", "link", "show", "dev", name) == nil
}

// run runs a command, its output in the error.
func run(ctx context.Context, name string, args ...string) error {
	_, err := output(ctx, name, args...)
	return err
}

// output runs a command and returns its standard output; on failure the
// error holds the command line and its standard error.
func output(ctx context.Context, name string, args ...string) ([]byte, error) {
	cmd := exec.CommandContext(ctx, name, args...)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return nil, fmt.Errorf("netlab: %s %s: %w: %s", name, strings.Join(args, " "), err, bytes.TrimSpace(stderr.Bytes()))
	}
	return out, nil
}
