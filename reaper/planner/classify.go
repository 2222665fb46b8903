package planner

import (
	"hash/fnv"
	"slices"
	"strings"
	"time"

	"github.com/jiocloud/orchestrate/reaper"
)

// nodeHealth is what a node's checks say, for one role.
type nodeHealth struct {
	// checkedIn: at least one of the role's own checks exists: a check the
	// role lists by name, or, when it lists none, a check of a service on
	// the node. An agent's own checks (serfHealth) say only that the agent
	// joined, not that Puppet made the machine serve.
	checkedIn bool
	// critical: one of the counted checks is critical.
	critical bool
	// maintenance: the node or one of its services is in maintenance.
	maintenance bool
}

// health reads a node's counted checks. ignoreDrain leaves out node
// maintenance, which is how the reaper drains a node: to see whether a
// draining node passes again.
func (pl *planner) health(r *reaper.Role, node string, ignoreDrain bool) nodeHealth {
	var h nodeHealth
	for _, c := range pl.byNode[node] {
		if (ignoreDrain && c.CheckID == reaper.MaintNodeCheck) || isHoldMaintenance(c) {
			// A hold's maintenance says nothing of the machine: a
			// held server is judged by its own checks (hold.go).
			continue
		}
		if c.CheckID == reaper.MaintNodeCheck || strings.HasPrefix(c.CheckID, reaper.MaintServicePrefix) {
			h.maintenance = true
			continue
		}
		if len(r.Checks) > 0 && !slices.Contains(r.Checks, c.CheckID) && !slices.Contains(r.Checks, c.Name) {
			continue
		}
		if len(r.Checks) > 0 || c.ServiceID != "" {
			h.checkedIn = true
		}
		if c.Status == reaper.CheckCritical {
			h.critical = true
		}
	}
	return h
}

// classify returns a server's state and records its critical-since time.
func (pl *planner) classify(r *reaper.Role, s *reaper.Server) reaper.ServerState {
	now := pl.in.Now
	age := now.Sub(s.Created)
	switch {
	case s.Status == reaper.StatusError:
		return pl.classifyError(r, s)
	case !reaper.KnownStatus[s.Status]:
		return reaper.StateUnknown
	}
	h := pl.health(r, s.Name, false)
	served := pl.served(s, h)
	switch {
	case h.maintenance:
		return reaper.StateMaintenance
	case !served && pl.provisionFailed(s) != "":
		// Its first boot gave up: it will not check in, however long
		// its boot_timeout.
		return reaper.StateProvisionFailed
	case r.ReplaceSuspect && pl.in.Suspect[s.Name]:
		// Counts towards the pause: a bad version making every server
		// suspect holds the replacements until an operator looks.
		return reaper.StateSuspect
	case !h.checkedIn && age < r.BootTimeout.D() && !served:
		pl.wakeAfter(s.Created, r.BootTimeout.D())
		return reaper.StateBooting
	case !h.checkedIn:
		return pl.classifyAbsent(r, s)
	case h.critical:
		return pl.classifyCritical(r, s, served)
	case r.MaxAge > 0 && !now.Before(expiry(r, s)):
		return reaper.StateExpired
	}
	if r.MaxAge > 0 {
		pl.wakeAt(expiry(r, s))
	}
	return reaper.StateHealthy
}

// served says whether server s has served: it validated the current
// version (durable: a new leader knows it too), or this reaper has seen it
// checked in with every counted check passing (remembered by Nova ID from
// plan to plan while it is listed).
func (pl *planner) served(s *reaper.Server, h nodeHealth) bool {
	// By Nova ID: a replacement may get the name of the server it replaced.
	if t, ok := pl.in.Memory.Served[s.ID]; ok {
		pl.plan.Memory.Served[s.ID] = t
		return true
	}
	if h.checkedIn && !h.critical && !h.maintenance {
		pl.plan.Memory.Served[s.ID] = pl.in.Now
		return true
	}
	return pl.in.Validated[s.Name]
}

// provisionSkew is how much earlier than Nova's creation time a failed
// provisioned record may be dated and still count as this server's: the
// node stamps it by its own clock, which may run behind the cloud's. A
// record older than that is an earlier server's of the same name (a
// server built by hand under a used name), never this one's.
const provisionSkew = 10 * time.Minute

// provisionFailed is the failing step of server s's first boot, from its
// own failed provisioned record; "" when it has none that counts.
func (pl *planner) provisionFailed(s *reaper.Server) string {
	f, ok := pl.in.ProvisionFailed[s.Name]
	if !ok || f.Time.Before(s.Created.Add(-provisionSkew)) {
		return ""
	}
	if f.Detail == "" {
		return "no step named"
	}
	return f.Detail
}

// classifyCritical is the state of a server with a counted check critical.
// One that never served: booting within the boot grace, then
// critical-in-grace until the critical grace (which starts no earlier
// than the boot grace ends) is over, then unhealthy. One that served has
// no boot grace left: a machine that dies minutes after it first served
// is replaced after critical_grace, as an old one is.
func (pl *planner) classifyCritical(r *reaper.Role, s *reaper.Server, served bool) reaper.ServerState {
	now := pl.in.Now
	since := pl.graceFrom(pl.since(pl.in.Memory.Critical, pl.plan.Memory.Critical, s.Name))
	if bootEnd := s.Created.Add(r.BootGrace.D()); since.Before(bootEnd) && !served {
		since = bootEnd
	}
	switch {
	case now.Sub(s.Created) < r.BootGrace.D() && !served:
		pl.wakeAfter(s.Created, r.BootGrace.D())
		return reaper.StateBooting
	case now.Sub(since) >= r.CriticalGrace.D():
		return reaper.StateUnhealthy
	}
	pl.wakeAfter(since, r.CriticalGrace.D())
	return reaper.StateCriticalInGrace
}

// classifyError is the state of a server Nova reports in ERROR. One whose
// node passes its counted checks still serves (Nova's state can be stale,
// after a failed resize or migration): error-in-grace until the ERROR has
// lasted error_grace, then error. One whose checks fail, or that never
// checked in, is error at once.
func (pl *planner) classifyError(r *reaper.Role, s *reaper.Server) reaper.ServerState {
	h := pl.health(r, s.Name, false)
	if !h.checkedIn || h.critical || h.maintenance {
		return reaper.StateError
	}
	since := pl.since(pl.in.Memory.Error, pl.plan.Memory.Error, s.Name)
	if pl.in.Now.Sub(since) >= r.ErrorGrace.D() {
		return reaper.StateError
	}
	pl.wakeAfter(since, r.ErrorGrace.D())
	return reaper.StateErrorInGrace
}

// classifyAbsent is the state of a booted server with no node or counted
// check: absent-in-grace until it has been so for absent_grace without a
// break, then unaccounted. A node that re-registers after a blip (an agent
// restart, a wiped data dir) is never replaced for it.
func (pl *planner) classifyAbsent(r *reaper.Role, s *reaper.Server) reaper.ServerState {
	now := pl.in.Now
	since := pl.graceFrom(pl.since(pl.in.Memory.Absent, pl.plan.Memory.Absent, s.Name))
	if now.Sub(since) >= r.AbsentGrace.D() {
		return reaper.StateUnaccounted
	}
	pl.wakeAfter(since, r.AbsentGrace.D())
	return reaper.StateAbsentInGrace
}

// expiry is when a server passes its max age: created + max_age minus a
// share of the jitter fixed by a hash of the server's ID, so a fleet built in
// one day is spread over the jitter window, and the same server always gets
// the same share.
func expiry(r *reaper.Role, s *reaper.Server) time.Time {
	h := fnv.New64a()
	h.Write([]byte(s.ID))
	// The top 53 bits of the hash as a fraction in [0, 1), exact in a float64.
	frac := float64(h.Sum64()>>11) / float64(1<<53)
	return s.Created.Add(r.MaxAge.D() - time.Duration(frac*float64(r.MaxAgeJitter.D())))
}
