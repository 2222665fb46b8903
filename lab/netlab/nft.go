package netlab

import (
	"fmt"
	"net/netip"
	"sort"
	"strings"
)

// partition is one cut: every packet between an address of a and one of
// b, either way, is dropped.
type partition struct {
	a, b []netip.Addr
}

// ruleset renders the nftables script that replaces both tables of cfg
// with the guard and parts. nft runs a script as one transaction, so the
// guard is never missing while it is rewritten; the empty "table" lines
// make the deletes succeed when a table does not exist yet.
//
// The inet table holds the guard (nothing routed into or out of the
// bridge, nothing between the subnet and any other address, in any of the
// three hooks) and the partition rules for packets the host sends or
// receives (its own addresses, the Consul servers', are
// host processes). Packets between two containers are bridged, never
// seen by the inet hooks unless br_netfilter is loaded, so the bridge
// table drops them in its forward hook.
func ruleset(cfg Config, parts map[string]partition) string {
	var b strings.Builder
	names := make([]string, 0, len(parts))
	for n := range parts {
		names = append(names, n)
	}
	sort.Strings(names)
	// The guard is about this network's own subnet and bridge, not the
	// whole range: another lab network (the tests') is outside it too, and
	// removing one network's tables leaves the others' guards in place.
	lab := cfg.Host.Masked().String()
	br := quote(cfg.Bridge)

	for _, fam := range []string{"inet", "bridge"} {
		fmt.Fprintf(&b, "table %s %s {}\ndelete table %s %s\n", fam, cfg.Table, fam, cfg.Table)
	}
	fmt.Fprintf(&b, "table inet %s {\n", cfg.Table)
	sets(&b, names, parts)
	b.WriteString(chain("input", "input", []string{
		fmt.Sprintf(`iifname %s ip daddr != %s counter drop comment "guard: the lab reaches nothing of the host outside it"`, br, lab),
		fmt.Sprintf(`iifname %s meta nfproto ipv6 counter drop comment "guard: no IPv6 from the bridge"`, br),
		fmt.Sprintf(`iifname != { "lo", %s } ip daddr %s counter drop comment "guard: nothing from outside the lab reaches it"`, br, lab),
	}, names))
	b.WriteString(chain("output", "output", []string{
		fmt.Sprintf(`ip saddr %s ip daddr != %s counter drop comment "guard: the lab reaches nothing outside it"`, lab, lab),
		fmt.Sprintf(`oifname %s meta nfproto ipv6 counter drop comment "guard: no IPv6 onto the bridge"`, br),
	}, names))
	b.WriteString(chain("forward", "forward", []string{
		fmt.Sprintf(`iifname %s oifname != %s counter drop comment "guard: nothing is routed out of the bridge"`, br, br),
		fmt.Sprintf(`oifname %s iifname != %s counter drop comment "guard: nothing is routed into the bridge"`, br, br),
		fmt.Sprintf(`ip saddr %s ip daddr != %s counter drop comment "guard: the lab reaches nothing outside it"`, lab, lab),
		fmt.Sprintf(`ip daddr %s ip saddr != %s counter drop comment "guard: nothing from outside the lab reaches it"`, lab, lab),
	}, nil))
	b.WriteString("}\n")

	fmt.Fprintf(&b, "table bridge %s {\n", cfg.Table)
	sets(&b, names, parts)
	b.WriteString(chain("forward", "forward", nil, names))
	b.WriteString("}\n")
	return b.String()
}

// sets writes the two address sets of each partition.
func sets(b *strings.Builder, names []string, parts map[string]partition) {
	for _, n := range names {
		p := parts[n]
		for _, side := range []struct {
			name  string
			addrs []netip.Addr
		}{{"a", p.a}, {"b", p.b}} {
			el := make([]string, len(side.addrs))
			for i, a := range side.addrs {
				el[i] = a.String()
			}
			fmt.Fprintf(b, "\tset p_%s_%s {\n\t\ttype ipv4_addr\n\t\telements = { %s }\n\t}\n", n, side.name, strings.Join(el, ", "))
		}
	}
}

// chain renders a base chain on hook with the guard rules, then the two
// drop rules of each partition.
func chain(name, hook string, guard, partitions []string) string {
	var b strings.Builder
	// A drop in any base chain is final, whatever another table's chain
	// on the same hook accepts; the priority only orders the chains.
	fmt.Fprintf(&b, "\tchain %s {\n\t\ttype filter hook %s priority filter - 10; policy accept;\n", name, hook)
	for _, r := range guard {
		fmt.Fprintf(&b, "\t\t%s\n", r)
	}
	for _, n := range partitions {
		fmt.Fprintf(&b, "\t\tip saddr @p_%s_a ip daddr @p_%s_b counter drop comment %s\n", n, n, quote("partition "+n))
		fmt.Fprintf(&b, "\t\tip saddr @p_%s_b ip daddr @p_%s_a counter drop comment %s\n", n, n, quote("partition "+n))
	}
	b.WriteString("\t}\n")
	return b.String()
}

// quote is an nft string; callers pass only validated names.
func quote(s string) string { return `"` + s + `"` }
