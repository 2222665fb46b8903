package store

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"strconv"

	"github.com/hashicorp/consul/api"
	"github.com/jiocloud/orchestrate/internal/store/schema"
)

// The keys of autoscaling and scale-in, under the prefix (a node's own
// load reports and drain answers are under hosts/<host>/, hostrecords.go):
//
//	drain/<host>                   the reaper's drain request
//	protect/<host>                 scale-in protection
//	capacity/<role>                creates of the role fail for quota or capacity
//	roles/<role>/desired           the role's desired count (orchestrate scale,
//	                               the autoscaler)
//	roles/<role>/override          a desired count set by hand (orchestrate scale)
//	roles/<role>/scale_in/<host>   a host named for scale-in (orchestrate scale-in)
const (
	dirRoles     = "roles"
	dirDrain     = "drain"
	dirProtect   = "protect"
	dirCapacity  = "capacity"
	roleDesired  = "desired"
	roleOverride = "override"
	roleScaleIn  = "scale_in"
)

// DesiredKey is roles/<role>/desired under prefix.
func DesiredKey(prefix, role string) string { return schema.Join(prefix, dirRoles, role, roleDesired) }

// OverrideKey is roles/<role>/override under prefix.
func OverrideKey(prefix, role string) string {
	return schema.Join(prefix, dirRoles, role, roleOverride)
}

// ScaleInKey is roles/<role>/scale_in/<host> under prefix.
func ScaleInKey(prefix, role, host string) string {
	return schema.Join(prefix, dirRoles, role, roleScaleIn, host)
}

// DrainKey is drain/<host> under prefix.
func DrainKey(prefix, host string) string { return schema.Join(prefix, dirDrain, host) }

// ProtectKey is protect/<host> under prefix.
func ProtectKey(prefix, host string) string { return schema.Join(prefix, dirProtect, host) }

// CapacityKey is capacity/<role> under prefix.
func CapacityKey(prefix, role string) string { return schema.Join(prefix, dirCapacity, role) }

// SetDesired sets roles/<role>/desired.
func (s *Store) SetDesired(ctx context.Context, role string, n int) error {
	if err := schema.ValidName("role", role); err != nil {
		return &InputError{Err: err}
	}
	if n < 0 {
		return &InputError{Err: fmt.Errorf("desired count %d for role %s is negative", n, role)}
	}
	_, err := s.kv.Put(&api.KVPair{Key: DesiredKey(s.prefix, role), Value: []byte(strconv.Itoa(n))}, writeOpts(ctx))
	if err != nil {
		return fmt.Errorf("set desired count of %s: %w", role, err)
	}
	return nil
}

// Desired returns roles/<role>/desired; ok is false when it is not set.
func (s *Store) Desired(ctx context.Context, role string) (n int, ok bool, err error) {
	if err := schema.ValidName("role", role); err != nil {
		return 0, false, &InputError{Err: err}
	}
	k := DesiredKey(s.prefix, role)
	p, _, err := s.kv.Get(k, readOpts(ctx))
	if err != nil {
		return 0, false, fmt.Errorf("read %s: %w", k, err)
	}
	if p == nil {
		return 0, false, nil
	}
	n, err = parseDesired(p.Value)
	if err != nil {
		return 0, false, &InputError{Err: fmt.Errorf("%s: %w", k, err)}
	}
	return n, true, nil
}

// CapacityExhausted is the State of a CapacityRecord.
const CapacityExhausted = "exhausted"

// ErrNoDrain: the host has no drain request.
var ErrNoDrain = errors.New("no drain was requested for this host")

func newScaling() schema.Scaling {
	return schema.Scaling{Metrics: map[string]map[string]schema.MetricReport{}, Drains: map[string]schema.DrainRecord{},
		Protected: map[string]schema.Protection{}, Capacity: map[string]schema.CapacityRecord{}, Overrides: map[string]schema.Override{},
		ScaleIn: map[string]map[string]schema.ScaleInRequest{}, DesiredIndex: map[string]uint64{}}
}

// addScaling reads one key of the scaling part; parts is the key's path
// under the prefix. It reports whether the key was one of them.
func (snap *Snapshot) addScaling(p *api.KVPair, parts []string) bool {
	sc := &snap.Scaling
	switch {
	case parts[0] == dirDrain:
		var d schema.DrainRecord
		if len(parts) != 2 || schema.ValidName("host", parts[1]) != nil {
			snap.bad(p.Key, "not of the form drain/<host>")
		} else if err := schema.StrictJSON(p.Value, &d); err != nil || d.Requested.IsZero() {
			snap.bad(p.Key, "not a drain record the reaper wrote")
		} else {
			sc.Drains[parts[1]] = d
			if d.Answer != nil {
				// An answer inside the request: the older layout's.
				snap.OldLayout = append(snap.OldLayout, p.Key)
			}
		}
	case parts[0] == dirProtect:
		if len(parts) != 2 || schema.ValidName("host", parts[1]) != nil {
			snap.bad(p.Key, "not of the form protect/<host>")
			return true
		}
		var pr schema.Protection
		if err := schema.StrictJSON(p.Value, &pr); err != nil {
			// Whatever a protect key holds, it protects: a hand-written
			// value must not expose a host to scale-in.
			snap.bad(p.Key, "not a protection record (`orchestrate protect` writes one); the host is protected all the same")
			pr = schema.Protection{Reason: "hand-written value"}
		}
		sc.Protected[parts[1]] = pr
	case parts[0] == dirCapacity:
		var c schema.CapacityRecord
		if len(parts) != 2 || schema.ValidName("role", parts[1]) != nil {
			snap.bad(p.Key, "not of the form capacity/<role>")
		} else if err := schema.StrictJSON(p.Value, &c); err != nil {
			snap.bad(p.Key, "not a capacity record the reaper wrote")
		} else {
			sc.Capacity[parts[1]] = c
		}
	case parts[0] == dirRoles && len(parts) == 3 && parts[2] == roleDesired:
		snap.addDesired(p, parts[1])
		sc.DesiredIndex[parts[1]] = p.ModifyIndex
	case parts[0] == dirRoles && len(parts) == 3 && parts[2] == roleOverride:
		var o schema.Override
		if err := schema.StrictJSON(p.Value, &o); err != nil || o.Count < 0 {
			snap.bad(p.Key, "not an override record (`orchestrate scale` writes one)")
			return true
		}
		sc.Overrides[parts[1]] = o
	case parts[0] == dirRoles && len(parts) == 4 && parts[2] == roleScaleIn:
		var r schema.ScaleInRequest
		if schema.ValidName("host", parts[3]) != nil || schema.StrictJSON(p.Value, &r) != nil {
			snap.bad(p.Key, "not a scale-in request (`orchestrate scale-in` writes one)")
			return true
		}
		if sc.ScaleIn[parts[1]] == nil {
			sc.ScaleIn[parts[1]] = map[string]schema.ScaleInRequest{}
		}
		sc.ScaleIn[parts[1]][parts[3]] = r
	case parts[0] == dirRoles:
		// Another key under roles/: no one's, and nothing reads it.
	default:
		return false
	}
	return true
}

// ValidMetricValue checks a reported value: a finite number, not
// negative (a load is 0 or more; the reaper ignores any other report).
func ValidMetricValue(v float64) error {
	switch {
	case math.IsNaN(v) || math.IsInf(v, 0):
		return fmt.Errorf("metric value %v is not a finite number", v)
	case v < 0:
		return fmt.Errorf("metric value %v is negative: a load is 0 or more", v)
	}
	return nil
}

// ParseMetricValue reads a value as `orchestrate report-metric` takes it.
func ParseMetricValue(s string) (float64, error) {
	v, err := strconv.ParseFloat(s, 64)
	if err != nil {
		return 0, fmt.Errorf("metric value %q is not a number", s)
	}
	return v, ValidMetricValue(v)
}

// Scale sets roles/<role>/desired to n and records that it was set by hand
// (roles/<role>/override), in one transaction.
func (s *Store) Scale(ctx context.Context, role string, n int, o schema.Override) error {
	_, err := s.SwapScale(ctx, role, n, o, nil)
	return err
}

// ScaleBefore is a role's count as a scale found it, and replaced.
type ScaleBefore struct {
	// Desired is roles/<role>/desired, when HasDesired; Raw is its value
	// as stored (a value that is no count: HasDesired false, Raw not
	// empty).
	Desired    int
	HasDesired bool
	Raw        string
	// Override is the count set by hand that stood (nil: none, or a value
	// that is no override record); OverrideRaw its value as stored.
	Override    *schema.Override
	OverrideRaw []byte
}

// Unchanged reports whether a scale to n changes nothing: the count is n
// and stands set by hand already.
func (b ScaleBefore) Unchanged(n int) bool {
	return b.HasDesired && b.Desired == n && b.Override != nil && b.Override.Count == n
}

// SwapScale sets roles/<role>/desired to n and records that it was set by
// hand (roles/<role>/override), in one transaction that checks-and-sets
// both keys at the values it read, and returns them. guard, when given,
// sees the values read (at each attempt) and may refuse: a count confirmed
// against one value must not replace another. A scale that changes
// nothing (ScaleBefore.Unchanged) writes nothing.
func (s *Store) SwapScale(ctx context.Context, role string, n int, o schema.Override, guard func(ScaleBefore) error) (ScaleBefore, error) {
	if err := schema.ValidName("role", role); err != nil {
		return ScaleBefore{}, &InputError{Err: err}
	}
	if n < 0 {
		return ScaleBefore{}, &InputError{Err: fmt.Errorf("desired count %d for role %s is negative", n, role)}
	}
	o.Count = n
	data, _ := json.Marshal(o)
	var before ScaleBefore
	keys := []string{DesiredKey(s.prefix, role), OverrideKey(s.prefix, role)}
	_, err := s.swap(ctx, "set the desired count of "+role, keys, func(old []*api.KVPair) ([]newValue, error) {
		before = scaleBefore(old[0], old[1])
		if guard != nil {
			if err := guard(before); err != nil {
				return nil, err
			}
		}
		if before.Unchanged(n) {
			return []newValue{{}, {}}, nil
		}
		return []newValue{setTo([]byte(strconv.Itoa(n))), setTo(data)}, nil
	})
	return before, err
}

// scaleBefore reads a role's desired count and override pairs.
func scaleBefore(desired, override *api.KVPair) ScaleBefore {
	var b ScaleBefore
	if desired != nil {
		b.Raw = string(desired.Value)
		if n, err := parseDesired(desired.Value); err == nil {
			b.Desired, b.HasDesired = n, true
		}
	}
	if override != nil {
		b.OverrideRaw = override.Value
		var o schema.Override
		if json.Unmarshal(override.Value, &o) == nil {
			b.Override = &o
		}
	}
	return b
}

// ClearOverride removes roles/<role>/override: an autoscaled role's count
// is the autoscaler's again. It returns the value it removed (nil: there
// was none).
func (s *Store) ClearOverride(ctx context.Context, role string) ([]byte, error) {
	if err := schema.ValidName("role", role); err != nil {
		return nil, &InputError{Err: err}
	}
	k := OverrideKey(s.prefix, role)
	return s.swapOne(ctx, "delete "+k, k, nil)
}

// ScaleIn lowers role's desired count by len(hosts) and names those hosts
// to leave, in one transaction that also checks that none of them is
// protected or already named. base is the count to lower when the role
// has no desired count in Consul (ok false: none known). It returns the
// new count.
func (s *Store) ScaleIn(ctx context.Context, role string, hosts []string, req schema.ScaleInRequest, base func() (int, bool, error)) (int, error) {
	if err := schema.ValidName("role", role); err != nil {
		return 0, &InputError{Err: err}
	}
	seen := map[string]bool{}
	for _, h := range hosts {
		if err := schema.ValidName("host", h); err != nil {
			return 0, &InputError{Err: err}
		}
		if seen[h] {
			return 0, &InputError{Err: fmt.Errorf("host %s is named twice", h)}
		}
		seen[h] = true
	}
	data, _ := json.Marshal(req)
	for attempt := 0; attempt < maxAttempts; attempt++ {
		if err := backoff(ctx, attempt); err != nil {
			return 0, err
		}
		ops := api.KVTxnOps{}
		for _, h := range hosts {
			for _, k := range []string{ProtectKey(s.prefix, h), ScaleInKey(s.prefix, role, h)} {
				p, _, err := s.kv.Get(k, readOpts(ctx))
				if err != nil {
					return 0, fmt.Errorf("read %s: %w", k, err)
				}
				if p != nil && k == ProtectKey(s.prefix, h) {
					return 0, &InputError{Err: fmt.Errorf("host %s is protected from scale-in: `orchestrate unprotect %s` first", h, h)}
				}
				if p != nil {
					return 0, &InputError{Err: fmt.Errorf("host %s is already named for scale-in of %s", h, role)}
				}
				ops = append(ops, &api.KVTxnOp{Verb: api.KVCheckNotExists, Key: k})
			}
			ops = append(ops, &api.KVTxnOp{Verb: api.KVSet, Key: ScaleInKey(s.prefix, role, h), Value: data})
		}
		dk := DesiredKey(s.prefix, role)
		p, _, err := s.kv.Get(dk, readOpts(ctx))
		if err != nil {
			return 0, fmt.Errorf("read %s: %w", dk, err)
		}
		var cur int
		var index uint64
		if p != nil {
			if cur, err = parseDesired(p.Value); err != nil {
				return 0, &InputError{Err: fmt.Errorf("%s: %w", dk, err)}
			}
			index = p.ModifyIndex
		} else {
			n, ok, err := base()
			if err != nil {
				return 0, err
			}
			if !ok {
				return 0, &InputError{Err: fmt.Errorf("role %s has no desired count in Consul and no reaper report names one: `orchestrate scale %s N` first", role, role)}
			}
			cur = n
		}
		next := cur - len(hosts)
		if next < 0 {
			return 0, &InputError{Err: fmt.Errorf("role %s wants %d servers; %d cannot leave it", role, cur, len(hosts))}
		}
		ops = append(ops, &api.KVTxnOp{Verb: api.KVCAS, Key: dk, Index: index, Value: []byte(strconv.Itoa(next))})
		if len(ops) > maxTxnOps {
			return 0, &InputError{Err: fmt.Errorf("%d hosts are more than one transaction can name; name fewer at a time", len(hosts))}
		}
		ok, err := s.txn(ctx, ops, "scale in "+role)
		if err != nil {
			return 0, err
		}
		if ok {
			return next, nil
		}
	}
	return 0, fmt.Errorf("scale in %s: %w", role, ErrConflict)
}

// Protect exempts host from scale-in; it returns the protection record it
// replaced (nil: there was none).
func (s *Store) Protect(ctx context.Context, host string, p schema.Protection) ([]byte, error) {
	if err := schema.ValidName("host", host); err != nil {
		return nil, &InputError{Err: err}
	}
	k := ProtectKey(s.prefix, host)
	return s.swapJSON(ctx, "write "+k, k, p)
}

// Unprotect lifts host's scale-in protection; it returns the protection
// record it removed (nil: there was none).
func (s *Store) Unprotect(ctx context.Context, host string) ([]byte, error) {
	if err := schema.ValidName("host", host); err != nil {
		return nil, &InputError{Err: err}
	}
	k := ProtectKey(s.prefix, host)
	return s.swapOne(ctx, "delete "+k, k, nil)
}
