package main

import (
	"context"
	"fmt"
	"os"
	"sort"
	"strings"
	"time"

	"github.com/jiocloud/orchestrate/internal/store"
	"github.com/jiocloud/orchestrate/internal/store/reaperkv"
	"github.com/jiocloud/orchestrate/internal/store/schema"
	"github.com/jiocloud/orchestrate/reaper/simcloud"
)

// autoscaleStep: compute follows its load. The demo plays the workload
// (a total spread over the serving compute nodes, which report their share
// as `orchestrate report-metric` does, each with its own token) and each
// node's drain handler (`orchestrate drain --drain-cmd ...`, which a key
// watch runs on a real node); the reaper does the rest.
func (r *reaperRun) autoscaleStep() error {
	d := r.d
	st, err := store.New(d.agent.Client, schema.DefaultPrefix)
	if err != nil {
		return err
	}
	logFrom := fileSize(r.logPath)
	say("compute autoscales on its nodes' own load reports: target 0.6 per node, 2 to 6 servers (reaper.yaml, cooldowns in seconds for the demo)")
	load := simcloud.NewWorkload(4 * 0.6)
	load.SetWeight("compute2", 0.4) // carries less than the others
	ctx, cancel := context.WithCancel(d.ctx)
	defer cancel()
	r.reportLoad(ctx, load)
	say("step 4 set compute's count by hand (orchestrate scale), which the autoscaler takes as an override; handing it back:")
	if _, err := d.orch(0, "scale", "compute", "--auto"); err != nil {
		return err
	}
	if _, err := d.orchAs(0, "compute1", "report-metric", "load", "0.6", "--role", "compute", "--host", "compute1"); err != nil {
		return err
	}
	say("(every serving compute node reports like this, with its own token, twice a second; a cron job or the workload does it on a real node)")
	go func() {
		for ctx.Err() == nil {
			r.reportLoad(ctx, load)
			r.drainHandlers(ctx)
			select {
			case <-ctx.Done():
			case <-time.After(500 * time.Millisecond):
			}
		}
	}()
	sc := computeScale{r: r, st: st, ctx: ctx}
	if err := sc.holds(); err != nil {
		return err
	}
	if err := sc.scalesOut(load); err != nil {
		return err
	}
	if err := sc.scalesIn(load); err != nil {
		return err
	}
	say("the reaper's log since this step began:")
	printLogFrom(r.logPath, logFrom, "autoscale decision", "msg=scale", "msg=drain", "msg=delete", "msg=create")
	_, err = d.orch(0, "reaper", "status")
	return err
}

// reportLoad writes each serving compute node's share of load as its own
// report, with its own token.
func (r *reaperRun) reportLoad(ctx context.Context, load *simcloud.Workload) {
	serving, err := simcloud.ServingNodes(ctx, r.d.agent.Client, "compute")
	if err != nil {
		return
	}
	for node, v := range load.Spread(serving) {
		st, err := r.d.storeAs(node)
		if err != nil {
			continue // not booted yet: no token file
		}
		// A server on its way out has its token logged out before the
		// delete: its last reports are refused, as on the machine.
		_ = st.ReportMetric(ctx, "compute", node, "load", v)
	}
}

// computeScale follows compute's count through the autoscaler's phases.
type computeScale struct {
	r   *reaperRun
	st  *store.Store
	ctx context.Context
}

func (c computeScale) desired() int { n, _, _ := c.st.Desired(c.ctx, "compute"); return n }

func (c computeScale) serving() int {
	s, _ := simcloud.ServingNodes(c.ctx, c.r.d.agent.Client, "compute")
	return len(s)
}

// holds: 0.6 per node on 4 servers is on target.
func (c computeScale) holds() error {
	if err := c.r.d.waitFor("the autoscaler to hold at 4", 20*time.Second, func() bool {
		rep := c.r.state()
		return rep != nil && autoscaleOf(rep, "compute") != nil && strings.HasPrefix(autoscaleOf(rep, "compute").Reason, "within-tolerance")
	}); err != nil {
		printLogTail(c.r.logPath)
		return err
	}
	say("load 2.4 on 4 servers: 0.6 each, on target; the autoscaler holds")
	return nil
}

// scalesOut: 0.9 per node on 4 needs 6 servers.
func (c computeScale) scalesOut(load *simcloud.Workload) error {
	say("the load rises to 3.6 (0.9 per node): ceil(4 x 0.9 / 0.6) = 6 servers")
	load.SetTotal(3.6)
	start := time.Now()
	if err := c.r.d.waitFor("6 compute servers serving", 60*time.Second, func() bool { return c.desired() == 6 && c.serving() == 6 }); err != nil {
		printLogTail(c.r.logPath)
		return err
	}
	say("6 compute servers serve %s later (servers boot in 2s here)", time.Since(start).Round(time.Second))
	return nil
}

// scalesIn: 0.4 per node on 6 needs 4, reached one cooldown at a time
// after the stabilization window, each removed server drained first.
func (c computeScale) scalesIn(load *simcloud.Workload) error {
	say("the load falls to 2.4 (0.4 per node on 6): the autoscaler waits out its 5s stabilization window, then removes one server per 4s cooldown, the least loaded first, each drained first")
	load.SetTotal(2.4)
	computes := func() int {
		n := 0
		for _, s := range c.r.cloud.Servers() {
			if strings.HasPrefix(s.Name, "compute") {
				n++
			}
		}
		return n
	}
	if err := c.r.d.waitFor("compute back at 4", 90*time.Second, func() bool {
		rep := c.r.state()
		return c.desired() == 4 && c.serving() == 4 && computes() == 4 && rep != nil && len(rep.Journal) == 0
	}); err != nil {
		printLogTail(c.r.logPath)
		return err
	}
	return nil
}

// fileSize is the size of the file at path (0 when it cannot be read).
func fileSize(path string) int64 {
	fi, err := os.Stat(path)
	if err != nil {
		return 0
	}
	return fi.Size()
}

// autoscaleOf is role's last autoscaling decision in a report.
func autoscaleOf(rep *reaperkv.ReaperReport, role string) *reaperkv.ScaleDecision {
	for _, r := range rep.Roles {
		if r.Name == role && r.Autoscale != nil {
			return r.Autoscale.Last
		}
	}
	return nil
}

// drainHandlers runs `orchestrate drain` for every host the reaper asked
// to drain, as each node's key watch would: the command moves the host's
// work away (here: says so) and answers the reaper.
func (r *reaperRun) drainHandlers(ctx context.Context) {
	d := r.d
	st, err := store.New(d.agent.Client, schema.DefaultPrefix)
	if err != nil {
		return
	}
	snap, err := st.Snapshot(ctx)
	if err != nil {
		return
	}
	hosts := make([]string, 0, len(snap.Scaling.Drains))
	for h, dr := range snap.Scaling.Drains {
		if dr.Answer == nil {
			hosts = append(hosts, h)
		}
	}
	sort.Strings(hosts)
	for _, h := range hosts {
		c, err := d.command(h, "orchestrate", "drain", "--handler", "--host", h, "--lock-file", d.dir+"/drain-"+h+".lock",
			"--drain-cmd", `echo "moved the work of $ORCHESTRATE_HOST to the other compute nodes ($ORCHESTRATE_DRAIN_REASON)"`)
		var out []byte
		if err == nil {
			out, err = c.CombinedOutput()
		}
		fmt.Printf("   %s's drain handler: %s$ orchestrate drain --handler --host %s --drain-cmd '...'\n", h, h, h)
		if err != nil {
			fmt.Printf("     (failed: %v)\n", err)
		}
		indent(string(out))
	}
}
