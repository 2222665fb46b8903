package planner

import (
	"fmt"
	"testing"
	"time"

	"github.com/jiocloud/orchestrate/internal/store/reaperkv"
	"github.com/jiocloud/orchestrate/reaper"
)

// BenchmarkPlan10k plans over 10,000 servers and nodes (10 roles of 1,000,
// two checks per node, 1% critical, a few journal entries): the cost of one
// cycle's decision.
func BenchmarkPlan10k(b *testing.B) {
	cfg := reaper.DefaultConfig()
	for r := 0; r < 10; r++ {
		role := reaper.Role{Name: fmt.Sprintf("role%d", r), Desired: 1000, MaxAge: reaper.Duration(30 * day), MaxAgeJitter: reaper.Duration(day),
			Boot: reaper.BootSpec{Flavor: "m1", Image: "debian", NameTemplate: "{role}-{n}"}}
		role.ApplyDefaults()
		cfg.Roles = append(cfg.Roles, role)
	}
	if err := cfg.Validate(); err != nil {
		b.Fatal(err)
	}
	var in = reaper.Input{Now: t0, Config: cfg, Armed: true, Memory: reaper.NewMemory()}
	for r := 0; r < 10; r++ {
		for i := 1; i <= 1000; i++ {
			name := fmt.Sprintf("role%d-%d", r, i)
			in.Servers = append(in.Servers, reaper.Server{ID: "id-" + name, Name: name, Status: reaper.StatusActive,
				Created: t0.Add(-time.Duration(i) * time.Hour), Metadata: map[string]string{reaper.MetaRole: fmt.Sprintf("role%d", r)}})
			status := "passing"
			if i%100 == 0 {
				status = reaper.CheckCritical
				in.Memory.Critical[name] = t0.Add(-time.Hour)
			}
			in.Checks = append(in.Checks,
				reaper.Check{Node: name, CheckID: "serfHealth", Name: "Serf Health Status", Status: "passing"},
				reaper.Check{Node: name, CheckID: "service:app", Name: "app", Status: status})
		}
		in.Journal = append(in.Journal, reaper.Entry{ID: fmt.Sprintf("role%d.j", r), Kind: reaperkv.KindCreate, Role: fmt.Sprintf("role%d", r),
			Phase: reaperkv.PhaseBooting, NewName: fmt.Sprintf("role%d-1", r), NewID: fmt.Sprintf("id-role%d-1", r), Started: t0})
	}
	if p := Plan(in); len(p.Actions) == 0 || len(p.Roles) != 10 {
		b.Fatalf("unexpected plan: %d actions, %d roles", len(p.Actions), len(p.Roles))
	}
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		Plan(in)
	}
}
