package store

import (
	"context"
	"fmt"
	"strings"

	"github.com/jiocloud/orchestrate/internal/store/reaperkv"
)

// DesiredCounts returns the desired counts of a snapshot (roles/<role>/desired),
// or an error when one could be missing from it: a key hidden by the
// token's ACLs or a value that is not a count would look unset, and a
// reader that falls back to a configured count would scale the role
// without anyone asking.
func (s *Store) DesiredCounts(ctx context.Context, snap *Snapshot) (map[string]int, error) {
	dir := keyDir(s.prefix, dirRoles)
	// The snapshot does not say whether keys were filtered out; listing
	// the role keys does.
	_, meta, err := s.kv.Keys(dir, "", readOpts(ctx))
	if err != nil {
		return nil, fmt.Errorf("read %s: %w", dir, err)
	}
	if meta != nil && meta.ResultsFilteredByACLs {
		return nil, fmt.Errorf("cannot read a desired count: keys under %s are hidden by ACLs: the token needs key:read on them", dir)
	}
	for _, p := range snap.Problems {
		if strings.HasPrefix(p.Key, dir) {
			return nil, fmt.Errorf("cannot read a desired count: %s", p)
		}
	}
	return snap.Desired, nil
}

// Validated returns the hosts whose validation status is success, for the
// current version when one is set.
func (snap *Snapshot) Validated() map[string]bool {
	out := map[string]bool{}
	for name, h := range snap.Hosts {
		st, ok := h.Status[CategoryValidation]
		if ok && st.State == StateSuccess && !st.Corrupt && (snap.CurrentVersion == "" || st.Version == snap.CurrentVersion) {
			out[name] = true
		}
	}
	return out
}

// Suspects returns the hosts whose consistent run (category puppet) failed
// and was marked suspect, for the current version when one is set, with
// the failure's detail.
func (snap *Snapshot) Suspects() map[string]string {
	out := map[string]string{}
	for name, h := range snap.Hosts {
		st, ok := h.Status[CategoryPuppet]
		if ok && st.State == StateFailed && st.Suspect && !st.Corrupt && (snap.CurrentVersion == "" || st.Version == snap.CurrentVersion) {
			out[name] = st.Detail
		}
	}
	return out
}

// ProvisionFailures returns the hosts whose first boot failed: their own
// record hosts/<host>/status/provisioned is in state failed, with the
// record (its detail names the failing step, its time says when). A
// record of the older layout, which another node could have written,
// counts for nothing (DESIGN.md, node restriction), nor one that cannot
// be read.
func (snap *Snapshot) ProvisionFailures() map[string]Status {
	out := map[string]Status{}
	for name, h := range snap.Hosts {
		st, ok := h.Status[CategoryProvisioned]
		if ok && st.State == StateFailed && !st.Corrupt && snap.ownStatus[name][CategoryProvisioned] {
			out[name] = st
		}
	}
	return out
}

// ReportingValidation returns the hosts with a validation status, in any
// state: their role's servers report validation.
func (snap *Snapshot) ReportingValidation() map[string]bool {
	out := map[string]bool{}
	for name, h := range snap.Hosts {
		if _, ok := h.Status[CategoryValidation]; ok {
			out[name] = true
		}
	}
	return out
}

// Arm writes an arm record by hand, opening the reaper's start gate unless
// rec is a disarm record (the reaper's own write of it goes through its
// leader-checked transactions).
func (s *Store) Arm(ctx context.Context, rec reaperkv.ArmRecord) error {
	_, err := s.SwapArm(ctx, rec)
	return err
}

// SwapArm writes rec as the arm record (an arm or a disarm record), and
// returns the value it replaced (nil: there was none).
func (s *Store) SwapArm(ctx context.Context, rec reaperkv.ArmRecord) ([]byte, error) {
	key := reaperkv.ReaperKey(s.prefix, reaperkv.ReaperArmedKey)
	return s.swapJSON(ctx, "write "+key, key, rec)
}

// ArmRecord reads the arm record: nil when there is none; data is its
// value as stored, and err says why it is no arm record (the gate is then
// closed).
func (s *Store) ArmRecord(ctx context.Context) (rec *reaperkv.ArmRecord, data []byte, err error) {
	key := reaperkv.ReaperKey(s.prefix, reaperkv.ReaperArmedKey)
	p, err := s.get(ctx, key)
	if err != nil || p == nil {
		return nil, nil, err
	}
	r, err := reaperkv.ParseArmRecord(p.Value)
	if err != nil {
		return nil, p.Value, &InputError{Err: err}
	}
	return &r, p.Value, nil
}

// Disarm closes the reaper's start gate: it writes a disarm record, which
// also keeps the reaper from arming itself again.
func (s *Store) Disarm(ctx context.Context, rec reaperkv.ArmRecord) error {
	rec.Disarmed = true
	return s.Arm(ctx, rec)
}
