package daemon

import (
	"context"
	"crypto/hmac"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"strings"
	"time"

	"github.com/jiocloud/orchestrate/internal/fileutil"
	"github.com/jiocloud/orchestrate/internal/logship"
	"github.com/jiocloud/orchestrate/reaper"
)

// grantPartSize is the room a log grant takes in the reaper's part of the
// user data (the grant's JSON is about 300 bytes; its YAML entry 100).
const grantPartSize = 512

// maxRenewalsPerCycle bounds the grants one cycle signs and writes: a
// fleet whose grants all fall due at once (a new key) is renewed over a
// few cycles, not in one burst of KV writes.
const maxRenewalsPerCycle = 200

// validateLogs checks logs: it needs node_identity (the grant rides in
// its part and is renewed under its host policy), a container URL, and a
// key file only the reaper reads, holding a key.
func validateLogs(c *reaper.Config) error {
	l := c.Logs
	if l == nil {
		return nil
	}
	if c.NodeIdentity == nil {
		return errors.New("logs: needs node_identity (the grant rides in the node token's part of the user data, and only the host's own token reads its renewal)")
	}
	if _, err := logship.ContainerPath(l.ContainerURL); err != nil {
		return fmt.Errorf("logs.container_url: %w", err)
	}
	if l.GrantLifetime == 0 {
		l.GrantLifetime = reaper.Duration(reaper.DefaultGrantLifetime)
	}
	if l.RenewBefore == 0 {
		l.RenewBefore = reaper.Duration(reaper.DefaultRenewBefore)
	}
	switch {
	case l.GrantLifetime.D() < time.Minute || l.GrantLifetime.D() > 90*24*time.Hour:
		return fmt.Errorf("logs.grant_lifetime %s must be between 1m and 90 days", l.GrantLifetime.D())
	case l.RenewBefore.D() <= 0 || l.RenewBefore.D() >= l.GrantLifetime.D():
		return fmt.Errorf("logs.renew_before %s must be positive and shorter than grant_lifetime %s", l.RenewBefore.D(), l.GrantLifetime.D())
	case l.TempURLKeyFile == "":
		return errors.New("logs.temp_url_key_file: the container's temp URL key is required")
	}
	if fi, err := os.Stat(l.TempURLKeyFile); err == nil && fi.Mode().Perm()&0o007 != 0 {
		return fmt.Errorf("logs.temp_url_key_file %s is readable by every user (mode %v): whoever reads it can read and write every log; chmod 0640 (root:orchestrate) or 0600", l.TempURLKeyFile, fi.Mode().Perm())
	}
	data, err := fileutil.ReadLimited(l.TempURLKeyFile, 4<<10)
	if err != nil {
		return fmt.Errorf("logs.temp_url_key_file: %w", err)
	}
	l.Key = []byte(strings.TrimSpace(string(data)))
	if len(l.Key) == 0 {
		return fmt.Errorf("logs.temp_url_key_file %s is empty", l.TempURLKeyFile)
	}
	return nil
}

// signGrant is host's grant from now, as one line of JSON; nil without
// logs.
func (r *Reaper) signGrant(host string, now time.Time) (logship.Grant, []byte, error) {
	l := r.cfg.Logs
	if l == nil {
		return logship.Grant{}, nil, nil
	}
	g, err := logship.SignGrant(l.Key, l.ContainerURL, host, now.Add(l.GrantLifetime.D()))
	if err != nil {
		return logship.Grant{}, nil, fmt.Errorf("log grant for %s: %w", host, err)
	}
	data, err := json.Marshal(g)
	if err != nil {
		return logship.Grant{}, nil, err
	}
	return g, data, nil
}

// grantCurrent says whether a stored grant may stay: for host, in the
// configured container, signed with the current key (a new key or
// container re-signs every grant), and not due for renewal.
func (r *Reaper) grantCurrent(host string, raw []byte, now time.Time) bool {
	g, err := logship.ParseGrant(raw)
	if err != nil || g.Host() != host || g.ContainerURL != strings.TrimSuffix(r.cfg.Logs.ContainerURL, "/") {
		return false
	}
	want, err := logship.SignGrant(r.cfg.Logs.Key, r.cfg.Logs.ContainerURL, host, g.Expires)
	if err != nil || !hmac.Equal([]byte(want.Signature), []byte(g.Signature)) {
		return false
	}
	return g.Expires.Sub(now) > r.cfg.Logs.RenewBefore.D()
}

// renewGrants keeps a current grant in <prefix>/loggrants/<host> for every
// server with a node token (the servers the reaper built with
// node_identity), and removes those of servers that have none any more
// (gone: their token was logged out). It returns what failed.
func (r *Reaper) renewGrants(ctx context.Context, obs *observation, now time.Time) []string {
	if r.cfg.Logs == nil {
		return nil
	}
	stored, err := r.store.LogGrants(ctx)
	if err != nil {
		return []string{"log grants: " + err.Error()}
	}
	var errs []string
	renewed := 0
	for host := range obs.keys.Tokens {
		if ctx.Err() != nil || renewed >= maxRenewalsPerCycle {
			break
		}
		if raw, ok := stored[host]; ok && r.grantCurrent(host, raw, now) {
			continue
		}
		g, data, err := r.signGrant(host, now)
		if err == nil {
			err = r.store.PutLogGrant(ctx, host, data)
		}
		if err != nil {
			errs = append(errs, "log grant of "+host+": "+err.Error())
			continue
		}
		renewed++
		r.log.Info("log grant renewed", "server", host, "until", g.Expires)
	}
	for host := range stored {
		if _, live := obs.keys.Tokens[host]; live || ctx.Err() != nil {
			continue
		}
		if err := r.store.DeleteLogGrant(ctx, host); err != nil {
			errs = append(errs, "log grant of "+host+": "+err.Error())
			continue
		}
		r.log.Info("log grant of a server without a token removed", "server", host)
	}
	return errs
}
