package reaper

import (
	"fmt"
	"hash/fnv"
	"sort"
	"strconv"
	"strings"
	"time"
)

// Journal entry kinds.
const (
	// KindCreate adds a server because the role is below its desired count.
	KindCreate = "create"
	// KindReplace replaces one server (unhealthy, unaccounted, expired).
	KindReplace = "replace"
	// KindDelete removes a surplus server (scale in).
	KindDelete = "delete"
)

// Journal entry phases: the step the entry is at. An entry is written in a
// phase before the cloud call that phase makes.
const (
	// PhaseCreating: about to create (or creating) NewName.
	PhaseCreating = "creating"
	// PhaseBooting: NewID exists; waiting for it to check in passing.
	PhaseBooting = "booting"
	// PhaseDraining: OldName is in maintenance mode until DrainUntil.
	PhaseDraining = "draining"
	// PhaseDeleting: about to delete (or deleting) OldID.
	PhaseDeleting = "deleting"
	// PhaseRollback: about to delete NewID, a replacement that failed.
	PhaseRollback = "rollback"
)

// Entry is one journal entry: an operation that spans cloud calls and
// cycles, persisted so another leader can finish or undo it.
type Entry struct {
	ID      string `json:"id"`
	Kind    string `json:"kind"`
	Role    string `json:"role"`
	Reason  string `json:"reason"`
	Mode    string `json:"mode,omitempty"`
	Phase   string `json:"phase"`
	NewName string `json:"new_name,omitempty"`
	NewID   string `json:"new_id,omitempty"`
	OldName string `json:"old_name,omitempty"`
	OldID   string `json:"old_id,omitempty"`
	// Started is when the entry was made; Updated its last phase change.
	Started    time.Time `json:"started"`
	Updated    time.Time `json:"updated"`
	DrainUntil time.Time `json:"drain_until,omitzero"`
	// Attempts counts create calls made for this entry.
	Attempts int    `json:"attempts,omitempty"`
	Error    string `json:"error,omitempty"`
}

// Check is one Consul health check, as the planner needs it.
type Check struct {
	Node    string
	CheckID string
	Name    string
	Status  string
}

// Consul check statuses the planner reads.
const (
	checkCritical = "critical"
	// maintNodeCheck is the check Consul uses for node maintenance mode.
	maintNodeCheck = "_node_maintenance"
	// maintServicePrefix starts service maintenance check IDs.
	maintServicePrefix = "_service_maintenance:"
)

// Input is everything one planning cycle looks at. It is read, never
// changed, by Plan.
type Input struct {
	Now    time.Time
	Config *Config
	// Servers is the one Nova list of this cycle.
	Servers []Server
	// Checks is the one Consul health query of this cycle (every check).
	Checks []Check
	// Desired holds <prefix>/roles/<role>/desired (overrides the config).
	Desired map[string]int
	// Journal holds the unfinished entries.
	Journal []Entry
	// Armed: the start gate is open (armed key present).
	Armed bool
	// Validated holds hosts whose validation status is success.
	Validated map[string]bool
	// CriticalSince is the previous plan's: when each node was first seen
	// with a counted check critical, without a passing cycle in between.
	CriticalSince map[string]time.Time
	// Destructive holds when recent destructive actions started.
	Destructive []time.Time
	// BackoffUntil: quota backoff (project-wide); no creates before it.
	BackoffUntil time.Time
	// RoleBackoff: per-role backoff after capacity ("No valid host") or
	// fatal create errors (a bad flavor or image); no creates of the role.
	RoleBackoff map[string]time.Time
}

// Op is one operation for the executor.
type Op string

// Operations.
const (
	// OpCreate writes Entry (phase creating) then creates NewName.
	OpCreate Op = "create"
	// OpAdopt records NewID, found by the server's journal metadata.
	OpAdopt Op = "adopt"
	// OpDrain puts OldName in maintenance mode and writes phase draining
	// (with the destructive-action budget, in one transaction).
	OpDrain Op = "drain"
	// OpMaintain re-asserts maintenance mode on a draining node.
	OpMaintain Op = "maintain"
	// OpDelete writes phase deleting, deletes OldID, waits until it is
	// gone, deregisters OldName from the catalog.
	OpDelete Op = "delete"
	// OpRollback deletes NewID (a failed replacement) and drops the entry.
	OpRollback Op = "rollback"
	// OpFinish drops a completed entry.
	OpFinish Op = "finish"
	// OpDeregister removes a dead node that has no server (no journal).
	OpDeregister Op = "deregister"
)

// Action is one step the executor takes. Entry is the entry as it should be
// written before the step's cloud call.
type Action struct {
	Op     Op     `json:"op"`
	Entry  Entry  `json:"entry"`
	Reason string `json:"reason"`
}

// String describes the action for logs and the state: op, role, server, reason.
func (a Action) String() string {
	target := a.Entry.OldName
	if a.Op == OpCreate || a.Op == OpAdopt || a.Op == OpRollback || target == "" {
		target = a.Entry.NewName
	}
	return fmt.Sprintf("%s %s %s (%s)", a.Op, a.Entry.Role, target, a.Reason)
}

// Server states, as the planner sees them.
const (
	StateHealthy     = "healthy"
	StateBooting     = "booting"
	StatePending     = "critical-in-grace"
	StateUnhealthy   = "unhealthy"
	StateUnaccounted = "unaccounted"
	StateError       = "error"
	StateMaintenance = "maintenance"
	StateExpired     = "expired"
	StateReplacing   = "replacing"
	StateNew         = "new"
	StateDeleting    = "deleting"
)

// ServerView is one server in a plan's report.
type ServerView struct {
	Name    string    `json:"name"`
	ID      string    `json:"id"`
	State   string    `json:"state"`
	Created time.Time `json:"created"`
}

// RoleView is one role in a plan's report.
type RoleView struct {
	Name    string         `json:"name"`
	Desired int            `json:"desired"`
	Count   int            `json:"count"`
	Healthy int            `json:"healthy"`
	States  map[string]int `json:"states"`
	// Attention lists servers that are not healthy (at most maxAttention).
	Attention []ServerView `json:"attention,omitempty"`
}

// maxAttention bounds the servers listed per role in the state key, which
// Consul limits to 512 KiB.
const maxAttention = 50

// Plan is the planner's answer.
type Plan struct {
	Actions []Action `json:"actions"`
	// Blocked lists what the reaper would do but a safety rule stops.
	Blocked []string `json:"blocked,omitempty"`
	// CriticalSince is the memory for the next cycle.
	CriticalSince map[string]time.Time `json:"-"`
	Roles         []RoleView           `json:"roles"`
	Paused        bool                 `json:"paused"`
	PauseReason   string               `json:"pause_reason,omitempty"`
	Armed         bool                 `json:"armed"`
	// ArmNow: the start gate's condition was met this cycle; the executor
	// records it so the reaper stays armed.
	ArmNow bool `json:"arm_now,omitempty"`
	// NotArmedReason says why the gate is still closed.
	NotArmedReason string `json:"not_armed_reason,omitempty"`
	Backoff        bool   `json:"backoff"`
	// Unassigned counts servers no role claims.
	Unassigned int `json:"unassigned"`
}

// planner holds one cycle's working state.
type planner struct {
	in       Input
	plan     *Plan
	byNode   map[string][]Check
	used     map[string]bool // server names taken
	budget   int             // destructive actions still allowed this hour
	seq      int
	backoff  bool
	inEntry  map[string]string // server ID -> role it plays in an entry (StateNew/...)
	byJID    map[string]*Server
	statesOf map[string]string // server ID -> state
	nextN    map[string]int    // role -> where freeName resumes
	taken    map[string]map[int]bool
	oldNames map[string]bool // OldName of every journal entry
	// serverless: Consul nodes with no server and no entry (nil: not yet
	// computed). Names taken during the plan are servers to be.
	serverless []string
}

// roleServers is one role's servers, split.
type roleServers struct {
	role    *Role
	all     []*Server
	free    []*Server // in no journal entry
	entries []*Entry
}

// Plan decides what to do. It does no I/O: the same Input gives the same Plan.
func (in Input) Plan() *Plan {
	p := &Plan{CriticalSince: make(map[string]time.Time, len(in.CriticalSince))}
	pl := &planner{
		in:       in,
		plan:     p,
		byNode:   make(map[string][]Check, len(in.Servers)),
		used:     make(map[string]bool, len(in.Servers)),
		inEntry:  map[string]string{},
		byJID:    map[string]*Server{},
		statesOf: make(map[string]string, len(in.Servers)),
		oldNames: map[string]bool{},
	}
	// Consul returns checks grouped by node: index each run as a subslice
	// of the input, copying only when a node's checks are not contiguous.
	for i := 0; i < len(in.Checks); {
		j := i + 1
		for j < len(in.Checks) && in.Checks[j].Node == in.Checks[i].Node {
			j++
		}
		node := in.Checks[i].Node
		if prev, ok := pl.byNode[node]; ok {
			pl.byNode[node] = append(append([]Check(nil), prev...), in.Checks[i:j]...)
		} else {
			pl.byNode[node] = in.Checks[i:j:j]
		}
		i = j
	}
	pl.backoff = in.Now.Before(in.BackoffUntil)
	p.Backoff = pl.backoff
	hourAgo := in.Now.Add(-time.Hour)
	pl.budget = in.Config.MaxActionsPerHour
	for _, t := range in.Destructive {
		if t.After(hourAgo) {
			pl.budget--
		}
	}

	// Assign servers to roles.
	roles := make([]*roleServers, len(in.Config.Roles))
	byRole := make(map[string]*roleServers, len(roles))
	for i := range in.Config.Roles {
		roles[i] = &roleServers{role: &in.Config.Roles[i]}
		byRole[roles[i].role.Name] = roles[i]
	}
	byID := make(map[string]*Server, len(in.Servers))
	for i := range in.Servers {
		s := &in.Servers[i]
		pl.used[s.Name] = true
		byID[s.ID] = s
		if j := s.Metadata[MetaJournal]; j != "" {
			pl.byJID[j] = s
		}
		var rs *roleServers
		if name, ok := s.Metadata[MetaRole]; ok {
			rs = byRole[name]
		} else {
			for _, r := range roles {
				if r.role.Matches(s) {
					rs = r
					break
				}
			}
		}
		if rs == nil {
			p.Unassigned++
			continue
		}
		rs.all = append(rs.all, s)
	}
	entries := append([]Entry(nil), in.Journal...)
	sort.Slice(entries, func(i, j int) bool { return entries[i].Started.Before(entries[j].Started) })
	for i := range entries {
		e := &entries[i]
		if e.NewName != "" {
			pl.used[e.NewName] = true
		}
		if e.OldName != "" {
			pl.oldNames[e.OldName] = true
		}
		if e.NewID != "" {
			pl.inEntry[e.NewID] = StateNew
		} else if s := pl.byJID[e.ID]; s != nil {
			pl.inEntry[s.ID] = StateNew
		}
		if e.OldID != "" {
			if e.Kind == KindDelete || e.Phase == PhaseDraining || e.Phase == PhaseDeleting {
				pl.inEntry[e.OldID] = StateDeleting
			} else {
				pl.inEntry[e.OldID] = StateReplacing
			}
		}
		if rs := byRole[e.Role]; rs != nil {
			rs.entries = append(rs.entries, e)
		} else {
			p.Blocked = append(p.Blocked, fmt.Sprintf("journal entry %s names role %q, which is not configured: left alone", e.ID, e.Role))
		}
	}

	// Classify every server; compute the partition pause.
	var fleetTotal, fleetBad int
	roleBad := map[string]bool{}
	for _, rs := range roles {
		var total, bad int
		for _, s := range rs.all {
			st := pl.classify(rs.role, s)
			pl.statesOf[s.ID] = st
			if _, ok := pl.inEntry[s.ID]; !ok {
				rs.free = append(rs.free, s)
			}
			if st == StateBooting || pl.inEntry[s.ID] == StateNew {
				continue
			}
			total++
			if looksUnhealthy(st) {
				bad++
			}
		}
		fleetTotal += total
		fleetBad += bad
		if total >= in.Config.PauseMinServers && float64(bad) > in.Config.PauseRoleFraction*float64(total) {
			roleBad[rs.role.Name] = true
			if !p.Paused {
				p.Paused = true
				p.PauseReason = fmt.Sprintf("%d of %d servers of role %s look unhealthy (over %.0f%%): a partition or a Consul problem, not dead machines", bad, total, rs.role.Name, 100*in.Config.PauseRoleFraction)
			}
		}
	}
	if fleetTotal >= in.Config.PauseMinServers && float64(fleetBad) > in.Config.PauseFleetFraction*float64(fleetTotal) {
		p.Paused = true
		p.PauseReason = fmt.Sprintf("%d of %d servers look unhealthy (over %.0f%% of the fleet): a partition or a Consul problem, not dead machines", fleetBad, fleetTotal, 100*in.Config.PauseFleetFraction)
	}

	// Start gate.
	p.Armed = in.Armed
	if !p.Armed {
		var why []string
		for _, rs := range roles {
			want := pl.desired(rs.role)
			n := 0
			for _, s := range rs.all {
				if pl.statesOf[s.ID] == StateHealthy && in.Validated[s.Name] {
					n++
				}
			}
			if n < want {
				why = append(why, fmt.Sprintf("%s has %d of %d servers healthy with validation success", rs.role.Name, n, want))
			}
		}
		if len(why) == 0 {
			p.ArmNow, p.Armed = true, true
		} else {
			p.NotArmedReason = "not armed: " + strings.Join(why, "; ") + " (creates missing servers, destroys nothing; `orchestrate reaper arm` overrides)"
		}
	}

	for _, rs := range roles {
		for _, e := range rs.entries {
			pl.advance(rs, e, byID)
		}
		pl.balance(rs)
		pl.deregisterDead(rs)
		p.Roles = append(p.Roles, pl.view(rs))
	}
	return p
}

// looksUnhealthy: the states a partition would also produce.
func looksUnhealthy(st string) bool {
	return st == StateUnhealthy || st == StatePending || st == StateUnaccounted
}

// backedOff: no creates for role now (quota, or the role's own backoff).
func (pl *planner) backedOff(role string) bool {
	return pl.backoff || pl.in.Now.Before(pl.in.RoleBackoff[role])
}

func (pl *planner) desired(r *Role) int {
	if n, ok := pl.in.Desired[r.Name]; ok {
		return n
	}
	return r.Desired
}

// health reads a node's counted checks.
func (pl *planner) health(r *Role, node string) (checkedIn, critical, maint bool) {
	for _, c := range pl.byNode[node] {
		if c.CheckID == maintNodeCheck || strings.HasPrefix(c.CheckID, maintServicePrefix) {
			maint = true
			continue
		}
		if len(r.Checks) > 0 && !contains(r.Checks, c.CheckID) && !contains(r.Checks, c.Name) {
			continue
		}
		checkedIn = true
		if c.Status == checkCritical {
			critical = true
		}
	}
	return checkedIn, critical, maint
}

func contains(list []string, s string) bool {
	for _, v := range list {
		if v == s {
			return true
		}
	}
	return false
}

// classify returns a server's state and records its critical-since time.
func (pl *planner) classify(r *Role, s *Server) string {
	now := pl.in.Now
	age := now.Sub(s.Created)
	if s.Status == StatusError {
		return StateError
	}
	checkedIn, critical, maint := pl.health(r, s.Name)
	if maint {
		return StateMaintenance
	}
	if !checkedIn {
		if age < r.BootTimeout.D() {
			return StateBooting
		}
		return StateUnaccounted
	}
	if critical {
		since, ok := pl.in.CriticalSince[s.Name]
		if !ok {
			since = now
		}
		pl.plan.CriticalSince[s.Name] = since
		// The critical grace starts no earlier than the end of the boot grace.
		if bootEnd := s.Created.Add(r.BootGrace.D()); since.Before(bootEnd) {
			since = bootEnd
		}
		if age < r.BootGrace.D() {
			return StateBooting
		}
		if now.Sub(since) >= r.CriticalGrace.D() {
			return StateUnhealthy
		}
		return StatePending
	}
	if r.MaxAge > 0 && !now.Before(expiry(r, s)) {
		return StateExpired
	}
	return StateHealthy
}

// expiry is when a server passes its max age: created + max_age minus a
// share of the jitter fixed by a hash of the server's ID, so a fleet built in
// one day is spread over the jitter window, and the same server always gets
// the same share.
func expiry(r *Role, s *Server) time.Time {
	h := fnv.New64a()
	h.Write([]byte(s.ID))
	frac := float64(h.Sum64()>>11) / float64(1<<53)
	return s.Created.Add(r.MaxAge.D() - time.Duration(frac*float64(r.MaxAgeJitter.D())))
}

// good: healthy for counting purposes (an expired server still serves).
func good(st string) bool { return st == StateHealthy || st == StateExpired }

func (pl *planner) add(op Op, e Entry, reason string) {
	pl.plan.Actions = append(pl.plan.Actions, Action{Op: op, Entry: e, Reason: reason})
}

func (pl *planner) block(format string, args ...any) {
	pl.plan.Blocked = append(pl.plan.Blocked, fmt.Sprintf(format, args...))
}

func (pl *planner) newEntry(r *Role, kind, reason string) Entry {
	pl.seq++
	return Entry{
		ID:      fmt.Sprintf("%s.%x.%d", r.Name, pl.in.Now.UnixNano(), pl.seq),
		Kind:    kind,
		Role:    r.Name,
		Reason:  reason,
		Mode:    r.ReplaceMode,
		Started: pl.in.Now,
		Updated: pl.in.Now,
	}
}

// freeName returns the role's lowest name free in Nova, the journal and
// the Consul catalog. The indices taken are parsed out of the used names
// once per role and plan (no name is built per candidate), and the search
// resumes where the last one ended.
func (pl *planner) freeName(r *Role) string {
	if pl.taken == nil {
		pl.taken = map[string]map[int]bool{}
		pl.nextN = map[string]int{}
	}
	taken, ok := pl.taken[r.Name]
	if !ok {
		taken = map[int]bool{}
		before, after, _ := strings.Cut(strings.ReplaceAll(r.Boot.NameTemplate, "{role}", r.Name), "{n}")
		mark := func(name string) {
			if mid, ok := strings.CutPrefix(name, before); ok {
				if mid, ok = strings.CutSuffix(mid, after); ok {
					if n, err := strconv.Atoi(mid); err == nil {
						taken[n] = true
					}
				}
			}
		}
		for name := range pl.used {
			mark(name)
		}
		// A name still held by a Consul node (a dead machine's, not yet
		// reaped) is not reused: the new machine would inherit its checks.
		for name := range pl.byNode {
			mark(name)
		}
		pl.taken[r.Name] = taken
	}
	for n := max(pl.nextN[r.Name], 1); ; n++ {
		if taken[n] {
			continue
		}
		name := r.ServerName(n)
		if _, node := pl.byNode[name]; pl.used[name] || node {
			continue
		}
		pl.used[name], taken[n] = true, true
		pl.nextN[r.Name] = n + 1
		return name
	}
}

// healthyCount counts the role's good servers not on their way out.
func (pl *planner) healthyCount(rs *roleServers) int {
	n := 0
	for _, s := range rs.all {
		if good(pl.statesOf[s.ID]) && pl.inEntry[s.ID] != StateDeleting {
			n++
		}
	}
	return n
}

// destroyGate says why a destructive step on victim (nil: none counted
// against health) may not start now, or "".
func (pl *planner) destroyGate(rs *roleServers, victim *Server) string {
	switch {
	case !pl.plan.Armed:
		return "not armed"
	case pl.plan.Paused:
		return "paused: " + pl.plan.PauseReason
	case pl.budget <= 0:
		return fmt.Sprintf("max_actions_per_hour (%d) reached", pl.in.Config.MaxActionsPerHour)
	}
	if victim != nil && good(pl.statesOf[victim.ID]) {
		h := pl.healthyCount(rs)
		if h <= 1 {
			return "it is the role's last healthy server"
		}
		if h-1 < rs.role.MinHealthy {
			return fmt.Sprintf("the role would go below min_healthy %d", rs.role.MinHealthy)
		}
	}
	return ""
}

// advance moves one journal entry forward.
func (pl *planner) advance(rs *roleServers, e *Entry, byID map[string]*Server) {
	now := pl.in.Now
	var newS, oldS *Server
	if e.NewID != "" {
		newS = byID[e.NewID]
	} else {
		newS = pl.byJID[e.ID]
	}
	if e.OldID != "" {
		oldS = byID[e.OldID]
	}
	next := *e
	next.Updated = now
	switch e.Phase {
	case PhaseCreating:
		if newS != nil {
			next.Phase, next.NewID = PhaseBooting, newS.ID
			pl.add(OpAdopt, next, "found the server this entry created")
			return
		}
		if e.Kind == KindReplace && e.Mode == ModeSurge && oldS != nil && e.Reason != StateExpired && pl.statesOf[oldS.ID] == StateHealthy {
			pl.add(OpFinish, next, e.OldName+" is healthy again; its replacement is not created")
			return
		}
		if pl.backedOff(e.Role) {
			pl.block("%s: create of %s waits for the backoff", e.ID, e.NewName)
			return
		}
		if e.Kind == KindReplace && e.Mode == ModeSurge && pl.plan.Paused {
			pl.block("%s: surge create of %s waits: paused", e.ID, e.NewName)
			return
		}
		pl.add(OpCreate, next, "retry create recorded in the journal")
	case PhaseBooting:
		switch {
		case newS == nil:
			pl.add(OpFinish, next, "the new server "+e.NewName+" is gone; the role is judged afresh")
		case newS.Status == StatusError:
			next.Phase = PhaseRollback
			pl.add(OpRollback, next, "the new server went to ERROR")
		case good(pl.statesOf[newS.ID]):
			if e.Kind != KindReplace || oldS == nil {
				pl.add(OpFinish, next, e.NewName+" checked in passing")
				return
			}
			if why := pl.destroyGate(rs, oldS); why != "" {
				pl.block("%s: drain of %s waits: %s", e.ID, e.OldName, why)
				return
			}
			pl.budget--
			next.Phase, next.DrainUntil = PhaseDraining, now.Add(pl.in.Config.DrainPeriod.D())
			// Counted as on its way out from now on, so later gates in this
			// plan (another entry's drain, a scale in) see the drop.
			pl.inEntry[oldS.ID] = StateDeleting
			pl.add(OpDrain, next, e.NewName+" checked in passing; draining "+e.OldName)
		case now.Sub(newS.Created) >= rs.role.BootTimeout.D():
			if e.Kind == KindCreate {
				// Left to the rules for unaccounted servers, which need the
				// start gate open.
				pl.add(OpFinish, next, e.NewName+" did not check in within boot_timeout; judged as unaccounted from now on")
				return
			}
			if pl.plan.Paused {
				pl.block("%s: rollback of %s waits: paused", e.ID, e.NewName)
				return
			}
			next.Phase = PhaseRollback
			next.Error = "did not check in passing within boot_timeout"
			pl.add(OpRollback, next, e.NewName+" did not check in passing within boot_timeout")
		}
	case PhaseDraining:
		if oldS == nil || !now.Before(e.DrainUntil) {
			if oldS != nil && pl.plan.Paused {
				pl.block("%s: delete of %s waits: paused", e.ID, e.OldName)
				pl.add(OpMaintain, next, "still draining (paused)")
				return
			}
			if oldS != nil && !pl.plan.Armed {
				// Disarmed while it drained: the gate says destroy nothing.
				pl.block("%s: delete of %s waits: not armed", e.ID, e.OldName)
				pl.add(OpMaintain, next, "still draining (not armed)")
				return
			}
			next.Phase = PhaseDeleting
			pl.add(OpDelete, next, "drain period over")
			return
		}
		pl.add(OpMaintain, next, "draining")
	case PhaseDeleting:
		pl.add(OpDelete, next, "finish the recorded delete")
	case PhaseRollback:
		pl.add(OpRollback, next, "finish the recorded rollback")
	default:
		pl.block("%s: unknown phase %q: left alone", e.ID, e.Phase)
	}
}

// strays returns the Consul nodes that look like servers of the role (by
// name template or name_regex) but are in neither the Nova list nor the
// journal: live ones (no critical check) and dead ones (every check
// critical), each sorted.
func (pl *planner) strays(r *Role) (live, dead []string) {
	if pl.serverless == nil {
		// Nodes with no server and no entry, found once per plan: usually
		// a handful among thousands.
		pl.serverless = []string{}
		for node := range pl.byNode {
			if !pl.used[node] && !pl.oldNames[node] {
				pl.serverless = append(pl.serverless, node)
			}
		}
	}
	before, after, _ := strings.Cut(strings.ReplaceAll(r.Boot.NameTemplate, "{role}", r.Name), "{n}")
	for _, node := range pl.serverless {
		checks := pl.byNode[node]
		like := false
		if mid, ok := strings.CutPrefix(node, before); ok {
			if mid, ok = strings.CutSuffix(mid, after); ok && mid != "" && strings.Trim(mid, "0123456789") == "" {
				like = true
			}
		}
		if !like && (r.nameRE == nil || !r.nameRE.MatchString(node)) {
			continue
		}
		critical := 0
		for _, c := range checks {
			if c.Status == checkCritical {
				critical++
			}
		}
		switch critical {
		case 0:
			live = append(live, node)
		case len(checks):
			dead = append(dead, node)
		}
	}
	sort.Strings(live)
	sort.Strings(dead)
	return live, dead
}

// ghosts counts live stray nodes: machines the Nova list does not show. A
// dead machine's node fails serfHealth, so a passing one means the cloud
// data is incomplete, and creating would double the role.
func (pl *planner) ghosts(r *Role) (int, string) {
	live, _ := pl.strays(r)
	if len(live) == 0 {
		return 0, ""
	}
	return len(live), live[0]
}

// deregisterDead plans the deregistration of dead stray nodes: machines
// gone from Nova (deleted by hand, or before the reaper ran) whose nodes
// stay in the catalog, every check critical, for longer than boot_timeout.
func (pl *planner) deregisterDead(rs *roleServers) {
	_, dead := pl.strays(rs.role)
	for _, node := range dead {
		since, ok := pl.in.CriticalSince[node]
		if !ok {
			since = pl.in.Now
		}
		pl.plan.CriticalSince[node] = since
		if pl.in.Now.Sub(since) < rs.role.BootTimeout.D() {
			continue
		}
		switch {
		case !pl.plan.Armed:
			pl.block("%s: deregistration of dead node %s (no server in Nova) waits: not armed", rs.role.Name, node)
			continue
		case pl.plan.Paused:
			pl.block("%s: deregistration of dead node %s (no server in Nova) waits: paused", rs.role.Name, node)
			continue
		}
		e := pl.newEntry(rs.role, KindDelete, "dead node without a server in Nova")
		e.OldName = node
		pl.add(OpDeregister, e, e.Reason)
	}
}

// inFlight counts the role's entries that replace or delete.
func inFlight(rs *roleServers) int {
	n := 0
	for _, e := range rs.entries {
		if e.Kind != KindCreate {
			n++
		}
	}
	return n
}

// victimRank orders scale-in victims: unaccounted, error, unhealthy,
// maintenance, critical-in-grace, then good servers oldest first; booting
// servers last. Never newest first.
func victimRank(st string) int {
	switch st {
	case StateUnaccounted:
		return 0
	case StateError:
		return 1
	case StateUnhealthy:
		return 2
	case StateMaintenance:
		return 3
	case StatePending:
		return 4
	case StateExpired, StateHealthy:
		return 5
	default:
		return 6
	}
}

// balance brings a role to its desired count and replaces bad servers.
func (pl *planner) balance(rs *roleServers) {
	r := rs.role
	want := pl.desired(r)
	count := len(rs.free)
	for _, e := range rs.entries {
		if e.Kind != KindDelete {
			count++
		}
	}
	flying := inFlight(rs)

	switch {
	case count < want:
		if n, example := pl.ghosts(r); n > 0 {
			pl.block("%s: %d below desired %d, but %d passing Consul node(s) named like its servers (e.g. %s) are missing from the Nova list: the list looks incomplete (wrong project or region?); no create", r.Name, want-count, want, n, example)
			return
		}
		for i := count; i < want; i++ {
			if pl.backedOff(r.Name) {
				pl.block("%s: %d below desired %d; creates wait for the backoff", r.Name, want-i, want)
				break
			}
			e := pl.newEntry(r, KindCreate, fmt.Sprintf("%d of desired %d", count, want))
			e.Phase, e.NewName = PhaseCreating, pl.freeName(r)
			pl.add(OpCreate, e, e.Reason)
		}
		return
	case count > want:
		victims := append([]*Server(nil), rs.free...)
		sort.SliceStable(victims, func(i, j int) bool {
			a, b := victimRank(pl.statesOf[victims[i].ID]), victimRank(pl.statesOf[victims[j].ID])
			if a != b {
				return a < b
			}
			return victims[i].Created.Before(victims[j].Created)
		})
		surplus := count - want
		for _, v := range victims {
			if surplus == 0 {
				break
			}
			if flying >= pl.in.Config.MaxInFlight {
				pl.block("%s: %d surplus server(s) wait: max_in_flight %d", r.Name, surplus, pl.in.Config.MaxInFlight)
				break
			}
			if why := pl.destroyGate(rs, v); why != "" {
				pl.block("%s: scale in of %s waits: %s", r.Name, v.Name, why)
				break
			}
			e := pl.newEntry(r, KindDelete, fmt.Sprintf("surplus (%s): %d over desired %d", pl.statesOf[v.ID], count-want, want))
			e.Phase, e.OldName, e.OldID = PhaseDraining, v.Name, v.ID
			e.DrainUntil = pl.in.Now.Add(pl.in.Config.DrainPeriod.D())
			pl.budget--
			pl.inEntry[v.ID] = StateDeleting
			pl.add(OpDrain, e, e.Reason)
			flying++
			surplus--
		}
		return
	}

	// At the desired count: replace bad servers, worst first.
	var bad []*Server
	for _, s := range rs.free {
		switch pl.statesOf[s.ID] {
		case StateUnaccounted, StateError, StateUnhealthy:
			bad = append(bad, s)
		}
	}
	sort.SliceStable(bad, func(i, j int) bool {
		a, b := victimRank(pl.statesOf[bad[i].ID]), victimRank(pl.statesOf[bad[j].ID])
		if a != b {
			return a < b
		}
		return bad[i].Created.Before(bad[j].Created)
	})
	for _, s := range bad {
		if flying >= pl.in.Config.MaxInFlight {
			pl.block("%s: replacement of %s waits: max_in_flight %d", r.Name, s.Name, pl.in.Config.MaxInFlight)
			return
		}
		if !pl.replace(rs, s, pl.statesOf[s.ID]) {
			return
		}
		flying++
	}
	if len(bad) > 0 || r.MaxAge == 0 || len(rs.entries) > 0 {
		return
	}
	// Max age: only when every server of the role is good, one at a time.
	var oldest *Server
	for _, s := range rs.free {
		st := pl.statesOf[s.ID]
		if !good(st) {
			return
		}
		if st == StateExpired && (oldest == nil || expiry(r, s).Before(expiry(r, oldest))) {
			oldest = s
		}
	}
	if oldest != nil {
		pl.replace(rs, oldest, StateExpired)
	}
}

// replace starts replacing s; false when a gate stopped it.
func (pl *planner) replace(rs *roleServers, s *Server, why string) bool {
	r := rs.role
	switch {
	case !pl.plan.Armed:
		pl.block("%s: replacement of %s (%s) waits: not armed", r.Name, s.Name, why)
		return false
	case pl.plan.Paused:
		pl.block("%s: replacement of %s (%s) waits: paused", r.Name, s.Name, why)
		return false
	case pl.backedOff(r.Name):
		pl.block("%s: replacement of %s (%s) waits for the backoff", r.Name, s.Name, why)
		return false
	case pl.budget <= 0:
		pl.block("%s: replacement of %s (%s) waits: max_actions_per_hour (%d) reached", r.Name, s.Name, why, pl.in.Config.MaxActionsPerHour)
		return false
	}
	e := pl.newEntry(r, KindReplace, why)
	e.OldName, e.OldID = s.Name, s.ID
	if r.ReplaceMode == ModeDeleteFirst {
		if gate := pl.destroyGate(rs, s); gate != "" {
			pl.block("%s: replacement of %s (%s) waits: %s", r.Name, s.Name, why, gate)
			return false
		}
		pl.budget--
		e.Phase, e.DrainUntil = PhaseDraining, pl.in.Now.Add(pl.in.Config.DrainPeriod.D())
		e.NewName = pl.freeName(r)
		pl.inEntry[s.ID] = StateDeleting
		pl.add(OpDrain, e, fmt.Sprintf("%s (delete-first)", why))
		return true
	}
	e.Phase, e.NewName = PhaseCreating, pl.freeName(r)
	pl.inEntry[s.ID] = StateReplacing
	pl.add(OpCreate, e, fmt.Sprintf("replace %s (%s)", s.Name, why))
	return true
}

func (pl *planner) view(rs *roleServers) RoleView {
	v := RoleView{Name: rs.role.Name, Desired: pl.desired(rs.role), Count: len(rs.all), States: map[string]int{}}
	for _, s := range rs.all {
		st := pl.statesOf[s.ID]
		if role, ok := pl.inEntry[s.ID]; ok {
			st = role
		}
		v.States[st]++
		if good(pl.statesOf[s.ID]) {
			v.Healthy++
		}
		if st != StateHealthy && len(v.Attention) < maxAttention {
			v.Attention = append(v.Attention, ServerView{Name: s.Name, ID: s.ID, State: st, Created: s.Created})
		}
	}
	return v
}
