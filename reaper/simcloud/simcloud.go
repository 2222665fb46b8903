// Package simcloud is an in-memory compute cloud for the reaper's tests and
// the demo: servers go from BUILD to ACTIVE after a boot delay, a quota can
// be set, and a hook can play the booted machine (register it in Consul).
// It is a simulated provider, not a mock: it keeps real state and enforces
// the same rules the reaper relies on (quota, not found, metadata).
package simcloud

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sort"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hashicorp/consul/api"

	"github.com/jiocloud/orchestrate/reaper"
)

// Cloud is the simulated provider.
type Cloud struct {
	// BootDelay is how long a server stays in BUILD.
	BootDelay time.Duration
	// DeleteDelay is how long a deleted server stays listed (as Nova
	// deletes asynchronously: about half a second for its fake driver);
	// OnDelete is called when it goes.
	DeleteDelay time.Duration
	// OnActive is called once per server when it becomes ACTIVE, outside
	// the lock (e.g. to register the machine's Consul node).
	OnActive func(s reaper.Server)
	// OnDelete is called when a server is deleted.
	OnDelete func(s reaper.Server)
	// RebootDelay and RebuildDelay are how long a reboot (HARD_REBOOT)
	// and a rebuild (REBUILD) take; OnReboot and OnRebuild are called
	// when one ends, outside the lock (repair.go).
	RebootDelay, RebuildDelay time.Duration
	OnReboot, OnRebuild       func(s reaper.Server)
	// OnStop and OnStart are called when a server is stopped (its
	// machine's agent leaves) or started again (it rejoins), outside the
	// lock.
	OnStop, OnStart func(s reaper.Server)
	// Now is the clock.
	Now func() time.Time

	// Lists, Gets, Creates and Deletes count calls.
	Lists, Gets, Creates, Deletes atomic.Int64
	// MetaUnsets counts UnsetMetadata calls; Stops and Starts those.
	MetaUnsets, Stops, Starts atomic.Int64
	// Reboots and Rebuilds count those calls.
	Reboots, Rebuilds atomic.Int64

	// mu guards the fields below.
	mu       sync.Mutex
	servers  map[string]*reaper.Server
	active   map[string]bool
	seq      int
	quota    int
	failNew  error
	failList error
	// lateN creates still to answer with a timeout although they made
	// the server, which stays out of List and Get for lateAfter.
	lateN       int
	lateAfter   time.Duration
	hiddenUntil map[string]time.Time
	// truncateN lists still to leave out every third server; failDeleteN
	// deletes still to refuse with failDelete.
	truncateN   int
	failDeleteN int
	failDelete  error
	// stuckDeleteN deletes still to accept without deleting;
	// softDeleteN deletes still to carry out as soft deletes.
	stuckDeleteN int
	softDeleteN  int
	// partial holds the IDs of servers listed as partial records.
	partial map[string]bool
	// goneAt holds when each server whose delete was accepted goes.
	goneAt map[string]time.Time
	// userData holds the user data each server was created with, by name
	// (the last create of that name).
	userData map[string][]byte
	// zones are the cloud's availability zones (empty: any zone asked
	// for exists); refused those whose creates go to ERROR with Nova's
	// "No valid host" fault. groups are the server groups, by ID.
	zones   []string
	refused map[string]bool
	groups  map[string]*reaper.ServerGroup
	// images holds the image each server was built or rebuilt from, by
	// ID; repairs the reboots and rebuilds under way. refuseRepairN
	// reboots and rebuilds still to refuse with refuseRepair;
	// breakRebuildN rebuilds still to end in ERROR.
	images            map[string]string
	repairs           map[string]repairing
	refuseRepairN     int
	refuseRepair      error
	breakRebuildN     int
	breakRebuildFault string
}

var _ reaper.Cloud = (*Cloud)(nil)

// New returns an empty cloud with no quota.
func New() *Cloud {
	return &Cloud{Now: time.Now, servers: map[string]*reaper.Server{}, active: map[string]bool{}, hiddenUntil: map[string]time.Time{}, partial: map[string]bool{}, goneAt: map[string]time.Time{}, userData: map[string][]byte{},
		refused: map[string]bool{}, groups: map[string]*reaper.ServerGroup{}, images: map[string]string{}, repairs: map[string]repairing{}}
}

// SetQuota limits the number of servers (0: no limit).
func (c *Cloud) SetQuota(n int) {
	c.mu.Lock()
	c.quota = n
	c.mu.Unlock()
}

// FailCreates makes every create fail with err until called with nil.
func (c *Cloud) FailCreates(err error) {
	c.mu.Lock()
	c.failNew = err
	c.mu.Unlock()
}

// FailLists makes every list fail with err until called with nil.
func (c *Cloud) FailLists(err error) {
	c.mu.Lock()
	c.failList = err
	c.mu.Unlock()
}

// Add puts a server in the cloud directly (already ACTIVE), as if made
// before the reaper ran; OnActive is not called.
func (c *Cloud) Add(s reaper.Server) reaper.Server {
	c.mu.Lock()
	defer c.mu.Unlock()
	if s.ID == "" {
		c.seq++
		s.ID = fmt.Sprintf("sim-%04d", c.seq)
	}
	if s.Status == "" {
		s.Status = reaper.StatusActive
	}
	if s.Created.IsZero() {
		s.Created = c.Now()
	}
	c.servers[s.ID] = &s
	c.active[s.ID] = true
	return s
}

// LateCreates makes the next n creates answer with a timeout although
// they made the server, which shows in List and Get only visibleAfter
// later: a create Nova finished after its caller gave up.
func (c *Cloud) LateCreates(n int, visibleAfter time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.lateN, c.lateAfter = n, visibleAfter
}

// TruncateLists makes the next n lists leave out every third server, as a
// Nova with an unreachable cell (or a bug) answers part of the truth.
func (c *Cloud) TruncateLists(n int) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.truncateN = n
}

// FailDeletes makes the next n deletes fail with err (a 409 of a locked
// server, say), without deleting.
func (c *Cloud) FailDeletes(n int, err error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.failDeleteN, c.failDelete = n, err
}

// StuckDeletes makes the next n deletes succeed without deleting: Nova
// accepted them, and the server stays as it was (a stuck task).
func (c *Cloud) StuckDeletes(n int) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.stuckDeleteN = n
}

// SoftDeletes makes the next n deletes soft deletes: the server stays,
// listed in status SOFT_DELETED, as in a cloud with
// reclaim_instance_interval set.
func (c *Cloud) SoftDeletes(n int) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.softDeleteN = n
}

// SetPartial makes List and Get return every server named name as a
// partial record (its ID, status UNKNOWN, its creation time; no name, no
// metadata), as Nova at microversion 2.69 or later does for a server in a
// cell it cannot reach, or whole again; false when there is no such
// server.
func (c *Cloud) SetPartial(name string, partial bool) bool {
	return c.eachNamed(name, func(id string, _ *reaper.Server) { c.partial[id] = partial })
}

// view is how List and Get show a server: whole, or a partial record.
func (c *Cloud) view(s *reaper.Server) reaper.Server {
	if c.partial[s.ID] {
		return reaper.Server{ID: s.ID, Status: reaper.StatusUnknown, Created: s.Created}
	}
	return copyServer(s)
}

// hidden reports whether a late create's server is still out of sight.
func (c *Cloud) hidden(id string) bool {
	until, ok := c.hiddenUntil[id]
	return ok && c.Now().Before(until)
}

// SetStatus sets the Nova status of every server named name (as a failed
// resize or migration leaves a server in ERROR); false when there is none.
func (c *Cloud) SetStatus(name, status string) bool {
	return c.eachNamed(name, func(_ string, s *reaper.Server) { s.Status = status })
}

// FailBoot puts every server named name in ERROR with Nova's fault
// message, as a scheduling failure does to a server in BUILD; false when
// there is none.
func (c *Cloud) FailBoot(name, fault string) bool {
	return c.eachNamed(name, func(_ string, s *reaper.Server) { s.Status, s.Fault = reaper.StatusError, fault })
}

// eachNamed applies f, under the lock, to every server named name (two
// share a name when a create made a late second one); false when there is
// none.
func (c *Cloud) eachNamed(name string, f func(id string, s *reaper.Server)) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	found := false
	for id, s := range c.servers {
		if s.Name == name {
			f(id, s)
			found = true
		}
	}
	return found
}

// Servers returns every server, sorted by name.
func (c *Cloud) Servers() []reaper.Server {
	c.mu.Lock()
	defer c.mu.Unlock()
	out := make([]reaper.Server, 0, len(c.servers))
	for _, s := range c.servers {
		out = append(out, copyServer(s))
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out
}

func copyServer(s *reaper.Server) reaper.Server {
	out := *s
	out.Metadata = make(map[string]string, len(s.Metadata))
	for k, v := range s.Metadata {
		out.Metadata[k] = v
	}
	return out
}

// advance moves servers whose boot delay passed to ACTIVE, and removes
// those whose delete delay passed; it returns both, for OnActive and
// OnDelete.
func (c *Cloud) advance() (became, gone []reaper.Server) {
	now := c.Now()
	for id, s := range c.servers {
		if !c.active[id] && s.Status == reaper.StatusBuild && now.Sub(s.Created) >= c.BootDelay {
			s.Status = reaper.StatusActive
			c.active[id] = true
			became = append(became, copyServer(s))
		}
	}
	for id, at := range c.goneAt {
		if !now.Before(at) {
			gone = append(gone, c.remove(id))
		}
	}
	return became, gone
}

// UserData returns the user data the last server named name was created
// with (nil when none was).
func (c *Cloud) UserData(name string) []byte {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]byte(nil), c.userData[name]...)
}

// Vanish deletes the servers named name at once, as an operator's delete
// outside the reaper does; OnDelete is called for each.
func (c *Cloud) Vanish(name string) bool {
	c.mu.Lock()
	var gone []reaper.Server
	for id, s := range c.servers {
		if s.Name == name {
			gone = append(gone, c.remove(id))
		}
	}
	c.mu.Unlock()
	c.fire(nil, gone)
	return len(gone) > 0
}

// remove drops server id at once and returns it. Caller holds mu.
func (c *Cloud) remove(id string) reaper.Server {
	out := copyServer(c.servers[id])
	for _, g := range c.groups {
		g.Members = slices.DeleteFunc(g.Members, func(m string) bool { return m == id })
	}
	delete(c.servers, id)
	delete(c.active, id)
	delete(c.partial, id)
	delete(c.goneAt, id)
	delete(c.images, id)
	delete(c.repairs, id)
	return out
}

func (c *Cloud) fire(became, gone []reaper.Server) {
	if c.OnActive != nil {
		for _, s := range became {
			c.OnActive(s)
		}
	}
	if c.OnDelete != nil {
		for _, s := range gone {
			c.OnDelete(s)
		}
	}
}

// List returns every server.
func (c *Cloud) List(ctx context.Context) ([]reaper.Server, error) {
	c.Lists.Add(1)
	if err := ctx.Err(); err != nil {
		return nil, &reaper.CloudError{Class: reaper.Transient, Op: "list servers", Err: err}
	}
	c.mu.Lock()
	if c.failList != nil {
		err := c.failList
		c.mu.Unlock()
		return nil, err
	}
	became, gone := c.advance()
	rebooted, rebuilt := c.advanceRepairs()
	out := make([]reaper.Server, 0, len(c.servers))
	for id, s := range c.servers {
		if !c.hidden(id) {
			out = append(out, c.view(s))
		}
	}
	if c.truncateN > 0 {
		c.truncateN--
		sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
		kept := out[:0]
		for i, s := range out {
			if i%3 != 2 {
				kept = append(kept, s)
			}
		}
		out = kept
	}
	c.mu.Unlock()
	c.fire(became, gone)
	c.fireRepairs(rebooted, rebuilt)
	return out, nil
}

// Get returns one server.
func (c *Cloud) Get(ctx context.Context, id string) (reaper.Server, error) {
	c.Gets.Add(1)
	if err := ctx.Err(); err != nil {
		return reaper.Server{}, &reaper.CloudError{Class: reaper.Transient, Op: "get server", Err: err}
	}
	c.mu.Lock()
	became, gone := c.advance()
	rebooted, rebuilt := c.advanceRepairs()
	s, ok := c.servers[id]
	ok = ok && !c.hidden(id)
	var out reaper.Server
	if ok {
		out = c.view(s)
	}
	c.mu.Unlock()
	c.fire(became, gone)
	c.fireRepairs(rebooted, rebuilt)
	if !ok {
		return reaper.Server{}, &reaper.CloudError{Class: reaper.NotFound, Op: "get server " + id, Err: errors.New("404 not found")}
	}
	return out, nil
}

// Create makes a server in BUILD.
func (c *Cloud) Create(ctx context.Context, req reaper.CreateRequest) (reaper.Server, error) {
	c.Creates.Add(1)
	if err := ctx.Err(); err != nil {
		return reaper.Server{}, &reaper.CloudError{Class: reaper.Transient, Op: "create server", Err: err}
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.failNew != nil {
		return reaper.Server{}, c.failNew
	}
	if c.quota > 0 && len(c.servers) >= c.quota {
		return reaper.Server{}, &reaper.CloudError{Class: reaper.Quota, Op: "create server " + req.Name,
			Err: fmt.Errorf("403 Quota exceeded for instances: Requested 1, but already used %d of %d instances", len(c.servers), c.quota)}
	}
	zone, err := c.zoneFor(req)
	if err != nil {
		return reaper.Server{}, err
	}
	g, ok := c.groups[req.ServerGroup]
	if req.ServerGroup != "" && !ok {
		return reaper.Server{}, &reaper.CloudError{Class: reaper.Fatal, Op: "create server " + req.Name,
			Err: fmt.Errorf("400 Invalid server group %s: not found", req.ServerGroup)}
	}
	c.seq++
	s := &reaper.Server{ID: fmt.Sprintf("sim-%04d", c.seq), Name: req.Name, Status: reaper.StatusBuild, Created: c.Now(), Metadata: map[string]string{}, Zone: zone}
	for k, v := range req.Metadata {
		s.Metadata[k] = v
	}
	if c.refused[zone] {
		// As Nova: the create is accepted, the scheduler finds no host.
		s.Status, s.Fault = reaper.StatusError, NoValidHost
	}
	if g != nil {
		g.Members = append(g.Members, s.ID)
	}
	c.servers[s.ID] = s
	if req.Role != nil {
		c.images[s.ID] = req.Role.Boot.Image
	}
	c.userData[s.Name] = append([]byte(nil), req.UserData...)
	if c.lateN > 0 {
		c.lateN--
		c.hiddenUntil[s.ID] = c.Now().Add(c.lateAfter)
		return reaper.Server{}, &reaper.CloudError{Class: reaper.Transient, Op: "create server " + req.Name, Err: context.DeadlineExceeded}
	}
	return copyServer(s), nil
}

// Delete removes a server: at once, or after DeleteDelay (listed until
// then, as Nova lists a server it is deleting).
func (c *Cloud) Delete(ctx context.Context, id string) error {
	c.Deletes.Add(1)
	if err := ctx.Err(); err != nil {
		return &reaper.CloudError{Class: reaper.Transient, Op: "delete server", Err: err}
	}
	c.mu.Lock()
	if c.failDeleteN > 0 {
		c.failDeleteN--
		err := c.failDelete
		c.mu.Unlock()
		return err
	}
	s, ok := c.servers[id]
	switch {
	case ok && c.stuckDeleteN > 0:
		c.stuckDeleteN--
		c.mu.Unlock()
		return nil
	case ok && c.softDeleteN > 0 && s.Status != reaper.StatusSoftDeleted:
		c.softDeleteN--
		s.Status = reaper.StatusSoftDeleted
		soft := copyServer(s)
		c.mu.Unlock()
		c.fire(nil, []reaper.Server{soft})
		return nil
	}
	if !ok {
		c.mu.Unlock()
		return &reaper.CloudError{Class: reaper.NotFound, Op: "delete server " + id, Err: errors.New("404 not found")}
	}
	if c.DeleteDelay > 0 {
		if _, asked := c.goneAt[id]; !asked {
			c.goneAt[id] = c.Now().Add(c.DeleteDelay)
		}
		c.mu.Unlock()
		return nil
	}
	gone := c.remove(id)
	c.mu.Unlock()
	c.fire(nil, []reaper.Server{gone})
	return nil
}

// UnsetMetadata removes one metadata key of a server; NotFound when
// there is no such server.
func (c *Cloud) UnsetMetadata(ctx context.Context, id, key string) error {
	c.MetaUnsets.Add(1)
	if err := ctx.Err(); err != nil {
		return &reaper.CloudError{Class: reaper.Transient, Op: "unset metadata", Err: err}
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	s, ok := c.servers[id]
	if !ok || c.hidden(id) {
		return &reaper.CloudError{Class: reaper.NotFound, Op: "unset metadata of server " + id, Err: errors.New("404 not found")}
	}
	delete(s.Metadata, key)
	return nil
}

// Stop powers an ACTIVE server off (SHUTOFF); Conflict in any other
// status, as Nova answers 409.
func (c *Cloud) Stop(ctx context.Context, id string) error {
	c.Stops.Add(1)
	return c.power(ctx, id, "stop", reaper.StatusActive, reaper.StatusShutoff, c.OnStop)
}

// Start powers a SHUTOFF server on (ACTIVE); Conflict in any other status.
func (c *Cloud) Start(ctx context.Context, id string) error {
	c.Starts.Add(1)
	return c.power(ctx, id, "start", reaper.StatusShutoff, reaper.StatusActive, c.OnStart)
}

func (c *Cloud) power(ctx context.Context, id, op, from, to string, hook func(reaper.Server)) error {
	if err := ctx.Err(); err != nil {
		return &reaper.CloudError{Class: reaper.Transient, Op: op + " server", Err: err}
	}
	c.mu.Lock()
	s, ok := c.servers[id]
	switch {
	case !ok || c.hidden(id):
		c.mu.Unlock()
		return &reaper.CloudError{Class: reaper.NotFound, Op: op + " server " + id, Err: errors.New("404 not found")}
	case s.Status != from:
		st := s.Status
		c.mu.Unlock()
		return &reaper.CloudError{Class: reaper.Conflict, Op: op + " server " + id, Err: fmt.Errorf("409 Cannot '%s' instance %s while it is in vm_state %s", op, id, st)}
	}
	s.Status = to
	out := copyServer(s)
	c.mu.Unlock()
	if hook != nil {
		hook(out)
	}
	return nil
}

// RegisterNode plays a booted machine: it registers node name in the Consul
// catalog with a check of the given status (as the node's agent would after
// Puppet ran) and, when service is not empty, that service.
func RegisterNode(ctx context.Context, c *api.Client, name, service, status string) error {
	reg := &api.CatalogRegistration{
		Node:    name,
		Address: "127.0.0.1",
		Check: &api.AgentCheck{
			Node: name, CheckID: "machine", Name: "machine health", Status: status,
		},
	}
	if service != "" {
		reg.Service = &api.AgentService{ID: service, Service: service, Port: 80}
		reg.Check.ServiceID = service
	}
	_, err := c.Catalog().Register(reg, (&api.WriteOptions{}).WithContext(ctx))
	return err
}
