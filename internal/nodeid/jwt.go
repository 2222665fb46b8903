// Package nodeid gives each server the reaper builds a Consul token of its
// own without the reaper holding the power to create tokens.
//
// The operator sets up a Consul JWT auth method whose only trusted key is
// the reaper's public key, with binding rules that turn a login for host H
// into a token with H's node identity, the shared read-only role and H's
// own policy (orchestrate-host-H, which the operator created in advance for
// each name the reaper may build). The reaper signs a short-lived JWT for
// the server it is about to create, logs in with it (a login needs no
// token), and hands the token to the server in its user data. When the
// server is deleted, the reaper logs the token out with its secret, which
// it keeps sealed (AES-GCM under a key derived from its private key) in the
// server's Nova metadata.
//
// What the reaper's key can do: mint identities for the names the operator
// pre-authorised, and nothing else. It cannot create tokens or policies.
package nodeid

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/sha256"
	"crypto/x509"
	"encoding/base64"
	"encoding/json"
	"encoding/pem"
	"errors"
	"fmt"
	"os"
	"time"
)

// Claims are what the reaper asserts about the server it builds.
type Claims struct {
	Issuer   string   `json:"iss"`
	Subject  string   `json:"sub"`
	Audience []string `json:"aud"`
	IssuedAt int64    `json:"iat"`
	NotAfter int64    `json:"exp"`
	ID       string   `json:"jti"`
	// Host and Role are mapped by the auth method's ClaimMappings to the
	// binding rules' ${value.host} and ${value.role}.
	Host string `json:"orchestrate_host"`
	Role string `json:"orchestrate_role"`
}

// Claim names the auth method maps, and the variables they become.
const (
	ClaimHost = "orchestrate_host"
	ClaimRole = "orchestrate_role"
	VarHost   = "host"
	VarRole   = "role"
)

// sign returns the compact JWS (ES256) of c.
func sign(key *ecdsa.PrivateKey, c Claims) (string, error) {
	header := base64.RawURLEncoding.EncodeToString([]byte(`{"alg":"ES256","typ":"JWT"}`))
	body, err := json.Marshal(c)
	if err != nil {
		return "", err
	}
	input := header + "." + base64.RawURLEncoding.EncodeToString(body)
	digest := sha256.Sum256([]byte(input))
	r, s, err := ecdsa.Sign(rand.Reader, key, digest[:])
	if err != nil {
		return "", fmt.Errorf("sign: %w", err)
	}
	sig := make([]byte, 64)
	r.FillBytes(sig[:32])
	s.FillBytes(sig[32:])
	return input + "." + base64.RawURLEncoding.EncodeToString(sig), nil
}

// newClaims are the claims of one login for host in role, valid for ttl
// from now.
func newClaims(issuer, audience, host, role string, now time.Time, ttl time.Duration) (Claims, error) {
	id := make([]byte, 16)
	if _, err := rand.Read(id); err != nil {
		return Claims{}, err
	}
	return Claims{Issuer: issuer, Subject: host, Audience: []string{audience}, IssuedAt: now.Unix(),
		NotAfter: now.Add(ttl).Unix(), ID: base64.RawURLEncoding.EncodeToString(id), Host: host, Role: role}, nil
}

// LoadKey reads the reaper's private key: a PEM "EC PRIVATE KEY" (as
// `openssl ecparam -name prime256v1 -genkey -noout` writes) or a PKCS #8
// "PRIVATE KEY", on the P-256 curve. The error names the file, never the
// key.
func LoadKey(path string) (*ecdsa.PrivateKey, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	return ParseKey(data, path)
}

// ParseKey parses a PEM private key; name says where it came from.
func ParseKey(data []byte, name string) (*ecdsa.PrivateKey, error) {
	var block *pem.Block
	for rest := data; ; {
		block, rest = pem.Decode(rest)
		if block == nil {
			return nil, fmt.Errorf("%s: no PEM private key (EC PRIVATE KEY or PRIVATE KEY)", name)
		}
		if block.Type == "EC PRIVATE KEY" || block.Type == "PRIVATE KEY" {
			break
		}
	}
	var key any
	var err error
	if block.Type == "EC PRIVATE KEY" {
		key, err = x509.ParseECPrivateKey(block.Bytes)
	} else {
		key, err = x509.ParsePKCS8PrivateKey(block.Bytes)
	}
	if err != nil {
		return nil, fmt.Errorf("%s: not a private key: %w", name, errors.Unwrap(err))
	}
	ec, ok := key.(*ecdsa.PrivateKey)
	if !ok || ec.Curve != elliptic.P256() {
		return nil, fmt.Errorf("%s: not an ECDSA P-256 key (ES256 signs with P-256 only)", name)
	}
	return ec, nil
}

// PublicPEM is the PEM of key's public half, for the auth method's
// JWTValidationPubKeys.
func PublicPEM(key *ecdsa.PrivateKey) (string, error) {
	der, err := x509.MarshalPKIXPublicKey(&key.PublicKey)
	if err != nil {
		return "", err
	}
	return string(pem.EncodeToMemory(&pem.Block{Type: "PUBLIC KEY", Bytes: der})), nil
}

// NewKey makes a P-256 key and its PEM ("EC PRIVATE KEY"), for tests and
// `reaper identity keygen`.
func NewKey() (*ecdsa.PrivateKey, []byte, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, nil, err
	}
	der, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		return nil, nil, err
	}
	return key, pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: der}), nil
}
