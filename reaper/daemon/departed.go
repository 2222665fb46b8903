package daemon

import (
	"context"
	"errors"
	"time"

	"github.com/hashicorp/consul/api"
	"github.com/jiocloud/orchestrate/internal/store/reaperkv"
)

// pruneDeparted deletes the departed records (forgotten hosts' log links)
// forgotten departed_retention or longer ago by the reaper's clock, and
// the oldest beyond reaperkv.DefaultMaxDeparted, at most
// reaperkv.MaxDepartedPrunes a cycle, each checked against the index read
// (a record rewritten since, a host forgotten again, stays), in one
// transaction under the leader check.
func (r *Reaper) pruneDeparted(ctx context.Context, t *leaderTerm, recs map[string]reaperkv.DepartedRecord, now time.Time) error {
	forgotten := make(map[string]time.Time, len(recs))
	for h, rec := range recs {
		forgotten[h] = rec.Forgotten
	}
	hosts := reaperkv.DepartedPrunes(forgotten, now, r.cfg.DepartedRetention.D(), reaperkv.DefaultMaxDeparted, reaperkv.MaxDepartedPrunes)
	if len(hosts) == 0 {
		return nil
	}
	ops := make([]*api.KVTxnOp, 0, len(hosts))
	for _, h := range hosts {
		ops = append(ops, &api.KVTxnOp{Verb: api.KVDeleteCAS, Key: reaperkv.DepartedKey(r.journal.prefix, h), Index: recs[h].Index})
	}
	var refused *txnRefused
	if err := r.journal.txn(ctx, t.session, ops...); err != nil {
		if errors.As(err, &refused) {
			return nil // one was rewritten since the read: next cycle
		}
		return err
	}
	for _, h := range hosts {
		if f := recs[h].Forgotten; f.IsZero() {
			r.log.Info("departed record that cannot be read removed", "host", h)
		} else {
			r.log.Info("departed record pruned", "host", h, "forgotten", f.UTC().Format(time.RFC3339))
		}
	}
	return nil
}
