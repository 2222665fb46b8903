package daemon

import (
	"context"
	"errors"
	"fmt"
	"os"
	"time"

	"github.com/hashicorp/consul/api"
	"github.com/jiocloud/orchestrate/internal/nodeid"
	"github.com/jiocloud/orchestrate/internal/store/reaperkv"
	"github.com/jiocloud/orchestrate/internal/store/schema"
	"github.com/jiocloud/orchestrate/reaper"
)

// tokenPartSize bounds what the reaper's part adds to a server's user
// data (two token copies, the MIME headers): the operator's file must
// leave this much room under Nova's limit.
const tokenPartSize = 1024

// validateIdentity checks node_identity: the key loads, every role's
// server names can be node identities, and every role's user data can be
// put beside the token part.
func validateIdentity(c *reaper.Config) error {
	ni := c.NodeIdentity
	if ni == nil {
		return nil
	}
	if ni.AuthMethod == "" {
		ni.AuthMethod = nodeid.DefaultAuthMethod
	}
	if ni.Audience == "" {
		ni.Audience = nodeid.DefaultAudience
	}
	if ni.KeyFile == "" {
		return errors.New("node_identity.key_file: the reaper's private key is required")
	}
	if fi, err := os.Stat(ni.KeyFile); err == nil && fi.Mode().Perm()&0o007 != 0 {
		return fmt.Errorf("node_identity.key_file %s is readable by every user (mode %v): whoever reads it can mint any server's identity; chmod 0640 (root:orchestrate) or 0600", ni.KeyFile, fi.Mode().Perm())
	}
	key, err := nodeid.LoadKey(ni.KeyFile)
	if err != nil {
		return fmt.Errorf("node_identity.key_file: %w", err)
	}
	ni.SigningKey = key
	for i := range c.Roles {
		r := &c.Roles[i]
		for _, n := range []int{1, 99999} {
			if err := nodeid.ValidHost(r.ServerName(n)); err != nil {
				return fmt.Errorf("%s.boot.name_template: with node_identity every server name must be a Consul node identity: %w", reaper.RoleField(i), err)
			}
		}
		if ud := r.Boot.UserData; len(ud) > 0 {
			if _, err := nodeid.PartType(ud); err != nil {
				return fmt.Errorf("%s.boot.user_data_file: with node_identity the reaper appends the token's part to it, but it %w", reaper.RoleField(i), err)
			}
			room := tokenPartSize
			if c.Logs != nil {
				room += grantPartSize
			}
			if len(ud) > reaper.MaxUserData-room {
				return fmt.Errorf("%s.boot.user_data_file: %d bytes leaves no room for the node token's part (at most %d with node_identity)", reaper.RoleField(i), len(ud), reaper.MaxUserData-room)
			}
		}
	}
	return nil
}

// mintFor logs in for the server e creates, records the sealed token
// under the leader check (before the server exists, so no leader can lose
// track of a live token) and returns the server's user data; with no
// node_identity, the role's user data as it is. A name the operator did
// not authorise (no host policy) is a Fatal cloud error for the role:
// backed off and reported, as a bad flavor is.
func (r *Reaper) mintFor(ctx context.Context, t *leaderTerm, role *reaper.Role, e reaper.Entry) ([]byte, error) {
	if r.minter == nil {
		return role.Boot.UserData, nil
	}
	id, err := r.minter.Mint(ctx, e.NewName, role.Name)
	if errors.Is(err, nodeid.ErrNoHostPolicy) {
		return nil, &reaper.CloudError{Class: reaper.Fatal, Op: "node token for " + e.NewName, Err: err}
	}
	if err != nil {
		return nil, &reaper.CloudError{Class: reaper.Transient, Op: "node token for " + e.NewName, Err: err}
	}
	_, grant, err := r.signGrant(e.NewName, r.now())
	if err != nil {
		r.logout(ctx, e.NewName, id.Sealed)
		return nil, &reaper.CloudError{Class: reaper.Fatal, Op: "log grant for " + e.NewName, Err: err}
	}
	ud, err := nodeid.UserDataWithGrant(id.Secret, grant, role.Boot.UserData)
	if err == nil && len(ud) > reaper.MaxUserData {
		err = fmt.Errorf("user data with the token part is %d bytes, over %d", len(ud), reaper.MaxUserData)
	}
	if err != nil {
		r.logout(ctx, e.NewName, id.Sealed)
		return nil, &reaper.CloudError{Class: reaper.Fatal, Op: "user data for " + e.NewName, Err: err}
	}
	rec := reaperkv.NodeTokenRecord{Host: e.NewName, Role: role.Name, Sealed: id.Sealed, Accessor: id.Accessor, Time: r.now().UTC()}
	if err := r.journal.Put(ctx, t.session, e, nil, r.journal.tokenSetOp(rec)); err != nil {
		r.logout(ctx, e.NewName, id.Sealed)
		return nil, err
	}
	return ud, nil
}

// logout logs out a token that reached no server, logging (never
// returning) a failure.
func (r *Reaper) logout(ctx context.Context, name, sealed string) {
	if err := r.minter.Revoke(ctx, sealed); err != nil {
		r.log.Warn("log out the node token of a server that was not created", "server", name, "err", err)
	}
}

// revokeToken logs out the token of server name and drops its record,
// before the server is deleted (so a machine on its way out, or a
// compromised one, cannot write its records once the reaper decided to
// remove it), after a create that Nova refused, and once a server is gone
// however it went: a name is built again only when no token for it
// lives. A token sealed by another key is logged and its record dropped;
// a Consul failure stops here until the next cycle.
func (r *Reaper) revokeToken(ctx context.Context, t *leaderTerm, name string) error {
	if r.minter == nil {
		return nil
	}
	p, _, err := r.client.KV().Get(reaperkv.NodeTokenKey(r.cfg.Prefix, name), (&api.QueryOptions{RequireConsistent: true}).WithContext(ctx))
	if err != nil {
		return fmt.Errorf("read the node token record of %s: %w", name, err)
	}
	if p == nil {
		return nil
	}
	rec, err := reaperkv.ParseNodeToken(schema.RelKey(r.cfg.Prefix, p.Key), p.Value)
	if err != nil {
		return err
	}
	switch err := r.minter.Revoke(ctx, rec.Sealed); {
	case errors.Is(err, nodeid.ErrSealedOtherKey):
		r.log.Warn("a node token is sealed by another key: it cannot be logged out here; `consul acl token delete -id` it", "server", name, "accessor", rec.Accessor)
	case err != nil:
		return fmt.Errorf("log out the node token of %s: %w", name, err)
	}
	return r.journal.DropToken(ctx, t.session, name)
}

// sweepTokens logs out the tokens of servers that are gone without the
// reaper deleting them (an operator's delete, a lost create), once Nova's
// list is whole and no open entry names them, and their record is older
// than cloud_timeout (a server Nova just made may not be listed yet).
func (r *Reaper) sweepTokens(ctx context.Context, t *leaderTerm, obs *observation, now time.Time) []string {
	if r.minter == nil || len(obs.keys.Tokens) == 0 {
		return nil
	}
	live := map[string]bool{}
	for _, s := range obs.servers {
		if s.Partial() {
			return nil // the list is not whole: a server may hide
		}
		if !s.Gone() {
			live[s.Name] = true
		}
	}
	for _, e := range obs.keys.Entries {
		live[e.NewName], live[e.OldName] = true, true
	}
	var errs []string
	for host, rec := range obs.keys.Tokens {
		if live[host] || now.Sub(rec.Time) < r.cfg.CloudTimeout.D() || ctx.Err() != nil {
			continue
		}
		if err := r.revokeToken(ctx, t, host); err != nil {
			errs = append(errs, err.Error())
			continue
		}
		r.log.Info("node token of a server that is gone logged out", "server", host, "accessor", rec.Accessor)
	}
	return errs
}

// withTokens adds to the names with records those with a node token
// record: a name is not built again while a token for it may live.
func withTokens(recorded map[string]bool, tokens map[string]reaperkv.NodeTokenRecord) map[string]bool {
	if len(tokens) == 0 {
		return recorded
	}
	out := make(map[string]bool, len(recorded)+len(tokens))
	for h := range recorded {
		out[h] = true
	}
	for h := range tokens {
		out[h] = true
	}
	return out
}
