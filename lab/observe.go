//go:build lab

package lab

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/gophercloud/gophercloud/v2/openstack/compute/v2/servers"
	"github.com/hashicorp/consul/api"

	"github.com/jiocloud/orchestrate/internal/converge"
	"github.com/jiocloud/orchestrate/internal/paths"
	"github.com/jiocloud/orchestrate/internal/store/reaperkv"
	"github.com/jiocloud/orchestrate/internal/store/schema"
	"github.com/jiocloud/orchestrate/lab/invariant"
	"github.com/jiocloud/orchestrate/reaper"
)

// observeEvery is how often the invariant checker looks at the cloud.
const observeEvery = 2 * time.Second

// observe feeds the invariant checker until ctx ends. An observation that
// could not be made whole (Nova or Consul did not answer) is skipped, not
// judged: the checker sees only complete pictures.
func (l *Lab) observe(ctx context.Context) {
	defer close(l.obsDone)
	t := time.NewTicker(observeEvery)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		o, err := l.Observation(ctx)
		if err != nil {
			continue
		}
		l.checkMu.Lock()
		for _, v := range l.Checker.Observe(o) {
			l.Log.Error("INVARIANT VIOLATED", "what", v.What)
		}
		l.checkMu.Unlock()
	}
}

// Violations are the invariant checker's findings so far.
func (l *Lab) Violations() []invariant.Violation {
	l.checkMu.Lock()
	defer l.checkMu.Unlock()
	return l.Checker.Violations()
}

// Timeline is what the checker saw change.
func (l *Lab) Timeline() []invariant.Event {
	l.checkMu.Lock()
	defer l.checkMu.Unlock()
	return l.Checker.Timeline()
}

// Expect tells the checker the scenario itself takes server name away.
func (l *Lab) Expect(name, why string) {
	l.checkMu.Lock()
	defer l.checkMu.Unlock()
	l.Checker.Expect(name, why)
}

// Observation is one look at the whole cloud.
func (l *Lab) Observation(ctx context.Context) (invariant.Observation, error) {
	o := invariant.Observation{Time: time.Now(), Files: map[string]invariant.File{}}
	var err error
	if o.Servers, err = l.Servers(ctx); err != nil {
		return o, err
	}
	if o.Serving, err = l.Serving(ctx); err != nil {
		return o, err
	}
	if o.Report, err = l.Report(ctx); err != nil {
		return o, err
	}
	var mu sync.Mutex
	var wg sync.WaitGroup
	for _, s := range o.Servers {
		if s.Role == "" || s.Role == bootstrapRole {
			continue
		}
		wg.Go(func() {
			f, ok := l.hieraFile(ctx, s.Name)
			if ok {
				mu.Lock()
				o.Files[s.Name] = f
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	return o, nil
}

// bootstrapRole is the role name the lab gives its bootstrap servers.
const bootstrapRole = "bootstrap"

// Servers lists Nova's servers, with their role (the reaper's metadata,
// or the lab's for its bootstrap servers).
func (l *Lab) Servers(ctx context.Context) ([]invariant.Server, error) {
	pages, err := servers.List(l.Compute, servers.ListOpts{}).AllPages(ctx)
	if err != nil {
		return nil, err
	}
	list, err := servers.ExtractServers(pages)
	if err != nil {
		return nil, err
	}
	out := make([]invariant.Server, 0, len(list))
	for _, s := range list {
		role := s.Metadata["role"]
		if s.Metadata["lab"] == bootstrapRole {
			role = bootstrapRole
		}
		out = append(out, invariant.Server{ID: s.ID, Name: s.Name, Role: role, Status: s.Status, Standby: s.Metadata[reaper.MetaStandby] != ""})
	}
	return out, nil
}

// Serving says, by node, whether its role's own service has every check
// passing (the service's and the node's, serfHealth among them).
func (l *Lab) Serving(ctx context.Context) (map[string]bool, error) {
	health, err := l.roleHealth(ctx)
	if err != nil {
		return nil, err
	}
	out := make(map[string]bool, len(health))
	for node, h := range health {
		out[node] = h.passing
	}
	return out, nil
}

// nodeHealth is what one node's checks say, for its role's service.
type nodeHealth struct {
	// critical: a check of the node or of the service is critical
	// (maintenance included); passing: every one passes; validated: its
	// converge validation check passes (converge's checks are never
	// critical: a node re-running a step is in warning).
	critical, passing, validated bool
}

// roleHealth reads, for each role's service, the health of every node
// that registered it.
func (l *Lab) roleHealth(ctx context.Context) (map[string]nodeHealth, error) {
	out := map[string]nodeHealth{}
	q := (&api.QueryOptions{}).WithContext(ctx)
	for _, r := range l.Size.Roles {
		entries, _, err := l.Admin.Health().Service(r.Name, "", false, q)
		if err != nil {
			return nil, err
		}
		for _, e := range entries {
			h := nodeHealth{passing: e.Checks.AggregatedStatus() == api.HealthPassing}
			for _, c := range e.Checks {
				h.critical = h.critical || c.Status == api.HealthCritical
				h.validated = h.validated || (c.CheckID == converge.CheckValidation && c.Status == api.HealthPassing)
			}
			out[e.Node.Node] = h
		}
	}
	return out, nil
}

// Report is the reaper leader's last report (nil before the first).
func (l *Lab) Report(ctx context.Context) (*reaperkv.ReaperReport, error) {
	p, _, err := l.Admin.KV().Get(reaperkv.ReaperKey(schema.DefaultPrefix, reaperkv.ReaperStateKey), (&api.QueryOptions{}).WithContext(ctx))
	if err != nil || p == nil {
		return nil, err
	}
	var r reaperkv.ReaperReport
	if err := json.Unmarshal(p.Value, &r); err != nil {
		return nil, fmt.Errorf("reaper report: %w", err)
	}
	return &r, nil
}

// hieraFile reads a node's services.yaml from inside its container; ok is
// false when the container could not be asked (booting, powered off).
func (l *Lab) hieraFile(ctx context.Context, name string) (invariant.File, bool) {
	cctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	out, err := l.HV.Exec(cctx, name, "sh", "-c", "if [ -e "+paths.HieraData+" ]; then echo present; cat "+paths.HieraData+"; else echo absent; fi")
	if err != nil {
		return invariant.File{}, false
	}
	head, body, _ := strings.Cut(string(out), "\n")
	switch head {
	case "present":
		return invariant.File{Exists: true, Data: []byte(body)}, true
	case "absent":
		return invariant.File{}, true
	}
	return invariant.File{}, false
}
