package daemon

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/hashicorp/consul/api"
	"github.com/jiocloud/orchestrate/internal/store"
	"github.com/jiocloud/orchestrate/internal/store/schema"
	"github.com/jiocloud/orchestrate/reaper"
)

// observation is what one cycle read.
type observation struct {
	servers   []reaper.Server
	checks    []reaper.Check
	desired   map[string]int
	validated map[string]bool
	reporting map[string]bool
	recorded  map[string]bool
	suspect   map[string]bool
	// provisionFailed: hosts whose own provisioned record says failed.
	provisionFailed map[string]reaper.ProvisionFailure
	// hostRecords: by host, the highest modify index of its own records;
	// tooMany: the hosts with more of them than one transaction removes.
	hostRecords map[string]uint64
	tooMany     map[string]int
	keys        *ReaperKeys
	// scaling is the KV snapshot's scaling part; metrics the readings of
	// autoscaled roles' Prometheus queries.
	scaling schema.Scaling
	metrics map[string]reaper.MetricReading
	// specProblems says, by role, why the spec before its current one
	// cannot be built (keepSpecs); specErrs what failed keeping them.
	specProblems map[string]string
	specErrs     []string
	// hooks are the lifecycle hooks' requests and answers.
	hooks schema.Hooks
	// fleet is what the alerting rules' gauges read (fleetmetrics.go).
	fleet fleetReading
}

// observe reads everything a cycle needs: exactly one Nova list and one
// Consul health query, plus the KV prefix and the reaper's keys. Any error
// means no action this cycle.
func (r *Reaper) observe(ctx context.Context) (*observation, error) {
	lctx, cancel := context.WithTimeout(ctx, r.cfg.CloudTimeout.D())
	servers, err := r.cloud.List(lctx)
	cancel()
	if err != nil {
		r.metrics.cloudError(err)
		return nil, fmt.Errorf("list servers: %w", err)
	}
	checks, err := r.readChecks(ctx)
	if err != nil {
		return nil, err
	}
	snap, desired, err := r.readKV(ctx)
	if err != nil {
		return nil, err
	}
	keys, err := r.journal.Read(ctx)
	if err != nil {
		return nil, err
	}
	if len(keys.Problems) > 0 {
		return nil, fmt.Errorf("cannot read the journal: %s", strings.Join(keys.Problems, "; "))
	}
	recorded := make(map[string]bool, len(snap.Hosts))
	for name := range snap.Hosts {
		recorded[name] = true
	}
	for name := range snap.Records {
		recorded[name] = true // a heartbeat or a load report alone too
	}
	// A name with a hold record is no new server's: it would be held.
	for name := range keys.Holds {
		recorded[name] = true
	}
	for name := range keys.HoldProblems {
		recorded[name] = true
	}
	suspect := corroboratedSuspects(snap.Suspects(), checks)
	failed := map[string]reaper.ProvisionFailure{}
	for host, st := range snap.ProvisionFailures() {
		failed[host] = reaper.ProvisionFailure{Detail: st.Detail, Time: st.Time}
	}
	own, tooMany := make(map[string]uint64, len(snap.Records)), map[string]int{}
	for host, rec := range snap.Records {
		own[host] = rec.Index
		if rec.Keys > store.MaxForgetKeys {
			tooMany[host] = rec.Keys
		}
	}
	return &observation{servers: servers, checks: checks, desired: desired, validated: snap.Validated(), reporting: snap.ReportingValidation(),
		recorded: recorded, suspect: suspect, provisionFailed: failed, hostRecords: own, tooMany: tooMany, keys: keys, scaling: snap.Scaling, metrics: r.readMetrics(ctx), hooks: snap.Hooks,
		fleet: r.readFleet(ctx, snap)}, nil
}

// readMetrics evaluates the Prometheus query of every role that scales on
// one. A query that fails holds its role only: the cycle goes on.
func (r *Reaper) readMetrics(ctx context.Context) map[string]reaper.MetricReading {
	out := make(map[string]reaper.MetricReading, len(r.prom))
	for role, p := range r.prom {
		out[role] = p.Read(ctx)
	}
	return out
}

// readChecks is the one Consul health query of a cycle.
func (r *Reaper) readChecks(ctx context.Context) ([]reaper.Check, error) {
	hcs, meta, err := r.client.Health().State(api.HealthAny, (&api.QueryOptions{AllowStale: false}).WithContext(ctx))
	if err != nil {
		return nil, fmt.Errorf("consul health query: %w", err)
	}
	// Consul leaves out what the token may not read and still answers 200:
	// a hidden node would look absent, and its server unaccounted.
	if meta != nil && meta.ResultsFilteredByACLs {
		return nil, errors.New("consul health query: some checks are hidden by ACLs: the reaper's token needs node:read and service:read on every node and service")
	}
	checks := make([]reaper.Check, len(hcs))
	for i, c := range hcs {
		checks[i] = reaper.Check{Node: c.Node, CheckID: c.CheckID, Name: c.Name, Status: c.Status, ServiceID: c.ServiceID, Notes: c.Notes}
	}
	return checks, nil
}

// readKV reads the desired counts, refusing any that could be hidden or
// unreadable (the file's count would take over and scale the role), and
// the snapshot they were read from (which hosts validated, which have
// records).
func (r *Reaper) readKV(ctx context.Context) (*store.Snapshot, map[string]int, error) {
	snap, err := r.store.Snapshot(ctx)
	if err != nil {
		return nil, nil, err
	}
	desired, err := r.store.DesiredCounts(ctx, snap)
	if err != nil {
		return nil, nil, err
	}
	return snap, desired, nil
}

// corroboratedSuspects keeps the hosts whose suspect record the node's own
// Consul health agrees with: converge's check on the node's agent, which
// only the node's identity may write, is in warning with a failed
// consistent run. A record alone (written by a hand that is not the
// node's) replaces nothing.
func corroboratedSuspects(records map[string]string, checks []reaper.Check) map[string]bool {
	out := map[string]bool{}
	if len(records) == 0 {
		return out
	}
	for _, c := range checks {
		if _, ok := records[c.Node]; ok && c.CheckID == store.ConvergePuppetCheck && c.ServiceID == "" &&
			c.Status == "warning" && strings.Contains(c.Notes, "puppet outcome: failed") {
			out[c.Node] = true
		}
	}
	return out
}
