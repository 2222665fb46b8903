// Package netlab is the lab's network on the host: a bridge the lab's
// containers and host processes talk over, in the benchmarking range
// 198.18.0.0/15, with no default route, no NAT and an nftables guard so no
// lab packet is routed off the bridge; and partitions, nftables rules that
// drop the traffic between two sets of lab addresses both ways.
//
// Everything it makes is named by its Config (the bridge, the nftables
// tables, the network namespaces "<bridge>-<name>"), so Clean removes a
// lab another run left half made.
package netlab

import (
	"fmt"
	"log/slog"
	"net/netip"
	"regexp"
)

// LabRange is the benchmarking range (RFC 2544) every lab address is in.
// Nothing on a real network uses it, and the guard drops any packet from
// it to an address outside it.
var LabRange = netip.MustParsePrefix("198.18.0.0/15")

// Config names the bridge and its addresses.
type Config struct {
	// Bridge is the bridge's interface name.
	Bridge string
	// Table is the name of the nftables tables (inet and bridge families)
	// holding the guard and the partitions.
	Table string
	// Host is the host's address on the bridge and the lab's subnet: the
	// only route a container has.
	Host netip.Prefix
	// Extra are more host addresses on the bridge (the Consul servers').
	Extra []netip.Addr
	// Log gets one line per change (up, partition, heal); nil discards.
	Log *slog.Logger
}

// Default is the lab's network: bridge orchlab0, host 198.18.0.1/16, the
// three Consul servers on 198.18.0.11-13, tables "orchlab".
func Default() Config {
	return Config{
		Bridge: "orchlab0",
		Table:  "orchlab",
		Host:   netip.MustParsePrefix("198.18.0.1/16"),
		Extra: []netip.Addr{
			netip.MustParseAddr("198.18.0.11"),
			netip.MustParseAddr("198.18.0.12"),
			netip.MustParseAddr("198.18.0.13"),
		},
	}
}

var (
	// An interface name: at most 15 bytes (IFNAMSIZ - 1), and nothing
	// that nft or ip would read as syntax.
	bridgeName = regexp.MustCompile(`^[a-z][a-z0-9_-]{0,14}$`)
	// An nftables identifier, also used for partition names.
	ident = regexp.MustCompile(`^[a-z][a-z0-9_]{0,31}$`)
)

// Validate names the first field that is wrong.
func (c Config) Validate() error {
	if !bridgeName.MatchString(c.Bridge) {
		return fmt.Errorf("bridge %q: want 1 to 15 of a-z, 0-9, _ and -, starting with a letter", c.Bridge)
	}
	if !ident.MatchString(c.Table) {
		return fmt.Errorf("table %q: want 1 to 32 of a-z, 0-9 and _, starting with a letter", c.Table)
	}
	h := c.Host
	if !h.IsValid() || !h.Addr().Is4() || !LabRange.Contains(h.Addr()) || h.Bits() < LabRange.Bits() || h.Bits() > 30 {
		return fmt.Errorf("host %s: want an IPv4 address in %s with a prefix length of %d to 30", h, LabRange, LabRange.Bits())
	}
	if a := h.Addr(); a == h.Masked().Addr() || a == broadcast(h) {
		return fmt.Errorf("host %s: the subnet's network or broadcast address", h)
	}
	seen := map[netip.Addr]bool{h.Addr(): true}
	for _, a := range c.Extra {
		if err := c.inSubnet(a); err != nil {
			return fmt.Errorf("extra address: %w", err)
		}
		if seen[a] {
			return fmt.Errorf("extra address %s: given twice (or the host's)", a)
		}
		seen[a] = true
	}
	return nil
}

// inSubnet checks that a is a usable address of the lab's subnet.
func (c Config) inSubnet(a netip.Addr) error {
	if !a.Is4() || !c.Host.Masked().Contains(a) {
		return fmt.Errorf("%s: not an IPv4 address in the lab's subnet %s", a, c.Host.Masked())
	}
	if a == c.Host.Masked().Addr() || a == broadcast(c.Host) {
		return fmt.Errorf("%s: the subnet's network or broadcast address", a)
	}
	return nil
}

// broadcast is the last address of p's subnet (IPv4).
func broadcast(p netip.Prefix) netip.Addr {
	b := p.Masked().Addr().As4()
	host := uint32(1)<<(32-p.Bits()) - 1
	v := uint32(b[0])<<24 | uint32(b[1])<<16 | uint32(b[2])<<8 | uint32(b[3])
	v |= host
	return netip.AddrFrom4([4]byte{byte(v >> 24), byte(v >> 16), byte(v >> 8), byte(v)})
}
