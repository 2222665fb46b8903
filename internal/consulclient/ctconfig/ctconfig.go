// Package ctconfig translates the Consul client configuration that
// consulclient builds (address, token, TLS, from flags and the CONSUL_*
// environment) into consul-template's, so a binary that embeds
// consul-template connects exactly as its API client does.
//
// It is a package of its own so that binaries which do not embed
// consul-template, the orchestrate binary every node runs among them, do
// not link it through consulclient.
package ctconfig

import (
	"strings"

	"github.com/hashicorp/consul-template/config"
	"github.com/hashicorp/consul/api"
)

// Consul returns consul-template's Consul configuration for the connection
// ac describes: its address, token or token file, and TLS settings when the
// scheme or the address says https. Retries are left at consul-template's
// defaults for the caller to set; the result is not finalized.
func Consul(ac *api.Config) *config.ConsulConfig {
	cc := config.DefaultConsulConfig()
	cc.Address = config.String(ac.Address)
	cc.Token = config.String(ac.Token)
	cc.TokenFile = config.String(ac.TokenFile)
	if ac.Scheme == "https" && !strings.Contains(ac.Address, "://") {
		cc.Address = config.String("https://" + ac.Address)
	}
	if ac.Scheme == "https" || strings.HasPrefix(ac.Address, "https://") {
		cc.SSL.Enabled = config.Bool(true)
		cc.SSL.Verify = config.Bool(!ac.TLSConfig.InsecureSkipVerify)
		cc.SSL.CaCert = config.String(ac.TLSConfig.CAFile)
		cc.SSL.CaPath = config.String(ac.TLSConfig.CAPath)
		cc.SSL.Cert = config.String(ac.TLSConfig.CertFile)
		cc.SSL.Key = config.String(ac.TLSConfig.KeyFile)
		cc.SSL.ServerName = config.String(ac.TLSConfig.Address)
	}
	return cc
}
