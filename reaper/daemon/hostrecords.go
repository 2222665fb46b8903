package daemon

import (
	"github.com/jiocloud/orchestrate/reaper"
)

// noteSilent logs each host that turned silent, and each that is silent
// no more, once (one line per change; a new leader logs the silent hosts
// it finds again once their silence reaches silent_after under it).
func (r *Reaper) noteSilent(t *leaderTerm, p *reaper.Plan) {
	now := map[string]bool{}
	for _, rr := range p.Roles {
		for _, h := range rr.Silent {
			now[h.Host] = true
			if !t.silent[h.Host] {
				r.log.Warn("host silent: Nova lists its server, but its records (heartbeat included) have not moved for silent_after",
					"host", h.Host, "role", rr.Name, "last_moved", h.Since)
			}
		}
	}
	for h := range t.silent {
		if !now[h] {
			r.log.Info("host no longer silent (its records moved, or its server left)", "host", h)
		}
	}
	t.silent = now
}
