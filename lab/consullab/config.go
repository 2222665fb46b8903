package consullab

import (
	"encoding/json"
	"net/netip"
	"path/filepath"
	"strconv"
)

// Datacenter is the lab's Consul datacenter (the shipped user data's).
const Datacenter = "dc1"

// ServerAddrs are the lab's three Consul servers, host processes on
// netlab's extra bridge addresses.
var ServerAddrs = []netip.Addr{
	netip.MustParseAddr("198.18.0.11"),
	netip.MustParseAddr("198.18.0.12"),
	netip.MustParseAddr("198.18.0.13"),
}

// Consul's standard ports, on each server's own address.
const (
	// HTTPPort is the HTTP API (plain: TLS is for RPC).
	HTTPPort = 8500
	// ServerPort is server RPC, TLS only (verify_incoming).
	ServerPort = 8300
	// SerfLANPort is LAN gossip, encrypted with the gossip key.
	SerfLANPort = 8301
	// DNSPort is Consul DNS.
	DNSPort = 8600
)

// serverName is server i's node name (1-based in the name, as operators
// count).
func serverName(i int) string { return "consul-server-" + strconv.Itoa(i+1) }

// serverConfig is server i's agent configuration: a server of a cluster of
// len(addrs), on addrs[i] with Consul's standard ports and default limits,
// ACLs on with default deny and the initial management token, gossip
// encrypted with key, RPC over TLS (incoming verified, server names
// checked), and auto_encrypt handing client agents their certificates.
// It holds secrets: written 0600.
func (c *Cluster) serverConfig(i int) ([]byte, error) {
	addr := c.Addrs[i].String()
	join := make([]string, len(c.Addrs))
	for j, a := range c.Addrs {
		join[j] = a.String()
	}
	dir := c.serverDir(i)
	cfg := map[string]any{
		"node_name":            serverName(i),
		"datacenter":           Datacenter,
		"server":               true,
		"bootstrap_expect":     len(c.Addrs),
		"data_dir":             filepath.Join(dir, "data"),
		"bind_addr":            addr,
		"client_addr":          addr,
		"advertise_addr":       addr,
		"retry_join":           join,
		"disable_update_check": true,
		"log_level":            "info",
		"encrypt":              c.GossipKey,
		"acl": map[string]any{
			"enabled":        true,
			"default_policy": "deny",
			// Tokens set through the API (the servers' agent and DNS
			// tokens, by Bootstrap) survive a restart.
			"enable_token_persistence": true,
			"tokens":                   map[string]string{"initial_management": c.ManagementToken},
		},
		"tls": map[string]any{
			"defaults": map[string]any{
				"ca_file":         c.CAFile,
				"cert_file":       filepath.Join(dir, "server.pem"),
				"key_file":        filepath.Join(dir, "server-key.pem"),
				"verify_outgoing": true,
			},
			"internal_rpc": map[string]any{
				"verify_incoming":        true,
				"verify_server_hostname": true,
			},
		},
		"auto_encrypt": map[string]any{"allow_tls": true},
	}
	return json.MarshalIndent(cfg, "", "  ")
}
