package nova_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/gophercloud/gophercloud/v2/openstack/compute/v2/servers"
	"github.com/jiocloud/orchestrate/internal/novatest"
	"github.com/jiocloud/orchestrate/internal/testutil"
	"github.com/jiocloud/orchestrate/reaper"
	"github.com/jiocloud/orchestrate/reaper/nova"
)

// connect is the reaper's Nova as the test's user.
func connect(t *testing.T, c *novatest.Cloud) *nova.Nova {
	t.Helper()
	env := map[string]string{}
	for _, kv := range c.Env {
		k, v, _ := strings.Cut(kv, "=")
		env[k] = v
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	n, err := nova.NewNovaWithEnv(ctx, reaper.CloudConfig{}, func(k string) string { return env[k] })
	if err != nil {
		t.Fatal(err)
	}
	return n
}

// A server the reaper created that Nova could not place is listed with
// Nova's fault ("No valid host"), which Nova's list leaves out; a server
// of no journal entry is listed as Nova lists it.
func TestNovaListCarriesTheFaultOfAFailedBoot(t *testing.T) {
	t.Parallel()
	c := novatest.Start(t)
	if c.NoHostFlavorID == "" {
		t.Fatal("the env file has no no-host flavor: rerun `make nova-up`")
	}
	n := connect(t, c)
	boot := func(name string, meta map[string]string) string {
		opts := c.CreateOpts(name, meta)
		opts.FlavorRef = c.NoHostFlavorID
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		s, err := servers.Create(ctx, c.Compute(t), opts, nil).Extract()
		if err != nil {
			t.Fatal(err)
		}
		c.WaitForStatus(t, s.ID, "ERROR")
		c.WaitForFault(t, s.ID)
		return s.ID
	}
	ours := boot("web1", map[string]string{reaper.MetaRole: "web", reaper.MetaJournal: "web.1"})
	other := boot("other", nil)
	var listed map[string]reaper.Server
	testutil.Eventually(t, 30*time.Second, "both in ERROR in the list", func() bool {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		ss, err := n.List(ctx)
		if err != nil {
			t.Fatal(err)
		}
		listed = map[string]reaper.Server{}
		for _, s := range ss {
			listed[s.ID] = s
		}
		return listed[ours].Status == reaper.StatusError && listed[other].Status == reaper.StatusError
	})
	if f := listed[ours].Fault; !strings.Contains(f, "No valid host") {
		t.Fatalf("the reaper's server in ERROR is listed with fault %q, want Nova's No valid host", f)
	}
	if err := reaper.BootFailed("web1", listed[ours].Fault); reaper.ClassOf(err) != reaper.Capacity || !reaper.ZoneRefusal(err) {
		t.Fatalf("boot failure %v: want capacity, a zone's refusal", err)
	}
	if f := listed[other].Fault; f != "" {
		t.Fatalf("a server of no entry listed with fault %q: Nova's list carries none, and the reaper asks only for its own", f)
	}
}
