package nodeid

import (
	"context"
	"crypto/aes"
	"crypto/cipher"
	"crypto/ecdsa"
	"crypto/hkdf"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"errors"
	"fmt"
	"regexp"
	"strings"
	"time"

	"github.com/hashicorp/consul/api"
)

// Defaults of the auth method the operator creates (docs/acl.md), and of the shared role every node token carries.
const (
	DefaultAuthMethod = "orchestrate-node"
	DefaultAudience   = "orchestrate-node"
	DefaultRole       = "orchestrate-node"
	Issuer            = "orchestrate-reaper"
	// HostPolicyPrefix + host names the host's own policy.
	HostPolicyPrefix = "orchestrate-host-"
	// loginTTL is how long a minted JWT stays valid: the reaper logs in
	// with it at once, so a minute covers a slow round trip, and a JWT
	// that leaked from a log is useless soon after.
	loginTTL = 2 * time.Minute
)

// validHost is Consul's rule for a node identity's name: a host the reaper
// mints for must be one, and nothing else can reach the policy name or the
// binding rule built from it.
var validHost = regexp.MustCompile(`^[a-z0-9]([a-z0-9\-_]*[a-z0-9])?$`)

// ValidHost says why host cannot have a node identity, or nil.
func ValidHost(host string) error {
	if len(host) > 128 || !validHost.MatchString(host) {
		return fmt.Errorf("host %q cannot have a Consul node identity: lower-case letters, digits, '-' and '_' only, starting and ending with a letter or digit, at most 128 bytes", host)
	}
	return nil
}

// HostPolicyName is the name of host's own policy.
func HostPolicyName(host string) string { return HostPolicyPrefix + host }

// Identity is a minted token of one host.
type Identity struct {
	Host     string
	Accessor string
	// Secret goes to the server (its user data) and nowhere else: never
	// logged, never in an error.
	Secret string
	// Sealed is Secret encrypted for the reaper's own key, kept in the
	// server's metadata so any leader can log the token out.
	Sealed string
}

// Minter logs in for the servers the reaper builds.
type Minter struct {
	key        *ecdsa.PrivateKey
	sealKey    []byte
	client     *api.Client
	authMethod string
	audience   string
	now        func() time.Time
}

// NewMinter returns a minter that signs with key and logs in through
// client's agent to authMethod (audience: the auth method's
// BoundAudiences).
func NewMinter(client *api.Client, key *ecdsa.PrivateKey, authMethod, audience string) (*Minter, error) {
	raw, err := key.Bytes()
	if err != nil {
		return nil, err
	}
	sk, err := hkdf.Key(sha256.New, raw, nil, "orchestrate node token seal v1", 32)
	if err != nil {
		return nil, err
	}
	return &Minter{key: key, sealKey: sk, client: client, authMethod: authMethod, audience: audience, now: time.Now}, nil
}

// ErrNoHostPolicy: the login worked but the token lacks the host's own
// policy (the operator did not create orchestrate-host-<host>): a server
// built with it could not write its records.
var ErrNoHostPolicy = errors.New("no host policy")

// Mint logs in for host (a server of role about to be built) and returns
// its token. A token without the host's node identity or policy is logged
// out again and refused: the error says which policy to create.
func (m *Minter) Mint(ctx context.Context, host, role string) (*Identity, error) {
	if err := ValidHost(host); err != nil {
		return nil, err
	}
	c, err := newClaims(Issuer, m.audience, host, role, m.now(), loginTTL)
	if err != nil {
		return nil, err
	}
	jwt, err := sign(m.key, c)
	if err != nil {
		return nil, err
	}
	tok, _, err := m.client.ACL().Login(&api.ACLLoginParams{AuthMethod: m.authMethod, BearerToken: jwt,
		Meta: map[string]string{"orchestrate-host": host, "orchestrate-role": role}}, (&api.WriteOptions{}).WithContext(ctx))
	if err != nil {
		return nil, fmt.Errorf("log in to auth method %s for %s: %w", m.authMethod, host, redact(err, jwt))
	}
	if missing := missingGrants(tok, host); missing != "" {
		if _, lerr := m.client.ACL().Logout((&api.WriteOptions{Token: tok.SecretID}).WithContext(ctx)); lerr != nil {
			missing += fmt.Sprintf(" (and logging the token %s out failed: %v)", tok.AccessorID, redact(lerr, tok.SecretID))
		}
		return nil, fmt.Errorf("the token auth method %s gives %s %s: %w", m.authMethod, host, missing, ErrNoHostPolicy)
	}
	sealed, err := m.seal(tok.SecretID)
	if err != nil {
		return nil, err
	}
	return &Identity{Host: host, Accessor: tok.AccessorID, Secret: tok.SecretID, Sealed: sealed}, nil
}

// missingGrants says what a host's token lacks, or "".
func missingGrants(tok *api.ACLToken, host string) string {
	var lacks []string
	hasNode := false
	for _, n := range tok.NodeIdentities {
		hasNode = hasNode || n.NodeName == host
	}
	if !hasNode {
		lacks = append(lacks, "no node identity "+host+" (binding rule: -bind-type node -bind-name '${value.host}')")
	}
	hasPolicy := false
	for _, p := range tok.Policies {
		hasPolicy = hasPolicy || p.Name == HostPolicyName(host)
	}
	if !hasPolicy {
		lacks = append(lacks, "no policy "+HostPolicyName(host)+" (create it: `reaper identity --apply` with a management token)")
	}
	return strings.Join(lacks, " and ")
}

// Revoke logs out the token sealed in sealed (from Identity.Sealed). A
// token that is gone already is no error.
func (m *Minter) Revoke(ctx context.Context, sealed string) error {
	secret, err := m.unseal(sealed)
	if err != nil {
		return err
	}
	_, err = m.client.ACL().Logout((&api.WriteOptions{Token: secret}).WithContext(ctx))
	var se api.StatusError
	if errors.As(err, &se) && (se.Code == 403 || se.Code == 404) && strings.Contains(strings.ToLower(se.Body), "not found") {
		return nil
	}
	if err != nil {
		return fmt.Errorf("log out a node token: %w", redact(err, secret))
	}
	return nil
}

// seal encrypts secret with AES-GCM under the minter's seal key.
func (m *Minter) seal(secret string) (string, error) {
	gcm, err := m.gcm()
	if err != nil {
		return "", err
	}
	nonce := make([]byte, gcm.NonceSize())
	if _, err := rand.Read(nonce); err != nil {
		return "", err
	}
	return base64.RawURLEncoding.EncodeToString(gcm.Seal(nonce, nonce, []byte(secret), []byte("orchestrate"))), nil
}

// ErrSealedOtherKey: a sealed token does not open with this key (sealed
// by another key, or changed).
var ErrSealedOtherKey = errors.New("a sealed node token does not open with this reaper's key (sealed by another key, or changed)")

// unseal reverses seal; a value sealed under another key, or changed, is
// ErrSealedOtherKey.
func (m *Minter) unseal(sealed string) (string, error) {
	raw, err := base64.RawURLEncoding.DecodeString(sealed)
	gcm, gerr := m.gcm()
	if gerr != nil {
		return "", gerr
	}
	if err != nil || len(raw) < gcm.NonceSize() {
		return "", ErrSealedOtherKey
	}
	plain, err := gcm.Open(nil, raw[:gcm.NonceSize()], raw[gcm.NonceSize():], []byte("orchestrate"))
	if err != nil {
		return "", ErrSealedOtherKey
	}
	return string(plain), nil
}

func (m *Minter) gcm() (cipher.AEAD, error) {
	block, err := aes.NewCipher(m.sealKey)
	if err != nil {
		return nil, err
	}
	return cipher.NewGCM(block)
}

// redact removes secret from err's text (Consul echoes little, but a
// proxy's error page might): a token never reaches a log.
func redact(err error, secret string) error {
	if err == nil || secret == "" || !strings.Contains(err.Error(), secret) {
		return err
	}
	return errors.New(strings.ReplaceAll(err.Error(), secret, "[redacted]"))
}
