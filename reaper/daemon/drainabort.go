package daemon

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/hashicorp/consul/api"
	"github.com/jiocloud/orchestrate/internal/store"
	"github.com/jiocloud/orchestrate/internal/store/reaperkv"
	"github.com/jiocloud/orchestrate/reaper"
)

// abortDrain carries out OpAbort: the entry is written in phase aborting
// (the intent: from here on any leader finishes it as an abort), the
// node's maintenance ended, then one transaction under the leader check
// drops the entry and the drain request, records the host's cool-off and,
// for a named host, removes its scale-in request and raises the desired
// count back (checked against the count read: a count that moved refuses
// the transaction, and the next cycle finishes the abort).
func (r *Reaper) abortDrain(ctx context.Context, t *leaderTerm, a reaper.Action) error {
	e := a.Entry
	if e.Abort == nil {
		return fmt.Errorf("abort of %s without its record", e.ID)
	}
	e.Updated = r.now()
	if err := r.journal.Put(ctx, t.session, e, nil); err != nil {
		return err
	}
	if r.opts.abortStep != nil {
		if err := r.opts.abortStep(); err != nil {
			return err
		}
	}
	if err := r.endMaintenance(ctx, e.OldName); err != nil {
		return err
	}
	rec := *e.Abort
	ops := []*api.KVTxnOp{r.journal.drainEndOp(e.OldName),
		{Verb: api.KVSet, Key: reaperkv.CooloffKey(r.journal.prefix, rec.Host), Value: reaperkv.MarshalDrainAbort(rec)}}
	if rec.Named {
		ops = append(ops, &api.KVTxnOp{Verb: api.KVDelete, Key: store.ScaleInKey(r.journal.prefix, e.Role, rec.Host)})
	}
	if c := a.Restore; c != nil {
		ops = append(ops, &api.KVTxnOp{Verb: api.KVCAS, Key: store.DesiredKey(r.journal.prefix, c.Role), Index: c.Index, Value: []byte(strconv.Itoa(c.To))})
	}
	if err := r.journal.Remove(ctx, t.session, e.ID, ops...); err != nil {
		return err
	}
	r.metrics.drainAborted(e.Role, rec.Cause)
	r.log.Warn("drain aborted: the server stays in its role", "role", e.Role, "host", rec.Host, "cause", rec.Cause, "detail", rec.Detail,
		"until", rec.Until.UTC().Format(time.RFC3339), "named", rec.Named, "count_restored", rec.Restored, "entry", e.ID)
	return nil
}

// endCooloffs removes the records of cool-offs that are over, each only
// if it is still the record read, under the leader check.
func (r *Reaper) endCooloffs(ctx context.Context, t *leaderTerm, ended []reaperkv.DrainAbortRecord) error {
	var ops []*api.KVTxnOp
	for _, rec := range ended {
		ops = append(ops, &api.KVTxnOp{Verb: api.KVDeleteCAS, Key: reaperkv.CooloffKey(r.journal.prefix, rec.Host), Index: rec.Index})
	}
	for len(ops) > 0 {
		n := min(len(ops), poolOpsPerTxn)
		var refused *txnRefused
		if err := r.journal.txn(ctx, t.session, ops[:n]...); err != nil && !errors.As(err, &refused) {
			return err // refused: a record rewritten since it was read stays
		}
		ops = ops[n:]
	}
	return nil
}
