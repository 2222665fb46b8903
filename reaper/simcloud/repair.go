package simcloud

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jiocloud/orchestrate/reaper"
)

// Repairs: a reboot puts a server in HARD_REBOOT and a rebuild in
// REBUILD, for RebootDelay and RebuildDelay, then back to ACTIVE (or, for
// a rebuild BreakRebuilds broke, to ERROR), as Nova does; OnReboot and
// OnRebuild are called then, outside the lock, for the test to play what
// the machine does after it (its agent rejoins, passing or not). Nova
// takes either from ACTIVE, SHUTOFF and ERROR; in any other status (a
// server already rebooting, building or deleting) it answers 409.

// repairing is a reboot or a rebuild under way.
type repairing struct {
	op    string // "reboot" or "rebuild"
	until time.Time
	// fault, for a broken rebuild, is the ERROR it ends in.
	fault string
}

// repairable holds the statuses Nova reboots and rebuilds from.
var repairable = map[string]bool{reaper.StatusActive: true, reaper.StatusShutoff: true, reaper.StatusError: true}

// RefuseRepairs makes the next n reboots and rebuilds fail with err
// (a 409, say), doing nothing.
func (c *Cloud) RefuseRepairs(n int, err error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.refuseRepairN, c.refuseRepair = n, err
}

// BreakRebuilds makes the next n rebuilds end in ERROR with fault.
func (c *Cloud) BreakRebuilds(n int, fault string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.breakRebuildN, c.breakRebuildFault = n, fault
}

// SetMeta sets metadata key of every server named name (as an operator's
// `openstack server set --property` does); false when there is none.
func (c *Cloud) SetMeta(name, key, value string) bool {
	return c.eachNamed(name, func(_ string, s *reaper.Server) { s.Metadata[key] = value })
}

// Image is the image the server named name was last built or rebuilt
// from ("" when there is none).
func (c *Cloud) Image(name string) string {
	c.mu.Lock()
	defer c.mu.Unlock()
	for id, s := range c.servers {
		if s.Name == name {
			return c.images[id]
		}
	}
	return ""
}

// Reboot hard-reboots a server: HARD_REBOOT for RebootDelay, then ACTIVE.
func (c *Cloud) Reboot(ctx context.Context, id string) error {
	c.Reboots.Add(1)
	return c.startRepair(ctx, id, "reboot", "HARD_REBOOT", c.RebootDelay, "")
}

// Rebuild rebuilds a server from req.Image: REBUILD for RebuildDelay,
// then ACTIVE (ERROR for one BreakRebuilds broke), built from the image.
func (c *Cloud) Rebuild(ctx context.Context, req reaper.RebuildRequest) error {
	c.Rebuilds.Add(1)
	if req.Image == "" {
		return &reaper.CloudError{Class: reaper.Fatal, Op: "rebuild server " + req.ID, Err: errors.New("400 no image")}
	}
	return c.startRepair(ctx, req.ID, "rebuild", "REBUILD", c.RebuildDelay, req.Image)
}

func (c *Cloud) startRepair(ctx context.Context, id, op, status string, d time.Duration, image string) error {
	if err := ctx.Err(); err != nil {
		return &reaper.CloudError{Class: reaper.Transient, Op: op + " server", Err: err}
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.refuseRepairN > 0 {
		c.refuseRepairN--
		return c.refuseRepair
	}
	s, ok := c.servers[id]
	switch {
	case !ok || c.hidden(id):
		return &reaper.CloudError{Class: reaper.NotFound, Op: op + " server " + id, Err: errors.New("404 not found")}
	case !repairable[s.Status] || c.goneAt[id] != (time.Time{}):
		return &reaper.CloudError{Class: reaper.Conflict, Op: op + " server " + id,
			Err: fmt.Errorf("409 Cannot '%s' instance %s while it is in vm_state %s", op, id, s.Status)}
	}
	rp := repairing{op: op, until: c.Now().Add(d)}
	if op == "rebuild" {
		c.images[id] = image
		if c.breakRebuildN > 0 {
			c.breakRebuildN--
			rp.fault = c.breakRebuildFault
		}
	}
	if s.Status != reaper.StatusError {
		// As Nova: a server in ERROR stays so (vm_state error) while
		// the task runs; it leaves it when the task succeeds.
		s.Status = status
	}
	c.repairs[id] = rp
	return nil
}

// advanceRepairs ends the reboots and rebuilds whose delay passed and
// returns the servers, for OnReboot and OnRebuild. Caller holds mu.
func (c *Cloud) advanceRepairs() (rebooted, rebuilt []reaper.Server) {
	now := c.Now()
	for id, rp := range c.repairs {
		s, ok := c.servers[id]
		if !ok {
			delete(c.repairs, id)
			continue
		}
		if now.Before(rp.until) {
			continue
		}
		delete(c.repairs, id)
		s.Status, s.Fault = reaper.StatusActive, ""
		if rp.fault != "" {
			s.Status, s.Fault = reaper.StatusError, rp.fault
		}
		if rp.op == "reboot" {
			rebooted = append(rebooted, copyServer(s))
		} else {
			rebuilt = append(rebuilt, copyServer(s))
		}
	}
	return rebooted, rebuilt
}

func (c *Cloud) fireRepairs(rebooted, rebuilt []reaper.Server) {
	for _, s := range rebooted {
		if c.OnReboot != nil {
			c.OnReboot(s)
		}
	}
	for _, s := range rebuilt {
		if c.OnRebuild != nil {
			c.OnRebuild(s)
		}
	}
}
