package daemon

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"time"

	"github.com/hashicorp/consul/api"

	"github.com/jiocloud/orchestrate/internal/fileutil"
	"github.com/jiocloud/orchestrate/internal/store/reaperkv"
	"github.com/jiocloud/orchestrate/reaper"
)

// The daemon's part of instance refresh (reaper/planner/refresh.go
// decides): the boot spec records a rollback builds from, the refresh
// requests written back with the reaper's progress, and a rollback's
// server built from the spec before the current one.

// keepSpecs records each role's boot spec before the cycle plans: a role
// whose configured spec is not its record's current one gets a new record,
// the old current kept as the previous (what a rollback rolls back to).
// It returns, by role, why the previous spec cannot be built any more
// (its user data file no longer holds what it held, or the record cannot
// be read). A record written by hand is left alone. Nothing is written in
// a dry run.
func (r *Reaper) keepSpecs(ctx context.Context, t *leaderTerm, keys *ReaperKeys) (problems map[string]string, errs []string) {
	problems = map[string]string{}
	for i := range r.cfg.Roles {
		role := &r.cfg.Roles[i]
		if why, bad := keys.SpecProblems[role.Name]; bad {
			problems[role.Name] = why + " (`consul kv delete` it: the reaper records the spec afresh, with nothing to roll back to)"
			continue
		}
		rec, ok := keys.Specs[role.Name]
		if cur := specInfo(role, r.now()); !ok || rec.Current.Digest != cur.Digest {
			next := reaperkv.SpecRecord{Current: cur}
			if ok {
				prev := rec.Current
				next.Previous = &prev
			}
			if !r.cfg.IsDryRun() {
				op := &api.KVTxnOp{Verb: api.KVSet, Key: reaperkv.SpecKey(r.journal.prefix, role.Name), Value: next.Value()}
				if err := r.journal.txn(ctx, t.session, op); err != nil {
					errs = append(errs, "boot spec record of "+role.Name+": "+err.Error())
					continue
				}
				r.log.Info("boot spec recorded", "role", role.Name, "spec", cur.Digest[:12], "previous", previousDigest(next))
			}
			keys.Specs[role.Name], rec = next, next
		}
		if rec.Previous != nil {
			if _, err := userDataOf(*rec.Previous); err != nil {
				problems[role.Name] = err.Error()
			}
		}
	}
	t.specs = keys.Specs
	return problems, errs
}

func previousDigest(rec reaperkv.SpecRecord) string {
	if rec.Previous == nil {
		return "none"
	}
	return rec.Previous.Digest[:min(12, len(rec.Previous.Digest))]
}

// specInfo is role's boot spec as recorded: no user data, its file's
// path and SHA-256.
func specInfo(role *reaper.Role, now time.Time) reaperkv.BootSpecInfo {
	b := role.Boot
	sum := sha256.Sum256(b.UserData)
	return reaperkv.BootSpecInfo{Digest: b.Digest(), Image: b.Image, Flavor: b.Flavor, Networks: b.Networks, KeyName: b.KeyName,
		UserDataFile: b.UserDataFile, UserDataSHA256: hex.EncodeToString(sum[:]), Since: now.UTC()}
}

// userDataOf reads the user data a recorded spec was built from: its
// file, which must still hold what it held (its SHA-256).
func userDataOf(info reaperkv.BootSpecInfo) ([]byte, error) {
	var data []byte
	if info.UserDataFile != "" {
		// The record is a value in KV: its path is read only if it is a
		// regular file, and only as much as Nova takes (a FIFO would block
		// the cycle, a device fill its memory).
		fi, err := os.Stat(info.UserDataFile)
		if err == nil && !fi.Mode().IsRegular() {
			err = fmt.Errorf("%s is not a regular file", info.UserDataFile)
		}
		if err == nil {
			data, err = fileutil.ReadLimited(info.UserDataFile, reaper.MaxUserData)
		}
		if err != nil {
			return nil, fmt.Errorf("spec %.12s cannot be built: its user data file: %w", info.Digest, err)
		}
	}
	if sum := sha256.Sum256(data); hex.EncodeToString(sum[:]) != info.UserDataSHA256 {
		return nil, fmt.Errorf("spec %.12s cannot be built: its user data file %s no longer holds what the spec was built from (keep each version's user data in a file of its own, as images are named by version)", info.Digest, info.UserDataFile)
	}
	return data, nil
}

// errSpecGone: an entry names a spec the reaper has no record of.
var errSpecGone = errors.New("no record of the boot spec")

// roleOnSpec is role as built from the recorded spec digest (a
// rollback's): its image, flavor, networks, key and user data in place of
// the configuration's, checked to give that digest.
func (r *Reaper) roleOnSpec(t *leaderTerm, role *reaper.Role, digest string) (*reaper.Role, error) {
	rec := t.specs[role.Name]
	var info *reaperkv.BootSpecInfo
	for _, s := range []*reaperkv.BootSpecInfo{&rec.Current, rec.Previous} {
		if s != nil && s.Digest == digest {
			info = s
		}
	}
	if info == nil {
		return nil, &reaper.CloudError{Class: reaper.Fatal, Op: "build " + role.Name + " on spec " + digest, Err: errSpecGone}
	}
	data, err := userDataOf(*info)
	if err != nil {
		return nil, &reaper.CloudError{Class: reaper.Fatal, Op: "build " + role.Name, Err: err}
	}
	built := *role
	built.Boot.Image, built.Boot.Flavor, built.Boot.Networks, built.Boot.KeyName, built.Boot.UserData = info.Image, info.Flavor, info.Networks, info.KeyName, data
	if built.Boot.Digest() != digest {
		return nil, &reaper.CloudError{Class: reaper.Fatal, Op: "build " + role.Name, Err: fmt.Errorf("the record of spec %.12s gives another digest: not built", digest)}
	}
	return &built, nil
}

// writeRefreshes writes back the refresh requests the plan changed (the
// reaper's progress in them) or removes those done, each only if it is
// still the request read (its index; a new request wins), and records
// each change in the log and the history. Nothing in a dry run.
func (r *Reaper) writeRefreshes(ctx context.Context, t *leaderTerm, plan *reaper.Plan, dry bool) []string {
	var errs []string
	for _, w := range plan.Refreshes {
		if dry || ctx.Err() != nil {
			break
		}
		key := reaperkv.RefreshKey(r.journal.prefix, w.Role)
		op := &api.KVTxnOp{Verb: api.KVCAS, Key: key, Value: w.Record.Value(), Index: w.Record.Index}
		if w.Remove {
			op = &api.KVTxnOp{Verb: api.KVDeleteCAS, Key: key, Index: w.Record.Index}
		}
		err := r.journal.txn(ctx, t.session, op)
		var refused *txnRefused
		switch {
		case errors.As(err, &refused):
			continue // a newer request: the next cycles carry it out
		case err != nil:
			errs = append(errs, "refresh request of "+w.Role+": "+err.Error())
			continue
		}
		if w.Activity != "" {
			r.log.Info(w.Activity, "role", w.Role, "state", w.Record.State)
			r.record(t, reaperkv.Activity{Kind: reaperkv.ActivityRefresh, Role: w.Role, Action: w.Activity, Reason: w.Record.Reason, Result: "done"})
		}
	}
	return errs
}
