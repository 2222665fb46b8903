// Package hypervisor is the lab's only simulated piece: it turns the
// servers of a real Nova (whose fake virt driver boots nothing) into
// systemd-nspawn containers that boot like cloud machines. A server ACTIVE
// in Nova is a running container with real systemd and real cloud-init fed
// the server's own user_data through a NoCloud seed; SHUTOFF powers it off
// cleanly; a server gone from Nova takes its container and root with it.
// It simulates only the hypervisor: it never tells Nova anything, so a
// container that dies (or is Killed, the lab's machine death) stays dead
// while Nova still says ACTIVE, as a real machine would.
package hypervisor

import (
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"log/slog"
	"net/netip"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"sync"
	"time"

	"github.com/gophercloud/gophercloud/v2"
	"github.com/gophercloud/gophercloud/v2/openstack/compute/v2/instanceactions"
	"github.com/gophercloud/gophercloud/v2/openstack/compute/v2/servers"
	"github.com/gophercloud/gophercloud/v2/pagination"
)

// novaMicroversion: 2.3 is the first that shows an admin a server's
// user_data; 2.69 the first at which a server in a cell Nova cannot reach is
// listed (status UNKNOWN) instead of left out, so an unreachable cell never
// looks like deleted servers whose roots would be removed.
const novaMicroversion = "2.69"

// Config is what New needs.
type Config struct {
	// Compute is a Nova client with admin credentials (only an admin sees
	// user_data). New uses a copy at microversion 2.69.
	Compute *gophercloud.ServiceClient
	// Project limits the hypervisor to one project's servers (tests sharing
	// one Nova); empty: every project.
	Project string
	// MakeRoot fills dest, which does not exist yet, with a bootable root
	// filesystem (systemd, cloud-init).
	MakeRoot func(ctx context.Context, dest string) error
	// Bridge is the host bridge every container's veth is attached to.
	Bridge string
	// Pool is where container addresses come from, in order (the lab:
	// 198.18.1.0/24); Subnet is the on-link network written with each
	// address (the lab: 198.18.0.0/16, to reach the host and the Consul
	// servers on 198.18.0.x). Subnet defaults to Pool.
	Pool, Subnet netip.Prefix
	// StateDir holds one directory per server: root/, address, name,
	// nspawn.pid while running, console.log.
	StateDir string
	// KeepRunning leaves the containers running when Run's context ends
	// (their nspawn.pid files stay for Down); else Run powers them off.
	KeepRunning bool
	// Logger defaults to slog.Default().
	Logger *slog.Logger
	// Interval between two Nova lists (default 1 s); StopTimeout is how
	// long a clean power-off may take before SIGKILL (default 30 s).
	Interval, StopTimeout time.Duration
}

// Container is what the hypervisor knows of one server's container.
type Container struct {
	// ID and Name are the Nova server's.
	ID, Name string
	// Machine is the nspawn machine name, Veth its host-side interface.
	Machine, Veth string
	Address       netip.Addr
	// Root is the container's root directory on the host.
	Root string
	// PID is systemd-nspawn's, 0 when the container is not running.
	PID int
	// Dead is set when the container stopped without Nova being told (it
	// died or was Killed): it is not booted again until Nova is told
	// (an instance action after the death, or the server SHUTOFF).
	Dead bool
}

// Hypervisor runs the containers of one Nova's servers.
type Hypervisor struct {
	cfg     Config
	compute *gophercloud.ServiceClient
	log     *slog.Logger

	mu       sync.Mutex          // guards machines, failures and every machine's fields
	machines map[string]*machine // by server ID
	failures map[string]failure  // servers whose container could not be made
	last     netip.Addr          // the address handed out last
	wg       sync.WaitGroup      // power-off escalations
}

// failure is a server whose container could not be made: retried after at.
type failure struct {
	at  time.Time
	msg string
}

// retryAfter is how long a server whose root could not be made waits
// before the next attempt (MakeRoot is a tar extract: not every second).
const retryAfter = 10 * time.Second

var validID = regexp.MustCompile(`^[A-Za-z0-9-]{1,64}$`)

// New checks cfg and reads the state dir: servers' addresses, and
// containers a previous run left running (KeepRunning), which it adopts.
func New(cfg Config) (*Hypervisor, error) {
	switch {
	case cfg.Compute == nil:
		return nil, errors.New("hypervisor: no Nova client")
	case cfg.MakeRoot == nil:
		return nil, errors.New("hypervisor: no MakeRoot")
	case cfg.Bridge == "":
		return nil, errors.New("hypervisor: no bridge")
	case !cfg.Pool.IsValid() || !cfg.Pool.Addr().Is4():
		return nil, fmt.Errorf("hypervisor: address pool %v: want an IPv4 prefix", cfg.Pool)
	case cfg.StateDir == "" || !filepath.IsAbs(cfg.StateDir):
		return nil, fmt.Errorf("hypervisor: state dir %q: want an absolute path", cfg.StateDir)
	}
	cfg.Pool = cfg.Pool.Masked()
	if !cfg.Subnet.IsValid() {
		cfg.Subnet = cfg.Pool
	}
	if cfg.Subnet = cfg.Subnet.Masked(); !cfg.Subnet.Contains(cfg.Pool.Addr()) || cfg.Subnet.Bits() > cfg.Pool.Bits() {
		return nil, fmt.Errorf("hypervisor: pool %v is not inside subnet %v", cfg.Pool, cfg.Subnet)
	}
	if cfg.Interval <= 0 {
		cfg.Interval = time.Second
	}
	if cfg.StopTimeout <= 0 {
		cfg.StopTimeout = 30 * time.Second
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	compute := *cfg.Compute
	compute.Microversion = novaMicroversion
	h := &Hypervisor{cfg: cfg, compute: &compute, log: cfg.Logger, failures: map[string]failure{}}
	if err := os.MkdirAll(cfg.StateDir, 0o700); err != nil {
		return nil, fmt.Errorf("hypervisor: %w", err)
	}
	var err error
	if h.machines, err = h.load(false); err != nil {
		return nil, fmt.Errorf("hypervisor: state dir %s: %w", cfg.StateDir, err)
	}
	seen := map[netip.Addr]string{}
	for id, m := range h.machines {
		if !cfg.Pool.Contains(m.addr) {
			return nil, fmt.Errorf("hypervisor: state dir %s: server %s: address %v is outside pool %v", cfg.StateDir, id, m.addr, cfg.Pool)
		}
		if other := seen[m.addr]; other != "" {
			return nil, fmt.Errorf("hypervisor: state dir %s: servers %s and %s both hold address %v", cfg.StateDir, id, other, m.addr)
		}
		seen[m.addr] = id
		if h.last.Less(m.addr) {
			h.last = m.addr
		}
	}
	h.adopt()
	return h, nil
}

// Run polls Nova every Interval and makes the containers follow it, until
// ctx ends; then it powers every container off (unless KeepRunning). A
// failed list changes nothing.
func (h *Hypervisor) Run(ctx context.Context) error {
	tick := time.NewTicker(h.cfg.Interval)
	defer tick.Stop()
	failing := false // one line when the list starts failing, one when it works again
	for {
		err := h.reconcile(ctx)
		if err != nil && ctx.Err() == nil && !failing {
			h.log.Error("hypervisor: nova list failed, changing nothing until it works", "err", err)
			failing = true
		} else if err == nil && failing {
			h.log.Info("hypervisor: nova list works again")
			failing = false
		}
		select {
		case <-ctx.Done():
			h.shutdown()
			return nil
		case <-tick.C:
		}
	}
}

// toldSince reports whether Nova was asked to act on server id's machine
// (stop, start, reboot, ...: an instance action other than create and
// delete) in a second after died, the
// time its container died. Nova keeps an action's start to the second: an
// action in the very second of the death does not count, so a start just
// before a Kill never brings the dead machine back.
func (h *Hypervisor) toldSince(ctx context.Context, id string, died time.Time) bool {
	told := false
	_ = instanceactions.List(h.compute, id, nil).EachPage(ctx, func(_ context.Context, p pagination.Page) (bool, error) {
		actions, err := instanceactions.ExtractInstanceActions(p)
		for _, a := range actions {
			told = told || (a.Action != "create" && a.Action != "delete" && a.StartTime.Truncate(time.Second).After(died.Truncate(time.Second)))
		}
		return err == nil && !told, err
	})
	return told
}

// server is the part of a Nova server the hypervisor reads.
type server struct {
	ID       string `json:"id"`
	Name     string `json:"name"`
	Status   string `json:"status"`
	UserData string `json:"OS-EXT-SRV-ATTR:user_data"`
}

// reconcile makes every container follow its server's status, after one
// complete list (every page) of the servers.
func (h *Hypervisor) reconcile(ctx context.Context) error {
	var list []server
	opts := servers.ListOpts{AllTenants: true, TenantID: h.cfg.Project}
	err := servers.List(h.compute, opts).EachPage(ctx, func(_ context.Context, p pagination.Page) (bool, error) {
		var page []server
		err := servers.ExtractServersInto(p, &page)
		list = append(list, page...)
		return err == nil, err
	})
	if err != nil {
		return err
	}
	listed := map[string]bool{}
	for _, s := range list {
		listed[s.ID] = true
		if ctx.Err() == nil {
			h.follow(ctx, s)
		}
	}
	h.mu.Lock()
	var gone []*machine
	for id, m := range h.machines {
		if !listed[id] {
			gone = append(gone, m)
		}
	}
	h.mu.Unlock()
	for _, m := range gone {
		h.remove(m)
	}
	return nil
}

// follow makes one server's container match its Nova status: ACTIVE runs
// (unless dead), SHUTOFF powers off, any other status changes nothing.
func (h *Hypervisor) follow(ctx context.Context, s server) {
	h.mu.Lock()
	m := h.machines[s.ID]
	running, dead, died := false, false, time.Time{}
	if m != nil {
		running, dead, died = m.proc != nil, m.dead, m.died
	}
	h.mu.Unlock()
	if dead && (s.Status == "SHUTOFF" || h.toldSince(ctx, s.ID, died)) {
		h.mu.Lock()
		m.setDead(false)
		h.mu.Unlock()
		dead = false
		h.log.Info("hypervisor: Nova was told of the dead container", "server", s.Name, "id", s.ID)
	}
	switch {
	case s.Status == "ACTIVE" && !running && !dead:
		if m == nil {
			if m = h.create(ctx, s); m == nil {
				return
			}
		}
		if err := h.start(m); err != nil { // a machine that cannot power on stays off
			h.mu.Lock()
			m.setDead(true)
			h.mu.Unlock()
			h.log.Error("hypervisor: boot failed; not retried while Nova says ACTIVE", "server", s.Name, "id", s.ID, "err", err)
		}
	case s.Status == "SHUTOFF" && running:
		h.powerOff(m, "Nova says SHUTOFF")
	}
}

// create makes a new server's container root (address, root filesystem,
// NoCloud seed, network); a failure is logged once per distinct error and
// retried after retryAfter.
func (h *Hypervisor) create(ctx context.Context, s server) *machine {
	h.mu.Lock()
	f, failed := h.failures[s.ID]
	h.mu.Unlock()
	if failed && time.Now().Before(f.at) {
		return nil
	}
	began := time.Now()
	m, err := h.makeMachine(ctx, s)
	h.mu.Lock()
	defer h.mu.Unlock()
	if err != nil {
		if ctx.Err() == nil && err.Error() != f.msg {
			h.log.Error("hypervisor: cannot make container", "server", s.Name, "id", s.ID, "err", err)
		}
		h.failures[s.ID] = failure{at: time.Now().Add(retryAfter), msg: err.Error()}
		return nil
	}
	delete(h.failures, s.ID)
	h.machines[s.ID] = m
	h.log.Info("hypervisor: container made", "server", s.Name, "id", s.ID, "address", m.addr, "took", time.Since(began).Round(time.Millisecond))
	return m
}

// makeMachine checks the server's reply, then writes its state dir.
func (h *Hypervisor) makeMachine(ctx context.Context, s server) (*machine, error) {
	if !validID.MatchString(s.ID) {
		return nil, fmt.Errorf("server id %q: want letters, digits and dashes", s.ID)
	}
	userData, err := base64.StdEncoding.DecodeString(s.UserData)
	if err != nil {
		return nil, fmt.Errorf("user_data is not base64: %w", err)
	}
	h.mu.Lock()
	addr, err := h.allocate()
	h.mu.Unlock()
	if err != nil {
		return nil, err
	}
	m := h.newMachine(s.ID, s.Name, addr)
	if err := m.prepare(ctx, h.cfg, userData); err != nil {
		return nil, errors.Join(err, removeDir(m.dir))
	}
	return m, nil
}

// allocate returns the next address of the pool after the last one handed
// out that no server holds, going round: an address freed by a deleted
// server is reused only after the whole pool, so a replacement never meets
// its predecessor's entry (another MAC) in a neighbour's ARP cache.
// Callers hold mu.
func (h *Hypervisor) allocate() (netip.Addr, error) {
	used := map[netip.Addr]bool{}
	for _, m := range h.machines {
		used[m.addr] = true
	}
	a, err := nextFree(h.cfg.Pool, h.cfg.Subnet, used, h.last)
	if err == nil {
		h.last = a
	}
	return a, err
}

// nextFree is the first address of pool after after (from the pool's
// start when after is not in it), going round, that is not used and is
// neither subnet's first (network) nor last (broadcast) address.
func nextFree(pool, subnet netip.Prefix, used map[netip.Addr]bool, after netip.Addr) (netip.Addr, error) {
	last := subnet.Addr()
	for b := 0; b < 32-subnet.Bits(); b++ {
		a := last.As4()
		a[3-b/8] |= 1 << (b % 8)
		last = netip.AddrFrom4(a)
	}
	a := pool.Addr()
	if pool.Contains(after) && pool.Contains(after.Next()) {
		a = after.Next()
	}
	for range 1 << (32 - pool.Bits()) {
		if a != subnet.Addr() && a != last && !used[a] {
			return a, nil
		}
		if a = a.Next(); !pool.Contains(a) {
			a = pool.Addr()
		}
	}
	return netip.Addr{}, fmt.Errorf("no free address in pool %v", pool)
}

// Containers returns every container the hypervisor holds, by name.
func (h *Hypervisor) Containers() []Container {
	h.mu.Lock()
	defer h.mu.Unlock()
	out := make([]Container, 0, len(h.machines))
	for _, m := range h.machines {
		out = append(out, m.info())
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name+out[i].ID < out[j].Name+out[j].ID })
	return out
}

// Address returns the address of the container of server name (or ID).
func (h *Hypervisor) Address(name string) (netip.Addr, error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	m, err := h.find(name)
	if err != nil {
		return netip.Addr{}, err
	}
	return m.addr, nil
}

// find returns the machine of server ID name, else of the one server
// called name. Callers hold mu.
func (h *Hypervisor) find(name string) (*machine, error) {
	if m := h.machines[name]; m != nil {
		return m, nil
	}
	var found []*machine
	for _, m := range h.machines {
		if m.name == name {
			found = append(found, m)
		}
	}
	switch len(found) {
	case 0:
		return nil, fmt.Errorf("no container for server %q", name)
	case 1:
		return found[0], nil
	}
	return nil, fmt.Errorf("%d servers named %q: use the ID", len(found), name)
}
