package reaper

import (
	"fmt"
	"time"

	"github.com/jiocloud/orchestrate/internal/store/reaperkv"
)

// A scale-in or a max-age retirement takes a server that serves out of
// its role; its drain handler may answer that the work could not move
// (instances that cannot be migrated, a Galera member that cannot leave
// cleanly), or not answer at all. Deleting it then destroys that work, so
// by default the drain is aborted instead, as cluster-autoscaler aborts a
// scale-down whose drain fails and an AWS lifecycle hook may answer
// ABANDON: the server leaves maintenance and stays, and is not chosen
// again for a scale-in or a max-age retirement for drain_cooloff. A
// replacement made for the server's health (unhealthy, unaccounted, Nova
// ERROR, suspect) deletes at the deadline whatever the answer: its
// replacement already serves, and removing the bad server is the point.

const (
	// defaultDrainCooloff: a drain fails because of something a person
	// or another system has to change (an instance pinned to its host, a
	// cluster that lost quorum); asking again within minutes would take
	// the host out of service for another drain_timeout, and spend
	// another of max_actions_per_hour, for the same answer. An hour is
	// the budget's own window: each refusing host costs at most one
	// destructive action per window.
	defaultDrainCooloff = time.Hour
	// maxDrainCooloff: a longer hold is a protection, which `orchestrate
	// protect` says openly.
	maxDrainCooloff = 30 * 24 * time.Hour
)

// validateDrainEnd fills in and checks on_drain_failure, on_drain_timeout
// and drain_cooloff.
func (r *Role) validateDrainEnd(field string) error {
	for _, f := range []struct {
		name string
		v    *string
	}{{"on_drain_failure", &r.OnDrainFailure}, {"on_drain_timeout", &r.OnDrainTimeout}} {
		switch *f.v {
		case "":
			*f.v = reaperkv.DrainAbort
		case reaperkv.DrainAbort, reaperkv.DrainDelete:
		default:
			return fmt.Errorf("%s.%s: want %s or %s, got %q", field, f.name, reaperkv.DrainAbort, reaperkv.DrainDelete, *f.v)
		}
	}
	if r.DrainCooloff == 0 {
		r.DrainCooloff = Duration(defaultDrainCooloff)
	}
	if r.DrainCooloff < 0 || r.DrainCooloff.D() > maxDrainCooloff {
		return fmt.Errorf("%s.drain_cooloff: must be a positive duration of at most %s (a longer hold is `orchestrate protect`), got %s", field, maxDrainCooloff, r.DrainCooloff.D())
	}
	return nil
}

// drainEnd says what ends entry e's drain on a failed answer and without
// an answer by its deadline: the role's settings for an abortable entry,
// delete for any other.
func (r *Role) DrainEnd(e *Entry) (onFailure, onTimeout string) {
	if !e.Abortable {
		return reaperkv.DrainDelete, reaperkv.DrainDelete
	}
	orAbort := func(v string) string {
		if v == reaperkv.DrainDelete {
			return v
		}
		return reaperkv.DrainAbort
	}
	return orAbort(r.OnDrainFailure), orAbort(r.OnDrainTimeout)
}

// cooloff is the role's drain_cooloff (its default when unset).
func (r *Role) Cooloff() time.Duration {
	if r.DrainCooloff <= 0 {
		return defaultDrainCooloff
	}
	return r.DrainCooloff.D()
}
