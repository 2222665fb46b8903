package daemon_test

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hashicorp/consul/api"
	"github.com/jiocloud/orchestrate/internal/consultest"
	"github.com/jiocloud/orchestrate/reaper"
	"github.com/jiocloud/orchestrate/reaper/daemon"
	"github.com/jiocloud/orchestrate/reaper/simcloud"
)

// BenchmarkCycle2000 is one full reaper cycle at 2,000 nodes against a real
// Consul agent and the simulated cloud: one Nova list, one Consul health
// query, the KV reads, the plan, and the state write. Four roles of 500; one
// node per role is critical (held back by its grace) so the planner has
// something to decide. ms/cycle is the wall time of one cycle.
func BenchmarkCycle2000(b *testing.B) {
	const perRole = 500
	roles := []string{"db", "lb", "controller", "compute"}
	agent := consultest.Start(b, consultest.Options{HCL: agentHCL})
	c := agent.Client
	sim := simcloud.New()

	var cfgText strings.Builder
	cfgText.WriteString("dry_run: true\nprefix: " + prefix + "\ninterval: 1s\nsession_ttl: 10s\nlock_delay: 1s\nlisten: \"\"\nroles:\n")
	for _, r := range roles {
		fmt.Fprintf(&cfgText, "  - name: %s\n    desired: %d\n    critical_grace: 1h\n    boot: {flavor: m1, image: debian, name_template: \"%s{n}\"}\n", r, perRole, r)
	}
	cfg, err := reaper.ParseConfig(strings.NewReader(cfgText.String()))
	if err != nil {
		b.Fatal(err)
	}
	if err := daemon.CheckConfig(cfg); err != nil {
		b.Fatal(err)
	}

	// Register the fleet in parallel: 2,000 catalog writes.
	type job struct{ name, role, status string }
	jobs := make(chan job)
	var wg sync.WaitGroup
	errs := make(chan error, 8)
	for w := 0; w < 8; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for j := range jobs {
				if err := simcloud.RegisterNode(context.Background(), c, j.name, j.role, j.status); err != nil {
					select {
					case errs <- err:
					default:
					}
				}
			}
		}()
	}
	for _, r := range roles {
		for i := 1; i <= perRole; i++ {
			name := fmt.Sprintf("%s%d", r, i)
			sim.Add(reaper.Server{Name: name, Created: time.Now().Add(-time.Hour), Metadata: map[string]string{reaper.MetaRole: r}})
			status := api.HealthPassing
			if i == 1 {
				status = api.HealthCritical
			}
			jobs <- job{name, r, status}
		}
	}
	close(jobs)
	wg.Wait()
	close(errs)
	if err := <-errs; err != nil {
		b.Fatal(err)
	}

	r, err := daemon.New(cfg, c, sim, slog.New(slog.NewTextHandler(io.Discard, nil)))
	if err != nil {
		b.Fatal(err)
	}
	sess := holdLock(b, c, cfg)
	ctx := context.Background()
	if p := r.Cycle(ctx, sess); p == nil {
		b.Fatal("warm-up cycle produced no plan")
	}
	b.ReportAllocs()
	b.ResetTimer()
	start := time.Now()
	for i := 0; i < b.N; i++ {
		p := r.Cycle(ctx, sess)
		if p == nil || len(p.Roles) != len(roles) {
			b.Fatalf("cycle saw %+v", p)
		}
		healthy := 0
		for _, rv := range p.Roles {
			healthy += rv.Healthy
		}
		if healthy != len(roles)*(perRole-1) {
			b.Fatalf("cycle counted %d healthy, want %d", healthy, len(roles)*(perRole-1))
		}
	}
	b.ReportMetric(float64(time.Since(start).Microseconds())/1000/float64(b.N), "ms/cycle")
}
