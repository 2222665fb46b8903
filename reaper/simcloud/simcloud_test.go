package simcloud

import (
	"context"
	"testing"
	"time"

	"github.com/jiocloud/orchestrate/reaper"
)

func TestSimulatedCloud(t *testing.T) {
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	c := New()
	c.Now = func() time.Time { return now }
	c.BootDelay = time.Minute
	var active []string
	c.OnActive = func(s reaper.Server) { active = append(active, s.Name) }
	c.SetQuota(2)
	ctx := context.Background()
	s, err := c.Create(ctx, reaper.CreateRequest{Name: "web1", Metadata: map[string]string{reaper.MetaRole: "web"}})
	if err != nil || s.Status != reaper.StatusBuild || s.Metadata[reaper.MetaRole] != "web" {
		t.Fatalf("create: %+v %v", s, err)
	}
	c.Add(reaper.Server{Name: "old1"})
	if _, err := c.Create(ctx, reaper.CreateRequest{Name: "web2"}); reaper.ClassOf(err) != reaper.Quota {
		t.Fatalf("over quota: %v, want a quota error", err)
	}
	c.List(ctx)
	if len(active) != 0 {
		t.Fatal("ACTIVE before the boot delay")
	}
	now = now.Add(time.Minute)
	ss, _ := c.List(ctx)
	c.List(ctx)
	if len(ss) != 2 || len(active) != 1 || active[0] != "web1" {
		t.Fatalf("after the boot delay: %v, OnActive calls %v", ss, active)
	}
	if got, _ := c.Get(ctx, s.ID); got.Status != reaper.StatusActive {
		t.Fatalf("status %s", got.Status)
	}
	if err := c.Delete(ctx, s.ID); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Get(ctx, s.ID); reaper.ClassOf(err) != reaper.NotFound {
		t.Fatalf("get after delete: %v", err)
	}
	if err := c.Delete(ctx, s.ID); reaper.ClassOf(err) != reaper.NotFound {
		t.Fatalf("second delete: %v", err)
	}
	if c.Lists.Load() != 3 || c.Creates.Load() != 2 || c.Deletes.Load() != 2 {
		t.Fatalf("counters: lists %d creates %d deletes %d", c.Lists.Load(), c.Creates.Load(), c.Deletes.Load())
	}
}
