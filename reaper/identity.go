package reaper

import (
	"crypto/ecdsa"
)

// NodeIdentity is how the reaper gives each server it builds (standbys
// too) a Consul token of its own, through a JWT auth method that trusts
// the reaper's key (docs/acl.md): it logs in for the
// server's name before creating it, keeps it sealed under
// <prefix>/reaper/token/<host>, puts it in a part of the server's user
// data, and logs it out before deleting the server. The
// reaper's own token needs no ACL rights for it.
type NodeIdentity struct {
	// KeyFile is the reaper's private key (PEM, ECDSA P-256), whose public
	// half the auth method trusts. Readable by the reaper only.
	KeyFile string `yaml:"key_file"`
	// AuthMethod is the Consul auth method (default orchestrate-node).
	AuthMethod string `yaml:"auth_method"`
	// Audience is the auth method's bound audience (default
	// orchestrate-node).
	Audience string `yaml:"audience"`
	// SigningKey is the private key daemon.CheckConfig loaded from
	// KeyFile (nil before).
	SigningKey *ecdsa.PrivateKey `yaml:"-"`
}

// Key is the private key daemon.CheckConfig loaded (nil before).
func (ni *NodeIdentity) Key() *ecdsa.PrivateKey { return ni.SigningKey }
