package orchestrate

import (
	"context"
	"fmt"
	"strings"

	"github.com/spf13/pflag"

	"github.com/jiocloud/orchestrate/internal/exitcode"
	"github.com/jiocloud/orchestrate/internal/store/reaperkv"
	"github.com/jiocloud/orchestrate/internal/store/schema"
)

// cmdStandby keeps this node's Consul maintenance in step with its warm
// pool record: a key watch on <prefix>/reaper/pool/ROLE/HOST runs it
// (watch-config --standby). The node's own agent then holds the
// maintenance, which its anti-entropy keeps, where the reaper's check
// through the catalog would be removed by it within a minute; the reaper's
// claim removes the record in its journal transaction, and this handler
// ends the maintenance.
var cmdStandby = &command{
	name: "standby", minArgs: 0, maxArgs: 0, needsHost: true, handler: true,
	summary: "Keep this node in Consul maintenance while the reaper holds it as a warm pool standby (its record <prefix>/reaper/pool/ROLE/HOST exists), and end that maintenance once the record is gone (claimed); a maintenance set for another reason is left alone. Run by a key watch (watch-config --standby).",
	setup: func(fs *pflag.FlagSet) runFunc {
		role := fs.String("role", "", "this node's role (required)")
		return func(ctx context.Context, e *env, _ []string) error { return runStandby(ctx, e, *role) }
	},
}

func runStandby(ctx context.Context, e *env, role string) error {
	if err := schema.ValidName("role", role); err != nil {
		return exitcode.Usagef("standby: --role: %v", err)
	}
	agent := e.client.Agent()
	self, err := agent.NodeName()
	if err != nil {
		return fmt.Errorf("standby: ask the local agent its node name: %w", err)
	}
	if self != e.host {
		return exitcode.Usagef("standby: --host %s is not the local agent's node %s: only a node's own agent holds its maintenance", e.host, self)
	}
	ps, err := e.store.Pool(ctx)
	if err != nil {
		return err
	}
	standby := false
	for _, rec := range ps.Standbys[role] {
		standby = standby || rec.Host == e.host
	}
	checks, err := agent.Checks()
	if err != nil {
		return fmt.Errorf("standby: read the local agent's checks: %w", err)
	}
	c := checks[reaperkv.NodeMaintenanceCheck]
	ours := c != nil && strings.HasPrefix(c.Notes, reaperkv.StandbyNotesPrefix)
	switch {
	case standby && c == nil:
		reason := reaperkv.StandbyNotesPrefix + " standby of the warm pool of role " + role + " (orchestrate standby), until the reaper claims it"
		if err := agent.EnableNodeMaintenance(reason); err != nil {
			return fmt.Errorf("standby: enable node maintenance: %w", err)
		}
		e.log.Info("warm pool standby: node maintenance enabled", "host", e.host, "role", role)
	case !standby && ours:
		if err := agent.DisableNodeMaintenance(); err != nil {
			return fmt.Errorf("standby: disable node maintenance: %w", err)
		}
		e.log.Info("claimed from the warm pool: node maintenance ended", "host", e.host, "role", role)
	}
	return nil
}
