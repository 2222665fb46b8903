package daemon_test

import (
	"context"
	"slices"
	"sync/atomic"
	"testing"
	"time"

	"github.com/gophercloud/gophercloud/v2/openstack/compute/v2/instanceactions"
	"github.com/gophercloud/gophercloud/v2/openstack/compute/v2/servers"
	"github.com/hashicorp/consul/api"

	"github.com/jiocloud/orchestrate/internal/testutil"
	"github.com/jiocloud/orchestrate/reaper"
	"github.com/jiocloud/orchestrate/reaper/simcloud"
)

// repairCounting counts the reboots and rebuilds that reach Nova, and
// their answers.
type repairCounting struct {
	reaper.Cloud
	reboots, rebuilds atomic.Int64
	refused           atomic.Int64
}

func (c *repairCounting) Reboot(ctx context.Context, id string) error {
	c.reboots.Add(1)
	err := c.Cloud.Reboot(ctx, id)
	if reaper.ClassOf(err) == reaper.Conflict {
		c.refused.Add(1)
	}
	return err
}

func (c *repairCounting) Rebuild(ctx context.Context, req reaper.RebuildRequest) error {
	c.rebuilds.Add(1)
	err := c.Cloud.Rebuild(ctx, req)
	if reaper.ClassOf(err) == reaper.Conflict {
		c.refused.Add(1)
	}
	return err
}

// actions lists the instance actions Nova recorded for server id
// (create, reboot, rebuild, ...).
func (e *novaEnv) actions(id string) []string {
	e.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	page, err := instanceactions.List(e.compute, id, nil).AllPages(ctx)
	if err != nil {
		e.t.Fatalf("instance actions of %s: %v", id, err)
	}
	acts, err := instanceactions.ExtractInstanceActions(page)
	if err != nil {
		e.t.Fatal(err)
	}
	var out []string
	for _, a := range acts {
		out = append(out, a.Action)
	}
	slices.Sort(out)
	return out
}

// Repair before replace on the real Nova (its fake driver reboots and
// rebuilds): web2's reboot reaches Nova (a hard reboot, its instance
// action recorded) and the server comes back ACTIVE with the same ID,
// and serves again: no server is created. Then the role's image is
// rotated under its name; web3 is not mended by its reboot, and its
// rebuild reaches Nova: the same server, ACTIVE again on the image the
// configuration names now, its metadata kept. Last, a locked server
// (Nova refuses a reboot and a rebuild of it: 409) goes through its
// refused steps at once to its replacement.
func TestNovaRepairRebootAndRebuild(t *testing.T) {
	t.Parallel()
	e := startNova(t, false)
	name := "repair-" + e.cloud.ProjectName
	oldImage := e.cloud.CreateImage(t, name)
	cfg := e.config("    repair: [rerun, reboot, rebuild]\n    repair_grace: 3s\n")
	cfg.Roles[0].Boot.Image = name
	// A rebuild's grace is boot_grace: the machine the test plays
	// converges in a moment, Nova's rebuild takes seconds.
	cfg.Roles[0].BootGrace = reaper.Duration(30 * time.Second)
	cloud := &repairCounting{Cloud: e.nova}
	e.runReaper(cfg, cloud, nil)
	before := e.buildRole(t)

	// web2: a reboot mends it.
	setCritical(t, e.agent.Client, "web2")
	testutil.Eventually(t, 60*time.Second, "web2 rebooted by Nova (its action recorded), ACTIVE again", func() bool {
		return slices.Contains(e.actions(before["web2"].ID), "reboot") && e.servers()["web2"].Status == "ACTIVE"
	})
	if cloud.reboots.Load() != 1 {
		t.Fatalf("%d reboots asked, want 1", cloud.reboots.Load())
	}
	// The machine came back whole.
	if err := simcloud.RegisterNode(context.Background(), e.agent.Client, "web2", "web", api.HealthPassing); err != nil {
		t.Fatal(err)
	}
	testutil.Eventually(t, 30*time.Second, "web2 repaired by its reboot", func() bool {
		return len(journalKeys(t, e.agent.Client)) == 0 && repairHistoryHas(t, e.agent.Client, "finish", "web2 serves again: repaired by reboot")
	})
	if got := e.servers(); len(got) != 3 || got["web2"].ID != before["web2"].ID || got["web2"].Status != "ACTIVE" || cloud.rebuilds.Load() != 0 {
		t.Fatalf("after web2's reboot: %s (web2 was %s), rebuilds %d", serverNames(got), before["web2"].ID, cloud.rebuilds.Load())
	}

	// web3: the image is rotated under its name; the reboot does not
	// mend web3, its rebuild from the role's image does.
	e.cloud.DeleteImage(t, oldImage)
	newImage := e.cloud.CreateImage(t, name)
	setCritical(t, e.agent.Client, "web3")
	var rebuilt servers.Server
	testutil.Eventually(t, 90*time.Second, "web3 rebuilt by Nova from the rotated image, ACTIVE", func() bool {
		rebuilt = e.servers()["web3"]
		return rebuilt.Status == "ACTIVE" && rebuilt.Image["id"] == newImage
	})
	if rebuilt.ID != before["web3"].ID || cloud.rebuilds.Load() != 1 {
		t.Fatalf("web3 after its rebuild: ID %s (was %s), %d rebuilds", rebuilt.ID, before["web3"].ID, cloud.rebuilds.Load())
	}
	for _, k := range []string{reaper.MetaRole, reaper.MetaJournal, reaper.MetaSpec} {
		if rebuilt.Metadata[k] != before["web3"].Metadata[k] {
			t.Errorf("web3's metadata %s: %q after the rebuild, %q before", k, rebuilt.Metadata[k], before["web3"].Metadata[k])
		}
	}
	if acts := e.actions(before["web3"].ID); !slices.Contains(acts, "reboot") || !slices.Contains(acts, "rebuild") {
		t.Fatalf("Nova's actions on web3: %v, want a reboot and a rebuild", acts)
	}
	if err := simcloud.RegisterNode(context.Background(), e.agent.Client, "web3", "web", api.HealthPassing); err != nil {
		t.Fatal(err)
	}
	testutil.Eventually(t, 30*time.Second, "web3 repaired by its rebuild", func() bool {
		return len(journalKeys(t, e.agent.Client)) == 0 && repairHistoryHas(t, e.agent.Client, "finish", "web3 serves again: repaired by rebuild")
	})
	if got := e.servers(); len(got) != 3 || got["web3"].ID != before["web3"].ID || cloud.reboots.Load() != 2 {
		t.Fatalf("after web3's rebuild: %s, reboots %d", serverNames(got), cloud.reboots.Load())
	}

	// web1, locked: Nova refuses its reboot and its rebuild (409); each
	// ends its step at once, and the replacement is created.
	e.cloud.Lock(t, before["web1"].ID)
	setCritical(t, e.agent.Client, "web1")
	testutil.Eventually(t, 60*time.Second, "web1's replacement after two refused steps", func() bool {
		return e.servers()["web4"].Status == "ACTIVE"
	})
	if cloud.refused.Load() != 2 {
		t.Errorf("%d refused repair calls, want web1's reboot and rebuild", cloud.refused.Load())
	}
	if !repairHistoryHas(t, e.agent.Client, "create", "Nova refused the rebuild of web1") {
		t.Errorf("the replacement's reason does not say why the ladder ended: %v", readHistory(t, e.agent.Client))
	}
	e.cloud.Unlock(t, before["web1"].ID)
	testutil.Eventually(t, 60*time.Second, "web1 deleted once unlocked", func() bool {
		_, ok := e.servers()["web1"]
		return !ok && len(journalKeys(t, e.agent.Client)) == 0
	})
}
