package netlab

import (
	"flag"
	"net/netip"
	"os"
	"strings"
	"testing"
)

var update = flag.Bool("update", false, "rewrite testdata/ruleset.nft")

func TestConfigValidate(t *testing.T) {
	if err := Default().Validate(); err != nil {
		t.Fatalf("the default: %v", err)
	}
	addrs := func(s ...string) []netip.Addr {
		var out []netip.Addr
		for _, a := range s {
			out = append(out, netip.MustParseAddr(a))
		}
		return out
	}
	for _, tc := range []struct {
		name string
		edit func(*Config)
		want string
	}{
		{"empty bridge", func(c *Config) { c.Bridge = "" }, `bridge ""`},
		{"bridge too long", func(c *Config) { c.Bridge = "orchlab0123456789" }, "bridge"},
		{"bridge with a quote", func(c *Config) { c.Bridge = `br"; flush ruleset; "` }, "bridge"},
		{"bridge with a space", func(c *Config) { c.Bridge = "br 0" }, "bridge"},
		{"table with a brace", func(c *Config) { c.Table = "t}" }, "table"},
		{"host outside the range", func(c *Config) { c.Host = netip.MustParsePrefix("10.0.0.1/16") }, "host 10.0.0.1/16"},
		{"host IPv6", func(c *Config) { c.Host = netip.MustParsePrefix("2001:db8::1/64") }, "host"},
		{"subnet wider than the range", func(c *Config) { c.Host = netip.MustParsePrefix("198.18.0.1/8") }, "prefix length"},
		{"subnet of one address", func(c *Config) { c.Host = netip.MustParsePrefix("198.18.0.1/32") }, "prefix length"},
		{"host is the network address", func(c *Config) { c.Host = netip.MustParsePrefix("198.18.0.0/16") }, "network or broadcast"},
		{"host is the broadcast address", func(c *Config) { c.Host = netip.MustParsePrefix("198.18.255.255/16") }, "network or broadcast"},
		{"zero host", func(c *Config) { c.Host = netip.Prefix{} }, "host"},
		{"extra outside the subnet", func(c *Config) { c.Extra = addrs("198.19.0.11") }, "not an IPv4 address in the lab's subnet"},
		{"extra twice", func(c *Config) { c.Extra = addrs("198.18.0.11", "198.18.0.11") }, "given twice"},
		{"extra is the host", func(c *Config) { c.Extra = addrs("198.18.0.1") }, "given twice"},
		{"extra is the broadcast", func(c *Config) { c.Extra = addrs("198.18.255.255") }, "network or broadcast"},
		{"extra zero", func(c *Config) { c.Extra = []netip.Addr{{}} }, "not an IPv4 address"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := Default()
			tc.edit(&c)
			err := c.Validate()
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("Validate = %v, want an error containing %q", err, tc.want)
			}
		})
	}
}

func TestBroadcast(t *testing.T) {
	for p, want := range map[string]string{
		"198.18.0.1/16":  "198.18.255.255",
		"198.19.2.1/24":  "198.19.2.255",
		"198.18.0.5/30":  "198.18.0.7",
		"198.18.7.9/15":  "198.19.255.255",
		"198.19.1.17/28": "198.19.1.31",
	} {
		if got := broadcast(netip.MustParsePrefix(p)); got.String() != want {
			t.Errorf("broadcast(%s) = %s, want %s", p, got, want)
		}
	}
}

// TestRuleset pins the nftables script: the guard in the inet table's
// three hooks and each partition's two rules in the inet table's input
// and output and the bridge table's forward hook.
func TestRuleset(t *testing.T) {
	parts := map[string]partition{
		"servers": {a: []netip.Addr{netip.MustParseAddr("198.18.1.1"), netip.MustParseAddr("198.18.1.2")},
			b: []netip.Addr{netip.MustParseAddr("198.18.0.11")}},
		"apart": {a: []netip.Addr{netip.MustParseAddr("198.18.1.3")}, b: []netip.Addr{netip.MustParseAddr("198.18.1.4")}},
	}
	got := ruleset(Default(), parts)
	if *update {
		if err := os.WriteFile("testdata/ruleset.nft", []byte(got), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want, err := os.ReadFile("testdata/ruleset.nft")
	if err != nil {
		t.Fatal(err)
	}
	if got != string(want) {
		t.Fatalf("ruleset differs from testdata/ruleset.nft (go test -run TestRuleset -update to rewrite):\n%s", got)
	}
	if empty := ruleset(Default(), nil); strings.Contains(empty, "partition") || !strings.Contains(empty, "guard") {
		t.Fatalf("no partition: want the guard only:\n%s", empty)
	}
}
