// Package logship ships a node's failure logs to OpenStack Swift through a
// write-only grant, and lets an operator read them back.
//
// A node holds no OpenStack credentials. Its grant is a Swift prefix temp
// URL (Swift's tempurl middleware, temp_url_prefix) signed for PUT over its
// own prefix "<host>/" of the cloud's log container, with an expiry: it can
// create and overwrite objects under that prefix and nothing else, and it
// can read nothing, not even its own logs. Objects are named
// "<host>/<version>/<step>/<time>.log" (ObjectName), so the object's URL is
// known before the upload and can be the status record's log_url. A log
// larger than the cap keeps its head and its tail with a marker between
// (ReadCapped). Logs wait in a local spool until Swift took them (Spool,
// Flush), so a Swift that is down never hides or delays a failure.
//
// The signatures are secrets: no error, log line or String of this package
// contains one.
package logship

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"net/url"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/jiocloud/orchestrate/internal/fileutil"
	"github.com/jiocloud/orchestrate/internal/jsonvalue"
	"github.com/jiocloud/orchestrate/internal/store/schema"
)

// Grant is a write-only upload grant: a prefix temp URL for PUT.
type Grant struct {
	// ContainerURL is the log container's URL, scheme, host, and the path
	// /v1/<account>/<container>, e.g.
	// https://swift.example.net/v1/AUTH_ops/logs-cloud1.
	ContainerURL string `json:"container_url"`
	// Prefix is the object name prefix the grant covers: "<host>/".
	Prefix string `json:"prefix"`
	// Expires is when Swift stops honouring the grant.
	Expires time.Time `json:"expires"`
	// Signature is the hex HMAC-SHA256 of "PUT\n<expires>\nprefix:<path>/<prefix>"
	// with the container's or account's temp URL key. A secret.
	Signature string `json:"signature"`
}

// String describes the grant without its signature, so that a grant
// logged or printed by mistake leaks nothing.
func (g Grant) String() string {
	return fmt.Sprintf("grant for %s/%s until %s", g.ContainerURL, g.Prefix, g.Expires.UTC().Format(time.RFC3339))
}

// GoString is String: %#v prints no signature either.
func (g Grant) GoString() string { return g.String() }

// maxGrantFile bounds a grant file: a grant is about 300 bytes.
const maxGrantFile = 64 << 10

// ErrNoGrant says the node has no grant (no file): logs stay local.
var ErrNoGrant = errors.New("no log upload grant")

// LoadGrant reads and checks a grant file. A missing file is ErrNoGrant.
func LoadGrant(path string) (Grant, error) {
	data, err := fileutil.ReadLimited(path, maxGrantFile)
	if errors.Is(err, os.ErrNotExist) {
		return Grant{}, fmt.Errorf("%s: %w", path, ErrNoGrant)
	}
	if err != nil {
		return Grant{}, fmt.Errorf("log grant %s: %w", path, err)
	}
	g, err := ParseGrant(data)
	if err != nil {
		return Grant{}, fmt.Errorf("log grant %s: %w", path, err)
	}
	return g, nil
}

// ParseGrant decodes and checks a grant's JSON. Its errors never quote the
// signature.
func ParseGrant(data []byte) (Grant, error) {
	var g Grant
	dec := json.NewDecoder(strings.NewReader(string(data)))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&g); err != nil {
		// A JSON error quotes at most a field name, never a value.
		return Grant{}, errors.New(jsonvalue.ProblemOr(err, "not a grant: want {container_url, prefix, expires, signature}"))
	}
	return g, g.Validate()
}

// Validate names the first bad field.
func (g Grant) Validate() error {
	if _, err := ContainerPath(g.ContainerURL); err != nil {
		return fmt.Errorf("container_url: %w", err)
	}
	host, ok := strings.CutSuffix(g.Prefix, "/")
	if !ok {
		return fmt.Errorf("prefix %q must be a host name and a slash", g.Prefix)
	}
	if err := schema.ValidName("prefix's host", host); err != nil {
		return fmt.Errorf("prefix: %w", err)
	}
	if g.Expires.IsZero() {
		return errors.New("expires is missing")
	}
	if !validSig(g.Signature) {
		return errors.New("signature is not a hex HMAC-SHA256 (64 hex digits)")
	}
	return nil
}

// Host is the host the grant is for.
func (g Grant) Host() string { return strings.TrimSuffix(g.Prefix, "/") }

// Covers says whether object lies under the grant's prefix.
func (g Grant) Covers(object string) bool { return strings.HasPrefix(object, g.Prefix) }

func validSig(s string) bool {
	if len(s) != 2*sha256.Size {
		return false
	}
	_, err := hex.DecodeString(s)
	return err == nil
}

// ContainerPath checks a container URL (http or https, path
// /v1/<account>/<container>, nothing else) and returns its path.
func ContainerPath(raw string) (string, error) {
	u, err := url.Parse(raw)
	if err != nil {
		return "", fmt.Errorf("%q is not a URL", raw)
	}
	switch {
	case u.Scheme != "http" && u.Scheme != "https":
		return "", fmt.Errorf("%q: want an http or https URL", raw)
	case u.Host == "":
		return "", fmt.Errorf("%q has no host", raw)
	case u.User != nil:
		return "", errors.New("a container URL must not carry credentials")
	case u.RawQuery != "" || u.Fragment != "":
		return "", fmt.Errorf("%q: want no query or fragment", raw)
	}
	p := strings.TrimSuffix(u.EscapedPath(), "/")
	parts := strings.Split(p, "/")
	if len(parts) != 4 || parts[0] != "" || parts[1] != "v1" || parts[2] == "" || parts[3] == "" {
		return "", fmt.Errorf("%q: want the path /v1/<account>/<container>", raw)
	}
	return p, nil
}

// containerBase is the URL without a trailing slash.
func containerBase(raw string) string { return strings.TrimSuffix(raw, "/") }

// hmacHex is Swift's tempurl signature: hex HMAC-SHA256 of body.
func hmacHex(key []byte, body string) string {
	m := hmac.New(sha256.New, key)
	m.Write([]byte(body))
	return hex.EncodeToString(m.Sum(nil))
}

// SignGrant makes host's grant: PUT under "<host>/" of the container, until
// expires. key is the container's (or account's) temp URL key.
func SignGrant(key []byte, containerURL, host string, expires time.Time) (Grant, error) {
	if len(key) == 0 {
		return Grant{}, errors.New("the temp URL key is empty")
	}
	p, err := ContainerPath(containerURL)
	if err != nil {
		return Grant{}, fmt.Errorf("container URL: %w", err)
	}
	if err := schema.ValidName("host", host); err != nil {
		return Grant{}, err
	}
	prefix := host + "/"
	// Swift compares the signed prefix with the request's path as the
	// client sent it: the prefix is signed escaped, as ObjectURL escapes.
	body := "PUT\n" + strconv.FormatInt(expires.Unix(), 10) + "\nprefix:" + p + "/" + url.PathEscape(host) + "/"
	g := Grant{ContainerURL: containerBase(containerURL), Prefix: prefix, Expires: expires.UTC().Truncate(time.Second), Signature: hmacHex(key, body)}
	return g, nil
}

// SignGet returns a temp URL that reads one object until expires: the
// operator's read (orchestrate logs), signed with the same key.
func SignGet(key []byte, containerURL, object string, expires time.Time) (string, error) {
	if len(key) == 0 {
		return "", errors.New("the temp URL key is empty")
	}
	p, err := ContainerPath(containerURL)
	if err != nil {
		return "", fmt.Errorf("container URL: %w", err)
	}
	exp := strconv.FormatInt(expires.Unix(), 10)
	esc := escapeObject(object)
	sig := hmacHex(key, "GET\n"+exp+"\n"+p+"/"+esc)
	return containerBase(containerURL) + "/" + esc + "?temp_url_sig=" + sig + "&temp_url_expires=" + exp, nil
}

// putURL is the URL a node PUTs object to under its grant. A secret.
func (g Grant) putURL(object string) string {
	q := url.Values{}
	q.Set("temp_url_sig", g.Signature)
	q.Set("temp_url_expires", strconv.FormatInt(g.Expires.Unix(), 10))
	q.Set("temp_url_prefix", g.Prefix)
	return ObjectURL(g.ContainerURL, object) + "?" + q.Encode()
}

// WriteGrant writes g to path atomically, mode 0600 (the signature is a
// secret of the host).
func WriteGrant(path string, g Grant) error {
	if err := g.Validate(); err != nil {
		return err
	}
	data, err := json.MarshalIndent(g, "", "  ")
	if err != nil {
		return err
	}
	return fileutil.WriteAtomic(path, append(data, '\n'), 0o600)
}
