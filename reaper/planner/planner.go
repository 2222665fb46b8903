package planner

import (
	"fmt"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/jiocloud/orchestrate/internal/store/reaperkv"
	"github.com/jiocloud/orchestrate/reaper"
)

// planner is one call of Plan: the Input, indexed (snapshot); what the
// cycle may still spend (brakes); and the plan it builds (building). Each
// step of Plan reads the snapshot, asks the gate (gate.go), which reads
// the brakes, and adds to the plan.
type planner struct {
	in reaper.Input
	snapshot
	brakes
	building
}

// snapshot is the Input indexed once per plan, and what the plan learns
// of each server (its state, its part in a journal entry).
type snapshot struct {
	// byNode holds each Consul node's checks.
	byNode map[string][]reaper.Check
	// byID finds servers by Nova ID; byJournal by the journal entry ID in
	// their metadata (more than one until dedupe keeps one: a create that
	// succeeded after its caller gave up).
	byID      map[string]*reaper.Server
	byJournal map[string][]*reaper.Server
	// goneNames holds the names of deleted servers Nova still lists
	// (soft-deleted): not reused, but no member's.
	goneNames map[string]bool
	// oldNames holds the OldName of every journal entry; deleteAsked
	// those whose delete Nova accepted (their leaving the list is the
	// delete's doing).
	oldNames    map[string]bool
	deleteAsked map[string]bool
	// statesOf holds each server's state (by ID); inEntry the part a
	// server plays in a journal entry (StateNew, StateReplacing,
	// StateDeleting), which later steps of the plan update.
	statesOf map[string]reaper.ServerState
	inEntry  map[string]reaper.ServerState
	// serverless: Consul nodes with no server and no entry (nil: not yet
	// computed). Names taken during the plan are servers to be.
	serverless []string
	// hostLoad holds each host's own value of its role's metric, where
	// known.
	hostLoad map[string]map[string]float64
	// cooling holds the aborted-drain records whose cool-off goes on, by
	// host.
	cooling map[string]reaperkv.DrainAbortRecord
	// hookHeld holds the servers (by ID) whose on_launch hook waits: not
	// in service for their role yet.
	hookHeld map[string]bool
	// heldIDs holds the servers (by ID) held for a human this plan
	// (hold.go).
	heldIDs map[string]bool
	names
}

// names is what freeName knows of the server names in use.
type names struct {
	// used holds every server name taken: in Nova, by a journal entry, or
	// by a create of this plan.
	used map[string]bool
	// nextIndex and takenIndex: where freeName's search resumes per role,
	// and the indices of the role's name template in use.
	nextIndex  map[string]int
	takenIndex map[string]map[int]bool
}

// brakes are what the cycle may still spend.
type brakes struct {
	// budget is how many destructive actions are still allowed this hour.
	budget int
	// backoff: the project-wide quota backoff holds.
	backoff bool
	// creates counts the creates planned this cycle, for
	// max_creates_per_cycle.
	creates int
}

// building is the plan being built.
type building struct {
	plan *reaper.Plan
	// seq numbers the entries this plan makes.
	seq int
	// autoscaled holds this cycle's report of each autoscaled role.
	autoscaled map[string]*reaperkv.AutoscaleReport
	// refresh holds each role's instance refresh (see refresh.go).
	refresh map[string]*roleRefresh
}

// roleServers is one role's servers, split.
type roleServers struct {
	role    *reaper.Role
	all     []*reaper.Server
	free    []*reaper.Server // in no journal entry
	entries []*reaper.Entry
	// duplicates are servers made for one of the role's entries beside the
	// one the entry keeps.
	duplicates []*reaper.Server
	// vanished holds the role's server names that left the Nova list
	// less than absent_grace ago (by when they were last listed).
	vanished map[string]time.Time
	// validating: one of the role's servers reports validation, so a
	// server of the role serves only once validated.
	validating bool
	// standbys are the role's warm pool standbys in no entry (see
	// splitStandbys), oldest first; claims take them out during the plan.
	standbys []*reaper.Server
	// pool is the role's warm pool report (nil without a pool).
	pool *reaperkv.PoolReport
	// deadStrays are the role's dead stray nodes (see strays), found once
	// per plan by doubtLists.
	deadStrays []string
	// doubt says why the Nova list may be missing servers of the role
	// ("" when it is not in doubt): no server is created or destroyed for
	// what the list seems to say.
	doubt string
	// placed counts the servers this plan adds, by zone (placement.go).
	placed placed
	// repairing are the role's repair entries held for its scale-in:
	// the role is over its count, and their servers go first (repair.go).
	repairing []*reaper.Entry
	// held are the role's servers held for a human (hold.go): in no
	// count, never a victim.
	held []heldServer
}

// Plan decides what to do. It does no I/O: the same Input gives the same
// Plan. Its steps: index the checks, assign servers to roles, keep one
// server per journal entry ID, assign the entries, remember which servers
// left the list, classify every server, say which roles' part of the list
// is in doubt, decide the partition pause and the
// start gate, then for each role delete duplicate servers of an entry (and
// nothing else that cycle), or advance its entries, balance it and clean
// up dead nodes.
func Plan(in reaper.Input) *reaper.Plan {
	pl := newPlanner(in)
	pl.indexChecks()
	roles := pl.assignServers()
	pl.dedupe(roles)
	pl.assignEntries(roles)
	pl.splitStandbys(roles)
	pl.rememberListed(roles)
	pl.classifyAll(roles)
	pl.moved()
	pl.doubtLists(roles)
	pl.honourHolds(roles)
	pl.pause(roles)
	pl.startGate(roles)
	orphans := pl.orphans(roles)
	pl.holdFailures(roles)
	pl.refreshes(roles)
	short := pl.refillHeld(roles)
	pl.coolingOff()
	pl.sweepHooks()
	for _, p := range in.PoolFlushProblems {
		pl.block(planStep{op: reaperkv.PlanFlush}, held(reaperkv.HoldProblem, "%s", p), "%s: no flush carried out for it (`consul kv delete` it, or run orchestrate pool flush again)", p)
	}
	for _, rs := range roles {
		pl.autoscale(rs)
		var orphaned []reaperkv.HostMark
		if !pl.deleteDuplicates(rs) {
			for _, e := range rs.entries {
				pl.advance(rs, e)
			}
			pl.balance(rs)
			pl.deregisterDead(rs)
			pl.pool(rs, short)
			orphaned = pl.forgetOrphans(rs, orphans[rs.role.Name])
		}
		pl.finishRefresh(rs)
		v := pl.view(rs)
		silent := pl.silent(rs)
		v.SilentCount, v.OrphanedCount = len(silent), len(orphans[rs.role.Name])
		v.Silent, v.Orphaned = capMarks(silent), capMarks(orphaned)
		pl.plan.Roles = append(pl.plan.Roles, v)
	}
	pl.endHoldMaintenance()
	pl.inputDeadlines()
	return pl.plan
}

func newPlanner(in reaper.Input) *planner {
	pl := &planner{
		in: in,
		snapshot: snapshot{
			byNode:      make(map[string][]reaper.Check, len(in.Servers)),
			byID:        make(map[string]*reaper.Server, len(in.Servers)),
			byJournal:   map[string][]*reaper.Server{},
			goneNames:   map[string]bool{},
			oldNames:    map[string]bool{},
			deleteAsked: map[string]bool{},
			statesOf:    make(map[string]reaper.ServerState, len(in.Servers)),
			inEntry:     map[string]reaper.ServerState{},
			hostLoad:    map[string]map[string]float64{},
			hookHeld:    map[string]bool{},
			heldIDs:     map[string]bool{},
			names:       names{used: make(map[string]bool, len(in.Servers))},
		},
		brakes: brakes{
			backoff: in.Now.Before(in.BackoffUntil),
			budget:  in.Config.MaxActionsPerHour,
		},
		building: building{
			plan:       &reaper.Plan{Memory: reaper.NewMemory()},
			autoscaled: map[string]*reaperkv.AutoscaleReport{},
		},
	}
	pl.plan.Backoff = pl.backoff
	for id, m := range in.Memory.LastRepair {
		if in.Now.Sub(m.At) < repairMemory {
			pl.plan.Memory.LastRepair[id] = m
		}
	}
	hourAgo := in.Now.Add(-time.Hour)
	for _, t := range in.Destructive {
		if t.After(hourAgo) {
			pl.budget--
		}
	}
	return pl
}

// indexChecks groups the checks by node. Consul returns them grouped: each
// run is indexed as a subslice of the input, copied only when a node's
// checks are not contiguous.
func (pl *planner) indexChecks() {
	checks := pl.in.Checks
	for i := 0; i < len(checks); {
		j := i + 1
		for j < len(checks) && checks[j].Node == checks[i].Node {
			j++
		}
		node := checks[i].Node
		if prev, ok := pl.byNode[node]; ok {
			pl.byNode[node] = append(append([]reaper.Check(nil), prev...), checks[i:j]...)
		} else {
			pl.byNode[node] = checks[i:j:j]
		}
		i = j
	}
}

// assignServers gives each server to the role its metadata names, or the
// first whose name_regex matches; the rest are counted as unassigned.
func (pl *planner) assignServers() []*roleServers {
	roles := make([]*roleServers, len(pl.in.Config.Roles))
	byRole := make(map[string]*roleServers, len(roles))
	for i := range pl.in.Config.Roles {
		roles[i] = &roleServers{role: &pl.in.Config.Roles[i]}
		byRole[roles[i].role.Name] = roles[i]
	}
	for i := range pl.in.Servers {
		s := &pl.in.Servers[i]
		if s.Partial() {
			// Whose it is cannot be told: the pause holds every
			// destructive step until Nova answers whole.
			pl.plan.Partial++
			continue
		}
		if s.Gone() {
			// Deleted, kept by Nova until reclaimed: no member of its
			// role, and no evidence that a live server of that name is
			// listed (a truncated list may hide one), but its name is not
			// given to a new server.
			pl.goneNames[s.Name] = true
			continue
		}
		pl.used[s.Name] = true
		pl.plan.Memory.Listed[s.Name] = pl.in.Now
		pl.byID[s.ID] = s
		if j := s.Metadata[reaper.MetaJournal]; j != "" {
			pl.byJournal[j] = append(pl.byJournal[j], s)
		}
		var rs *roleServers
		if name, ok := s.Metadata[reaper.MetaRole]; ok {
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
			pl.plan.Unassigned++
			continue
		}
		rs.all = append(rs.all, s)
	}
	return roles
}

// assignEntries gives each journal entry, oldest first, to its role and
// records the part its servers play.
func (pl *planner) assignEntries(roles []*roleServers) {
	entries := append([]reaper.Entry(nil), pl.in.Journal...)
	sort.Slice(entries, func(i, j int) bool { return entries[i].Started.Before(entries[j].Started) })
	for i := range entries {
		e := &entries[i]
		if e.NewName != "" {
			pl.used[e.NewName] = true
		}
		if e.OldName != "" {
			pl.oldNames[e.OldName] = true
			if !e.DeleteAsked.IsZero() {
				pl.deleteAsked[e.OldName] = true
			}
		}
		if e.NewID != "" {
			pl.inEntry[e.NewID] = reaper.StateNew
		}
		// The server made for the entry is its own, not a free server of
		// the role, even when the list shows it but hides the one the
		// entry recorded: it would count twice and make the role look over
		// its count.
		if s := pl.createdFor(e.ID); s != nil {
			if _, ok := pl.inEntry[s.ID]; !ok {
				pl.inEntry[s.ID] = reaper.StateNew
			}
		}
		if e.OldID != "" {
			if e.Kind == reaperkv.KindRepair {
				pl.inEntry[e.OldID] = reaper.StateRepairing
			} else if e.Kind == reaperkv.KindDelete || e.Phase == reaperkv.PhaseDraining || e.Phase == reaperkv.PhaseTerminateHook || e.Phase == reaperkv.PhaseDeleting {
				pl.inEntry[e.OldID] = reaper.StateDeleting
			} else {
				pl.inEntry[e.OldID] = reaper.StateReplacing
			}
		}
		pl.launching(e)
		rs := findRole(roles, e.Role)
		if rs == nil {
			pl.block(entryStep(e, "", ""), held(reaperkv.HoldProblem, "role %q is not configured", e.Role), "journal entry %s names role %q, which is not configured: left alone", e.ID, e.Role)
			continue
		}
		rs.entries = append(rs.entries, e)
	}
}

// dedupe: when more than one server carries one journal entry ID (a
// create that succeeded after its caller gave up, listed only after a
// retry made another), one is kept: the one the entry recorded, else the
// first created. The others are their role's duplicates, deleted before
// anything else of the role, whether or not the entry is still open.
func (pl *planner) dedupe(roles []*roleServers) {
	roleOf := map[string]*roleServers{}
	for _, rs := range roles {
		for _, s := range rs.all {
			roleOf[s.ID] = rs
		}
	}
	recorded := map[string]string{}
	for _, e := range pl.in.Journal {
		recorded[e.ID] = e.NewID
	}
	for j, servers := range pl.byJournal {
		if len(servers) < 2 {
			continue
		}
		keep := servers[0]
		for _, s := range servers {
			if s.ID == recorded[j] || (keep.ID != recorded[j] && s.Created.Before(keep.Created)) {
				keep = s
			}
		}
		pl.byJournal[j] = []*reaper.Server{keep}
		for _, s := range servers {
			if s == keep {
				continue
			}
			pl.inEntry[s.ID] = reaper.StateDeleting
			if rs := roleOf[s.ID]; rs != nil {
				rs.duplicates = append(rs.duplicates, s)
			}
		}
	}
}

// createdFor returns the server made for journal entry id (the one dedupe
// kept), or nil.
func (sn *snapshot) createdFor(id string) *reaper.Server {
	if ss := sn.byJournal[id]; len(ss) > 0 {
		return ss[0]
	}
	return nil
}

func findRole(roles []*roleServers, name string) *roleServers {
	for _, rs := range roles {
		if rs.role.Name == name {
			return rs
		}
	}
	return nil
}

// classifyAll classifies every server and splits off those in no entry.
func (pl *planner) classifyAll(roles []*roleServers) {
	for _, rs := range roles {
		for _, s := range rs.all {
			rs.validating = rs.validating || pl.in.ReportingValidation[s.Name]
			pl.statesOf[s.ID] = pl.classify(rs.role, s)
			if _, ok := pl.inEntry[s.ID]; !ok {
				rs.free = append(rs.free, s)
			}
		}
	}
}

// pause decides the partition pause: too many servers of one role, or of
// the whole fleet, look unhealthy at once for dead machines to be the
// likely cause. Booting servers and servers an entry creates do not count.
func (pl *planner) pause(roles []*roleServers) {
	cfg := pl.in.Config
	if n := pl.plan.Partial; n > 0 {
		pl.plan.Paused = true
		pl.plan.PauseReason = fmt.Sprintf("Nova listed %d server(s) as partial records (status UNKNOWN, no name: a cell it cannot reach): the picture is incomplete, nothing is destroyed until it is whole", n)
		return
	}
	var fleetTotal, fleetBad int
	for _, rs := range roles {
		var total, bad int // standbys are no members: split off before
		for _, s := range rs.all {
			st := pl.statesOf[s.ID]
			if st == reaper.StateBooting || st == reaper.StateHeld || pl.inEntry[s.ID] == reaper.StateNew {
				// A held server is an operator's choice, no evidence
				// of a partition.
				continue
			}
			total++
			if st.Props().LooksUnhealthy {
				bad++
			}
		}
		fleetTotal += total
		fleetBad += bad
		if total >= cfg.PauseMinServers && float64(bad) > cfg.PauseRoleFraction*float64(total) && !pl.plan.Paused {
			pl.plan.Paused = true
			pl.plan.PauseReason = fmt.Sprintf("%d of %d servers of role %s look unhealthy (over %.0f%%): a partition or a Consul problem, not dead machines", bad, total, rs.role.Name, 100*cfg.PauseRoleFraction)
		}
	}
	if fleetTotal >= cfg.PauseMinServers && float64(fleetBad) > cfg.PauseFleetFraction*float64(fleetTotal) {
		pl.plan.Paused = true
		pl.plan.PauseReason = fmt.Sprintf("%d of %d servers look unhealthy (over %.0f%% of the fleet): a partition or a Consul problem, not dead machines", fleetBad, fleetTotal, 100*cfg.PauseFleetFraction)
	}
	pl.plan.Memory.Partitioned = pl.in.Memory.Partitioned
	if pl.plan.Paused {
		pl.plan.Memory.Partitioned = pl.in.Now
	}
}

// graceFrom is when a server's critical or absent time, remembered since
// since, starts to count: no earlier than the last cycle the partition
// pause held (Memory.Partitioned). Health seen during a partition says
// nothing of a machine.
func (pl *planner) graceFrom(since time.Time) time.Time {
	if p := pl.in.Memory.Partitioned; since.Before(p) {
		return p
	}
	return since
}

// startGate: a reaper that was never armed or disarmed arms itself once
// every role has its desired count healthy with validation success; until
// then it creates missing servers and destroys nothing. After a disarm (or
// a value in the armed key that is no arm record) only `orchestrate reaper
// arm` opens the gate again.
func (pl *planner) startGate(roles []*roleServers) {
	p := pl.plan
	p.Armed = pl.in.Armed
	switch {
	case p.Armed:
		return
	case pl.in.ArmProblem != "":
		p.NotArmedReason = "not armed: " + pl.in.ArmProblem + " (creates missing servers, destroys nothing)"
		return
	case pl.in.ArmKeyWritten:
		p.NotArmedReason = "not armed: disarmed; only `orchestrate reaper arm` opens the gate again (creates missing servers, destroys nothing)"
		return
	}
	var why []string
	for _, rs := range roles {
		want := pl.desired(rs.role)
		n := 0
		for _, s := range rs.all {
			if pl.statesOf[s.ID] == reaper.StateHealthy && pl.in.Validated[s.Name] && !pl.hookHeld[s.ID] {
				n++
			}
		}
		if n < want {
			why = append(why, fmt.Sprintf("%s has %d of %d servers healthy with validation success", rs.role.Name, n, want))
		}
	}
	if len(why) == 0 {
		p.ArmNow, p.Armed = true, true
		return
	}
	p.NotArmedReason = "not armed: " + strings.Join(why, "; ") + " (creates missing servers, destroys nothing; `orchestrate reaper arm` overrides)"
}

// since returns when name was first seen in a condition, from the last
// plan's memory of it (prev) or now, and remembers it for the next (next).
func (pl *planner) since(prev, next map[string]time.Time, name string) time.Time {
	t, ok := prev[name]
	if !ok {
		t = pl.in.Now
	}
	next[name] = t
	return t
}

func (pl *planner) desired(r *reaper.Role) int {
	if n, ok := pl.in.Desired[r.Name]; ok {
		return n
	}
	return r.Desired
}

func (pl *planner) add(op reaper.Op, e reaper.Entry, reason string) {
	// A server the reaper deletes is expected to leave the Nova list.
	switch op {
	case reaper.OpDelete:
		delete(pl.plan.Memory.Listed, e.OldName)
		pl.plan.Memory.Deleted[e.OldName] = pl.in.Now
	case reaper.OpRollback:
		delete(pl.plan.Memory.Listed, e.NewName)
		pl.plan.Memory.Deleted[e.NewName] = pl.in.Now
	}
	if op == reaper.OpCreate {
		pl.creates++
	}
	pl.plan.Actions = append(pl.plan.Actions, reaper.Action{Op: op, Entry: e, Reason: reason})
}

// planStep names a step of the plan for the report: what it does (a
// reaper.Op, or a reaperkv.Plan* name), to which role and host, and the
// rule that chose it.
type planStep struct {
	op, role, host, reason string
}

// entryStep is the step op of journal entry e, about host.
func entryStep(e *reaper.Entry, op reaper.Op, host string) planStep {
	return planStep{op: string(op), role: e.Role, host: host, reason: e.Reason}
}

// waiting is a hold no gate decides: a grace, a timeout or an answer runs.
func waiting(format string, args ...any) hold {
	return held(reaperkv.HoldWaiting, format, args...)
}

// block records why something the plan would do is not done: the line in
// the plan's Blocked, and the step, with the hold h, in its Held.
func (b *building) block(s planStep, h hold, format string, args ...any) {
	line := fmt.Sprintf(format, args...)
	b.plan.Blocked = append(b.plan.Blocked, line)
	b.plan.Held = append(b.plan.Held, reaperkv.PlanAction{Op: s.op, Role: s.role, Host: s.host, Reason: s.reason,
		Held: true, Why: h.why, WhyText: h.text, Text: line})
}

func (pl *planner) newEntry(r *reaper.Role, kind reaperkv.EntryKind, reason string) reaper.Entry {
	pl.seq++
	e := reaper.Entry{
		ID:      fmt.Sprintf("%s.%x.%d", r.Name, pl.in.Now.UnixNano(), pl.seq),
		Kind:    kind,
		Role:    r.Name,
		Reason:  reason,
		Mode:    r.ReplaceMode,
		Started: pl.in.Now,
		Updated: pl.in.Now,
	}
	if rr := pl.refresh[r.Name]; rr != nil && rr.spec != rr.configured {
		e.Spec = rr.spec // a rollback's: built from the spec before
	}
	return e
}

// freeName returns the role's lowest name free in Nova, the journal, the
// Consul catalog and the version and status records. The indices taken are parsed out of the used names
// once per role and plan (no name is built per candidate), and the search
// resumes where the last one ended.
func (pl *planner) freeName(r *reaper.Role) string {
	if pl.takenIndex == nil {
		pl.takenIndex = map[string]map[int]bool{}
		pl.nextIndex = map[string]int{}
	}
	taken, ok := pl.takenIndex[r.Name]
	if !ok {
		taken = map[int]bool{}
		mark := func(name string) {
			if mid, ok := r.TemplateIndex(name); ok {
				if n, err := strconv.Atoi(mid); err == nil {
					taken[n] = true
				}
			}
		}
		for name := range pl.used {
			mark(name)
		}
		for name := range pl.goneNames {
			mark(name)
		}
		// Nor the server of an open entry (draining, deleting): a create
		// after its delete in the same cycle would take its name while
		// the old node may still be in the catalog.
		for name := range pl.oldNames {
			mark(name)
		}
		// A name still held by a Consul node (a dead machine's, not yet
		// reaped) is not reused: the new machine would inherit its checks.
		for name := range pl.byNode {
			mark(name)
		}
		// Nor is a name with version or status records: the machine
		// would be reported at a version it never ran.
		for name := range pl.in.Recorded {
			mark(name)
		}
		// Nor the name of a server the reaper deleted, for
		// NameQuarantine after it left the list (its agent is a failed
		// serf member Consul will not let another address reclaim yet).
		for name := range pl.plan.Memory.Deleted {
			mark(name)
		}
		pl.takenIndex[r.Name] = taken
	}
	for n := max(pl.nextIndex[r.Name], 1); ; n++ {
		if taken[n] {
			continue
		}
		name := r.ServerName(n)
		_, node := pl.byNode[name]
		if _, deleted := pl.plan.Memory.Deleted[name]; pl.used[name] || pl.goneNames[name] || pl.oldNames[name] || node || pl.in.Recorded[name] || deleted {
			continue
		}
		pl.used[name], taken[n] = true, true
		pl.nextIndex[r.Name] = n + 1
		return name
	}
}

// view is a role's part of the report.
func (pl *planner) view(rs *roleServers) reaperkv.RoleReport {
	v := reaperkv.RoleReport{Name: rs.role.Name, Desired: pl.desired(rs.role), Count: len(rs.all), States: map[string]int{}, Autoscale: pl.autoscaled[rs.role.Name], Pool: rs.pool,
		DrainAborts: pl.roleAborts(rs.role.Name), Held: heldView(rs), MaxHeld: rs.role.HeldCap(), MinHealthy: rs.role.MinHealthy}
	if c, ok := pl.in.Scaling.Capacity[rs.role.Name]; ok {
		v.Capacity = &c
	}
	v.Spec, v.Refresh = pl.refresh[rs.role.Name].spec, pl.refreshView(rs)
	v.Placement = pl.placementView(rs)
	for _, s := range rs.all {
		switch s.Metadata[reaper.MetaSpec] {
		case v.Spec:
		case "":
			v.SpecUnknown++
		default:
			v.Drifted++
		}
		st := pl.statesOf[s.ID]
		if part, ok := pl.inEntry[s.ID]; ok {
			st = part
		}
		v.States[string(st)]++
		if pl.statesOf[s.ID].Serving() {
			v.Healthy++
		}
		if st != reaper.StateHealthy && len(v.Attention) < reaper.MaxAttention {
			v.Attention = append(v.Attention, reaperkv.ServerReport{Name: s.Name, ID: s.ID, State: string(st), Created: s.Created})
		}
		v.Members = append(v.Members, s.Name)
	}
	sort.Strings(v.Members)
	return v
}
