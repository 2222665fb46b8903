package daemon

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"time"

	"github.com/hashicorp/consul/api"
	"github.com/jiocloud/orchestrate/internal/store/reaperkv"
	"github.com/jiocloud/orchestrate/internal/store/schema"
	"github.com/jiocloud/orchestrate/reaper"
)

// errPending: the cloud accepted the action's request but has not carried
// it out yet; the entry says so and later cycles look again. Not a failure.
var errPending = errors.New("accepted by the cloud, not carried out yet")

// callTimeout bounds one cloud API call (a create, a get, a delete), so a
// hung Nova cannot stall the loop.
const callTimeout = 2 * time.Minute

// execute carries out one action. The journal entry is written before
// every cloud call (the intent), and updated or removed after it.
func (r *Reaper) execute(ctx context.Context, t *leaderTerm, a reaper.Action, budget *[]time.Time) error {
	e := a.Entry
	role := r.cfg.Role(e.Role)
	if role == nil {
		return fmt.Errorf("role %q is not configured", e.Role)
	}
	put := func(e reaper.Entry, b []time.Time) error {
		e.Updated = r.now()
		return r.journal.Put(ctx, t.session, e, b)
	}
	switch a.Op {
	case reaper.OpAdopt:
		return put(e, nil)
	case reaper.OpFinish:
		return r.journal.Remove(ctx, t.session, e.ID, r.journal.pendingHookOps(e)...)
	case reaper.OpDeregister:
		return r.deregister(ctx, e.OldName)
	case reaper.OpForget:
		return r.forgetRecords(ctx, t, e.OldName, a.RecordsIndex)
	case reaper.OpMaintain:
		return r.maintenance(ctx, e)
	case reaper.OpDeleteDuplicate:
		return r.deleteDuplicate(ctx, t, e)
	case reaper.OpRestore:
		return r.restore(ctx, t, e)
	case reaper.OpDrain:
		return r.requestDrain(ctx, t, role, e, budget)
	case reaper.OpAbort:
		return r.abortDrain(ctx, t, a)
	case reaper.OpRepair:
		return r.repair(ctx, t, role, a, budget)
	case reaper.OpHook:
		return r.askHook(ctx, t, e)
	case reaper.OpHookResult:
		return r.hookDone(ctx, t, e)
	case reaper.OpCreate:
		return r.create(ctx, t, role, e, put)
	case reaper.OpClaim:
		return r.claim(ctx, t, e, put)
	case reaper.OpStandbyStop:
		return r.stopStandby(ctx, t, e)
	case reaper.OpStandbyMaintain:
		return r.setMaintenance(ctx, e.OldName, reaperkv.StandbyNotesPrefix+" the reaper keeps this node out of service as a standby of the warm pool of role "+e.Role+" until it is claimed")
	case reaper.OpDelete:
		return r.deleteOld(ctx, t, e, put)
	case reaper.OpRollback:
		return r.rollback(ctx, t, role, e, put)
	}
	return fmt.Errorf("unknown operation %q", a.Op)
}

// forgetRecords carries out OpForget: the host's own records only, each
// still at the index this cycle read, in one transaction under the leader
// check.
func (r *Reaper) forgetRecords(ctx context.Context, t *leaderTerm, host string, index uint64) error {
	ops, err := r.store.ForgetRecordsOps(ctx, host, index)
	if err != nil {
		return err
	}
	return r.journal.txn(ctx, t.session, ops...)
}

// deleteDuplicate carries out OpDeleteDuplicate, asked again each cycle
// while Nova still lists the duplicate.
func (r *Reaper) deleteDuplicate(ctx context.Context, t *leaderTerm, e reaper.Entry) error {
	if _, err := r.deleteServer(ctx, e.NewID); err != nil {
		if reaper.ClassOf(err) == reaper.Conflict {
			return r.deleteRefused(t, e, err)
		}
		return err
	}
	return nil
}

// restore carries out OpRestore: the server stays, out of maintenance,
// and its entry goes with its hooks' requests and its drain request.
func (r *Reaper) restore(ctx context.Context, t *leaderTerm, e reaper.Entry) error {
	if err := r.endMaintenance(ctx, e.OldName); err != nil {
		return err
	}
	return r.journal.Remove(ctx, t.session, e.ID, append(r.journal.pendingHookOps(e), r.journal.drainEndOp(e.OldName))...)
}

// requestDrain carries out OpDrain. The drain request goes with the
// intent: the node's handler (or the platform) may move the work away and
// answer, and the server is deleted on the answer or at DrainUntil.
func (r *Reaper) requestDrain(ctx context.Context, t *leaderTerm, role *reaper.Role, e reaper.Entry, budget *[]time.Time) error {
	*budget = append(*budget, r.now())
	e.Updated = r.now()
	if err := r.journal.Put(ctx, t.session, e, *budget, r.journal.drainRequestOp(e, role, r.now().UTC())); err != nil {
		return err
	}
	return r.maintenance(ctx, e)
}

// stopStandby carries out OpStandbyStop: the standby's record says
// stopped, then Nova stops it. Started carries the standby's creation
// time (no entry is written for a stop).
func (r *Reaper) stopStandby(ctx context.Context, t *leaderTerm, e reaper.Entry) error {
	rec := reaperkv.StandbyRecord{Role: e.Role, Host: e.OldName, ID: e.OldID, State: reaperkv.StandbyStopped, Created: e.Started}
	if err := r.journal.SetStandby(ctx, t.session, rec); err != nil {
		return err
	}
	sctx, cancel := context.WithTimeout(ctx, callTimeout)
	err := r.cloud.Stop(sctx, e.OldID)
	cancel()
	if err != nil && reaper.ClassOf(err) != reaper.Conflict {
		r.metrics.cloudError(err)
		return err
	}
	return nil
}

// deleteOld carries out OpDelete: the intent, the delete of the old
// server, its deregistration; a delete-first replacement goes on to its
// create, any other entry is done.
func (r *Reaper) deleteOld(ctx context.Context, t *leaderTerm, e reaper.Entry, put func(reaper.Entry, []time.Time) error) error {
	if err := put(e, nil); err != nil {
		return err
	}
	if done, err := r.deleteEntryServer(ctx, t, e, e.OldName, e.OldID, put); !done || err != nil {
		return err // the entry stays in deleting; the next cycle goes on
	}
	if e.Kind == reaperkv.KindReplace && e.Mode == reaper.ModeDeleteFirst {
		e.Phase, e.OldID, e.DeleteAsked = reaperkv.PhaseCreating, "", time.Time{}
		return put(e, nil)
	}
	return r.journal.Remove(ctx, t.session, e.ID)
}

// deleteEntryServer deletes entry e's server (name, id) and deregisters
// its node; done is false while the cloud refused the delete or has not
// carried it out (err says so, or is nil while the entry waits).
func (r *Reaper) deleteEntryServer(ctx context.Context, t *leaderTerm, e reaper.Entry, name, id string, put func(reaper.Entry, []time.Time) error) (done bool, err error) {
	if err := r.revokeToken(ctx, t, name); err != nil {
		return false, err
	}
	gone, err := r.deleteServer(ctx, id)
	switch {
	case err != nil && reaper.ClassOf(err) == reaper.Conflict:
		return false, r.deleteRefused(t, e, err)
	case err != nil:
		return false, err
	case !gone:
		return false, r.deleteNotYet(t, e, name, id, put)
	}
	return true, r.deregister(ctx, name)
}

// rollback carries out OpRollback: the intent, the delete of the new
// server, the entry dropped, then the backoff a fault calls for.
func (r *Reaper) rollback(ctx context.Context, t *leaderTerm, role *reaper.Role, e reaper.Entry, put func(reaper.Entry, []time.Time) error) error {
	if err := put(e, nil); err != nil {
		return err
	}
	if e.NewID != "" {
		if done, err := r.deleteEntryServer(ctx, t, e, e.NewName, e.NewID, put); !done || err != nil {
			return err
		}
	}
	if err := r.journal.Remove(ctx, t.session, e.ID, r.journal.pendingHookOps(e)...); err != nil {
		return err
	}
	if h := e.LaunchHook; h != nil && h.Result == schema.HookAbandon {
		r.launchAbandoned(t, role.Name, e)
	}
	if e.Fault != "" && e.Standby {
		r.poolBackoff(t, reaper.BootFailed(e.NewName, e.Fault))
	} else if e.Fault != "" {
		// Once, when the rollback is done: a retried rollback does
		// not double the role's backoff.
		ferr := reaper.BootFailed(e.NewName, e.Fault)
		r.metrics.cloudError(ferr)
		if zoneRefusal(role, e.Zone, ferr) {
			r.backoffZone(ctx, t, role, e.Zone, ferr)
			return nil
		}
		r.backoff(t, role.Name, ferr)
		r.exhausted(ctx, t, role.Name, ferr)
	} else if e.Provision != "" {
		// A first boot that failed is a failed create: the role's
		// creates back off (fatal: no capacity record), so a broken
		// image or user data is not rebuilt every cycle.
		r.backoff(t, role.Name, reaper.ProvisionFailed(e.NewName, e.Provision))
	}
	return nil
}

// create writes the intent, creates the server with metadata naming the
// entry and records its ID.
func (r *Reaper) create(ctx context.Context, t *leaderTerm, role *reaper.Role, e reaper.Entry, put func(reaper.Entry, []time.Time) error) error {
	e.Attempts++
	e.Phase = reaperkv.PhaseCreating
	if err := put(e, nil); err != nil {
		return err
	}
	if e.Spec != "" && e.Spec != role.Boot.Digest() {
		// A rollback's: built from the spec before the configuration's.
		built, err := r.roleOnSpec(t, role, e.Spec)
		if err != nil {
			return r.createFailed(ctx, t, role, e, err)
		}
		role = built
	}
	meta := maps.Clone(role.Boot.Metadata)
	if meta == nil {
		meta = map[string]string{}
	}
	meta[reaper.MetaRole], meta[reaper.MetaJournal] = role.Name, e.ID
	meta[reaper.MetaSpec] = role.Boot.Digest()
	if e.Standby {
		meta[reaper.MetaStandby] = role.Name
	}
	group, err := r.serverGroup(ctx, t, role)
	if err != nil {
		return r.createFailed(ctx, t, role, e, err)
	}
	ud, err := r.mintFor(ctx, t, role, e)
	if err != nil {
		return r.createFailed(ctx, t, role, e, err)
	}
	cctx, cancel := context.WithTimeout(ctx, callTimeout)
	s, err := r.cloud.Create(cctx, reaper.CreateRequest{Name: e.NewName, Role: role, Metadata: meta, Tags: role.Boot.Tags, UserData: ud,
		Zone: e.Zone, ServerGroup: group})
	cancel()
	if err != nil {
		if reaper.ClassOf(err) != reaper.Transient {
			// Refused: no server holds the token. (A transient error may
			// hide a server Nova made: the token stays with it, and the
			// sweep logs it out if none appears.)
			if rerr := r.revokeToken(ctx, t, e.NewName); rerr != nil {
				r.log.Warn("log out the node token of a refused create", "server", e.NewName, "err", rerr)
			}
		}
		return r.createFailed(ctx, t, role, e, err)
	}
	t.backoffReset(role.Name, e.Zone)
	// The entry waits in booting: the planner follows the server from
	// each cycle's list (ACTIVE and checked in, ERROR, or past
	// boot_timeout), so no cycle waits for one server to boot.
	e.Phase, e.NewID = reaperkv.PhaseBooting, s.ID
	if e.Standby {
		// Its record from the start, so the machine's own `orchestrate
		// standby` watch finds it and holds the node's maintenance before
		// Puppet registers its services.
		e.Updated = r.now()
		return r.journal.Put(ctx, t.session, e, nil, r.journal.standbyOp(reaperkv.StandbyRecord{Role: role.Name, Host: s.Name, ID: s.ID, State: reaperkv.StandbyBuilding, Created: s.Created}))
	}
	return put(e, nil)
}

// claim carries out a claim of a warm pool standby: the entry (phase
// claiming, NewID the standby) is written in one transaction with the
// removal of the standby's pool record, so no other entry claims it;
// then its standby mark in Nova is cleared and its node taken out of
// maintenance, and the entry waits in booting for it to serve, as a
// create's does. Each step after the first is idempotent: a leader
// killed at any of them leaves the entry in claiming, and the next
// leader runs them again.
func (r *Reaper) claim(ctx context.Context, t *leaderTerm, e reaper.Entry, put func(reaper.Entry, []time.Time) error) error {
	step := func(n int) error {
		if r.opts.claimStep == nil {
			return nil
		}
		return r.opts.claimStep(n)
	}
	if err := step(0); err != nil {
		return err
	}
	e.Phase = reaperkv.PhaseClaiming
	e.Updated = r.now()
	if err := r.journal.Put(ctx, t.session, e, nil, r.journal.poolDeleteOp(e.Role, e.NewName)); err != nil {
		return err
	}
	if err := step(1); err != nil {
		return err
	}
	cctx, cancel := context.WithTimeout(ctx, callTimeout)
	err := r.cloud.UnsetMetadata(cctx, e.NewID, reaper.MetaStandby)
	cancel()
	if err != nil && reaper.ClassOf(err) != reaper.NotFound {
		r.metrics.cloudError(err)
		return err
	}
	// A stopped standby is powered on; a running one answers Conflict.
	sctx, scancel := context.WithTimeout(ctx, callTimeout)
	err = r.cloud.Start(sctx, e.NewID)
	scancel()
	if err != nil && reaper.ClassOf(err) != reaper.Conflict && reaper.ClassOf(err) != reaper.NotFound {
		r.metrics.cloudError(err)
		return err
	}
	if err := step(2); err != nil {
		return err
	}
	if err := r.endMaintenance(ctx, e.NewName); err != nil {
		return err
	}
	if err := step(3); err != nil {
		return err
	}
	e.Phase = reaperkv.PhaseBooting
	return put(e, nil)
}

// createFailed handles a refused or failed create call and returns err.
func (r *Reaper) createFailed(ctx context.Context, t *leaderTerm, role *reaper.Role, e reaper.Entry, err error) error {
	r.metrics.cloudError(err)
	class := reaper.ClassOf(err)
	if class == reaper.Transient {
		// The server may have been made: the entry stays, and the next
		// cycle finds the server by its metadata or creates it again.
		return err
	}
	r.poolBackoff(t, err)
	if e.Standby {
		// The pools back off first: a standby's failed create holds
		// only the pools, real demand's creates go on trying.
		if rerr := r.journal.Remove(ctx, t.session, e.ID); rerr != nil {
			return errors.Join(err, rerr)
		}
		return err
	}
	if zoneRefusal(role, e.Zone, err) {
		r.backoffZone(ctx, t, role, e.Zone, err)
	} else {
		r.backoff(t, role.Name, err)
		r.exhausted(ctx, t, role.Name, err)
	}
	// Quota, capacity and fatal errors mean Nova made nothing: drop the
	// intent, unless the old server is already gone (delete-first), whose
	// replacement must still be made.
	if e.Kind == reaperkv.KindReplace && e.Mode == reaper.ModeDeleteFirst {
		return err
	}
	if rerr := r.journal.Remove(ctx, t.session, e.ID); rerr != nil {
		return errors.Join(err, rerr)
	}
	return err
}

// deleteServer asks Nova to delete server id and looks once whether it is
// gone: not found, or kept soft-deleted. Nova accepting the delete but
// still having the server is no error (gone is false): the caller records
// when it was asked and the planner looks again each cycle, so no cycle
// waits for one server's delete.
func (r *Reaper) deleteServer(ctx context.Context, id string) (gone bool, err error) {
	if id == "" {
		return true, nil
	}
	dctx, dcancel := context.WithTimeout(ctx, callTimeout)
	err = r.cloud.Delete(dctx, id)
	dcancel()
	if err != nil && reaper.ClassOf(err) != reaper.NotFound {
		if reaper.ClassOf(err) != reaper.Conflict {
			// A refusal is counted once per entry, by deleteRefused.
			r.metrics.cloudError(err)
		}
		return false, err
	}
	gctx, gcancel := context.WithTimeout(ctx, callTimeout)
	s, err := r.cloud.Get(gctx, id)
	gcancel()
	switch {
	case reaper.ClassOf(err) == reaper.NotFound:
		return true, nil
	case err != nil:
		// The delete was accepted; whether it is done is for the next
		// cycle's list to say.
		r.log.Debug("get server after its delete", "id", id, "err", err)
		return false, nil
	}
	return s.Gone(), nil
}

// deleteNotYet records that Nova accepted the delete of an entry's server
// but still has it. Past cloud_timeout since it first accepted it, the
// delete has stalled (a stuck task, a soft delete that never ends): it is
// reported once and retried with backoff, which frees the role's
// in-flight slot, like a refused delete.
func (r *Reaper) deleteNotYet(t *leaderTerm, e reaper.Entry, name, id string, put func(reaper.Entry, []time.Time) error) error {
	if e.DeleteAsked.IsZero() {
		e.DeleteAsked = r.now()
		if err := put(e, nil); err != nil {
			return err
		}
		return errPending
	}
	if waited := r.now().Sub(e.DeleteAsked); waited >= r.cfg.CloudTimeout.D() {
		return r.deleteRefused(t, e, &reaper.CloudError{Class: reaper.Stalled, Op: "delete server " + id,
			//lint:ignore ST1005 Nova is a name: the message starts with it, as the operator reads it
			Err: fmt.Errorf("Nova accepted the delete of %s %s ago and still has it", name, waited.Round(time.Second))})
	}
	return nil
}

// maintenance puts a node in maintenance mode from afar: the agent's
// maintenance API is local to the node's own agent, so the reaper registers
// the same check Consul's node maintenance uses (_node_maintenance,
// critical) on the node through the catalog. A live agent's anti-entropy
// removes checks it does not own within a minute or so, so the reaper
// re-asserts it every cycle while the node drains.
func (r *Reaper) maintenance(ctx context.Context, e reaper.Entry) error {
	return r.setMaintenance(ctx, e.OldName, "reaper: draining until "+e.DrainUntil.UTC().Format(time.RFC3339)+" ("+e.Reason+", entry "+e.ID+")")
}

// setMaintenance registers Consul's node maintenance check on name,
// critical, with notes, through the catalog.
func (r *Reaper) setMaintenance(ctx context.Context, name, notes string) error {
	node, _, err := r.client.Catalog().Node(name, (&api.QueryOptions{}).WithContext(ctx))
	if err != nil {
		return fmt.Errorf("read node %s: %w", name, err)
	}
	if node == nil || node.Node == nil {
		return nil // nothing in the catalog to drain
	}
	_, err = r.client.Catalog().Register(&api.CatalogRegistration{
		Node:           node.Node.Node,
		Address:        node.Node.Address,
		SkipNodeUpdate: true,
		Check: &api.AgentCheck{
			Node:    node.Node.Node,
			CheckID: reaper.MaintNodeCheck,
			Name:    "Node Maintenance Mode",
			Status:  api.HealthCritical,
			Notes:   notes,
		},
	}, (&api.WriteOptions{}).WithContext(ctx))
	if err != nil {
		return fmt.Errorf("maintenance mode on %s: %w", name, err)
	}
	return nil
}

// endMaintenance removes the maintenance check the reaper put on node
// (through the catalog, as maintenance did).
func (r *Reaper) endMaintenance(ctx context.Context, node string) error {
	_, err := r.client.Catalog().Deregister(&api.CatalogDeregistration{Node: node, CheckID: reaper.MaintNodeCheck}, (&api.WriteOptions{}).WithContext(ctx))
	if err != nil {
		return fmt.Errorf("end maintenance mode on %s: %w", node, err)
	}
	return nil
}

// deregister removes a deleted server's node from Consul: force-leave, so
// the servers do not re-add a failed serf member, deregister it from the
// catalog, then remove its version and status records, so a machine that
// later gets the name does not inherit them.
func (r *Reaper) deregister(ctx context.Context, node string) error {
	if node == "" {
		return nil
	}
	if err := r.client.Agent().ForceLeaveOptions(node, api.ForceLeaveOpts{}, (&api.QueryOptions{}).WithContext(ctx)); err != nil {
		r.log.Debug("force-leave", "node", node, "err", err)
	}
	if _, err := r.client.Catalog().Deregister(&api.CatalogDeregistration{Node: node}, (&api.WriteOptions{}).WithContext(ctx)); err != nil {
		return fmt.Errorf("deregister node %s: %w", node, err)
	}
	if schema.ValidName("host", node) != nil {
		return nil // no record can have this name
	}
	if err := r.store.ForgetHost(ctx, node); err != nil {
		return fmt.Errorf("remove the records of %s: %w", node, err)
	}
	return nil
}
