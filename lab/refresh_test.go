//go:build lab

package lab

import (
	"bytes"
	"context"
	"encoding/base64"
	"fmt"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gophercloud/gophercloud/v2/openstack/compute/v2/servers"
	"github.com/gophercloud/gophercloud/v2/openstack/image/v2/imagedata"
	"github.com/gophercloud/gophercloud/v2/openstack/image/v2/images"
	"github.com/hashicorp/consul/api"

	"github.com/jiocloud/orchestrate/internal/paths"
	"github.com/jiocloud/orchestrate/internal/store/reaperkv"
	"github.com/jiocloud/orchestrate/internal/store/schema"
	"github.com/jiocloud/orchestrate/lab/invariant"
	"github.com/jiocloud/orchestrate/reaper"
)

// refreshImage is the second Glance image the refresh scenario points
// every role at: named by version, as reaper/README.md asks, so that the
// reaper sees a new boot spec. The lab hypervisor boots every container
// from the lab's own rootfs whatever the image: only the spec changes.
const refreshImage = "e2e-tiny-v2"

// refreshPercent is the --min-healthy-percent the scenario asks of a role
// of count servers: the whole role for a role of one or two (100%: the
// share leaves a batch of 0, which the reaper raises to 1, and create-first
// keeps every server serving), all but one of a bigger one (its batch of
// 1 comes from the share itself).
func refreshPercent(count int) int {
	if count <= 2 {
		return 100
	}
	return 100 * (count - 1) / count
}

// share is ceil(percent% of count): the serving count a refresh at that
// percent keeps, as the reaper's batch counts it.
func share(percent, count int) int { return (count*percent + 99) / 100 }

// scenarioRefresh: a new image for every role (a second Glance image, the
// bootstrap servers' reaper.yaml rewritten, their reapers restarted); the
// reaper reports every server drifted; `orchestrate refresh ROLE
// --min-healthy-percent P` for each role replaces them all create-first,
// a batch at a time, sampled all along: no role ever serves below its
// min_healthy nor below its share. At the end every server carries the new
// spec, no request is left, the journal is empty and the cloud is at rest.
func scenarioRefresh(t *testing.T, l *Lab) map[string]string {
	ctx := context.Background()
	w := newRefreshWatch(l.Size)
	sctx, stop := context.WithCancel(ctx)
	sampled := make(chan struct{})
	go func() { defer close(sampled); l.watchRefresh(sctx, w) }()
	defer func() { stop(); <-sampled }()
	if err := l.ensureImage(ctx, refreshImage); err != nil {
		t.Fatal(err)
	}
	oldSpec, newSpec, again := l.setRoleImage(t, refreshImage)
	ss, err := l.Servers(ctx)
	if err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	for _, r := range l.Size.Roles {
		p := refreshPercent(r.Count)
		w.requested(r.Name, serversOf(ss, r.Name), time.Now())
		out, code := l.orchestrate(ctx, "refresh", r.Name, "--min-healthy-percent", fmt.Sprint(p), "--reason", "lab: new image "+refreshImage, "--yes")
		if code != 0 {
			t.Fatalf("orchestrate refresh %s: exit %d: %s", r.Name, code, out)
		}
	}
	var last string
	took := l.wait(t, 30*time.Minute, "every role refreshed onto "+refreshImage, func() bool {
		return l.refreshed(t, w, newSpec, &last)
	})
	l.waitRest(t, 15*time.Minute, "after the refresh")
	stop()
	<-sampled
	l.checkSpecs(t, oldSpec, newSpec)
	figures := w.figures(t)
	figures["image"], figures["leader_again_after"] = refreshImage, again.Round(time.Second).String()
	figures["refresh_took"] = took.Round(time.Second).String()
	figures["rest_after"] = time.Since(start).Round(time.Second).String()
	return figures
}

// ensureImage makes sure an active image of that name is in the lab's
// Glance (its Nova keeps its data between runs): a few bytes do, the fake
// virt driver boots nothing.
func (l *Lab) ensureImage(ctx context.Context, name string) error {
	pages, err := images.List(l.Image, images.ListOpts{Name: name}).AllPages(ctx)
	if err != nil {
		return fmt.Errorf("list images %s: %w", name, err)
	}
	list, err := images.ExtractImages(pages)
	if err != nil {
		return err
	}
	for _, img := range list {
		if img.Status == images.ImageStatusActive {
			return nil
		}
		// A half-made one from an interrupted run.
		if err := images.Delete(ctx, l.Image, img.ID).ExtractErr(); err != nil {
			return fmt.Errorf("delete image %s (%s): %w", name, img.Status, err)
		}
	}
	public := images.ImageVisibilityPublic
	img, err := images.Create(ctx, l.Image, images.CreateOpts{Name: name, ContainerFormat: "bare", DiskFormat: "raw", Visibility: &public}).Extract()
	if err != nil {
		return fmt.Errorf("create image %s: %w", name, err)
	}
	data := bytes.Repeat([]byte("orchestrate lab image "+name+"\n"), 32)
	if err := imagedata.Upload(ctx, l.Image, img.ID, bytes.NewReader(data)).ExtractErr(); err != nil {
		return fmt.Errorf("upload image %s: %w", name, err)
	}
	for deadline := time.Now().Add(2 * time.Minute); time.Now().Before(deadline); time.Sleep(500 * time.Millisecond) {
		got, err := images.Get(ctx, l.Image, img.ID).Extract()
		if err == nil && got.Status == images.ImageStatusActive {
			return nil
		}
	}
	return fmt.Errorf("image %s not active after 2 minutes", name)
}

// setRoleImage points every role at image: reaper.yaml rewritten on the
// bootstrap servers (and the operator's copy), the follower's reaper
// restarted, then the leader's. It waits for a reaper leading on the new
// specs and checks it reports every member of every role drifted. It
// returns each role's spec before and after, and how long the reapers
// took to lead again.
func (l *Lab) setRoleImage(t *testing.T, image string) (before, after map[string]string, again time.Duration) {
	t.Helper()
	ctx := context.Background()
	rep, err := l.Report(ctx)
	if err != nil || rep == nil {
		t.Fatalf("reaper report: %v", err)
	}
	before = map[string]string{}
	for _, r := range rep.Roles {
		before[r.Name] = r.Spec
	}
	leader, _, _ := strings.Cut(rep.Leader, "-")
	ss, err := l.Servers(ctx)
	if err != nil {
		t.Fatal(err)
	}
	var boots []string
	for _, s := range ss {
		if s.Role == bootstrapRole {
			boots = append(boots, s.Name)
		}
	}
	// The leader last: one change of leader, to a reaper on the new specs.
	sort.Slice(boots, func(i, j int) bool {
		if a, b := boots[i] == leader, boots[j] == leader; a != b {
			return b
		}
		return boots[i] < boots[j]
	})
	l.roleImage = image
	if err := writeFile(l.hostReaperConfig(), []byte(l.reaperConfig(true)), 0o600); err != nil {
		t.Fatal(err)
	}
	cfg := base64.StdEncoding.EncodeToString([]byte(l.reaperConfig(false)))
	for _, b := range boots {
		l.sh(t, b, fmt.Sprintf("umask 077; echo %s | base64 -d > %[2]s.new && chown root:orchestrate %[2]s.new && chmod 0640 %[2]s.new && mv -f %[2]s.new %[2]s", cfg, paths.ReaperConfig))
	}
	var restarted time.Time
	for _, b := range boots {
		restarted = time.Now()
		l.sh(t, b, "systemctl restart "+paths.ReaperUnit+" && systemctl is-active "+paths.ReaperUnit)
	}
	again = l.wait(t, 3*time.Minute, "a reaper leading on the new boot specs", func() bool {
		rep, err = l.Report(ctx)
		if err != nil || rep == nil || !rep.Time.After(restarted) || len(rep.Roles) != len(before) {
			return false
		}
		for _, r := range rep.Roles {
			if r.Spec == before[r.Name] {
				return false
			}
		}
		return true
	})
	after = map[string]string{}
	for _, r := range rep.Roles {
		after[r.Name] = r.Spec
		if r.Spec == before[r.Name] || r.Drifted != len(serversOf(ss, r.Name)) || r.Refresh != nil {
			t.Fatalf("role %s after the new image: spec %.12s (was %.12s), %d drifted of %d, refresh %v: want a new spec, every server drifted, no refresh yet",
				r.Name, r.Spec, before[r.Name], r.Drifted, len(serversOf(ss, r.Name)), r.Refresh)
		}
	}
	t.Logf("reaper %s (was %s) leads on the boot specs of %s after %s; every server drifted", rep.Leader, leader, image, again.Round(time.Second))
	return before, after, again
}

// refreshed says whether the refresh is over: no request left, the
// journal empty, every role at its count with every member on its new
// spec. It logs each role's refresh line as it changes, and fails t as
// soon as the watch saw a role below its share.
func (l *Lab) refreshed(t *testing.T, w *refreshWatch, spec map[string]string, last *string) bool {
	t.Helper()
	w.failIfBroken(t)
	ctx := context.Background()
	rep, err := l.Report(ctx)
	if err != nil || rep == nil {
		return false
	}
	var lines []string
	for _, r := range rep.Roles {
		if r.Refresh != nil {
			lines = append(lines, r.Name+": "+r.Refresh.String())
		}
	}
	if s := strings.Join(lines, "\n"); s != *last && s != "" {
		t.Logf("refresh:\n%s", s)
		*last = s
	}
	keys, _, err := l.Admin.KV().Keys(reaperkv.ReaperKey(schema.DefaultPrefix, reaperkv.ReaperRefreshDir), "", (&api.QueryOptions{}).WithContext(ctx))
	if err != nil || len(keys) > 0 || len(rep.Journal) > 0 {
		return false
	}
	ss, err := l.specServers(ctx)
	if err != nil {
		return false
	}
	for _, r := range l.Size.Roles {
		n := 0
		for _, s := range ss {
			if s.role == r.Name && !s.standby {
				if s.spec != spec[r.Name] {
					return false
				}
				n++
			}
		}
		if n != r.Count {
			return false
		}
	}
	return true
}

// specServer is a Nova server with the boot spec it records.
type specServer struct {
	name, role, spec string
	standby          bool
}

// specServers lists Nova's servers with their reaper-spec.
func (l *Lab) specServers(ctx context.Context) ([]specServer, error) {
	pages, err := servers.List(l.Compute, servers.ListOpts{}).AllPages(ctx)
	if err != nil {
		return nil, err
	}
	list, err := servers.ExtractServers(pages)
	if err != nil {
		return nil, err
	}
	var out []specServer
	for _, s := range list {
		out = append(out, specServer{name: s.Name, role: s.Metadata["role"], spec: s.Metadata[reaper.MetaSpec], standby: s.Metadata[reaper.MetaStandby] != ""})
	}
	return out, nil
}

// checkSpecs: every server of every role, standbys too, records the spec
// the reaper reports for its role, which is the new one; no refresh
// request is left and the journal is empty.
func (l *Lab) checkSpecs(t *testing.T, before, after map[string]string) {
	t.Helper()
	ctx := context.Background()
	rep, err := l.Report(ctx)
	if err != nil || rep == nil {
		t.Fatalf("reaper report: %v", err)
	}
	if len(rep.Journal) > 0 {
		t.Fatalf("the journal holds %d entries at rest: %+v", len(rep.Journal), rep.Journal)
	}
	keys, _, err := l.Admin.KV().Keys(reaperkv.ReaperKey(schema.DefaultPrefix, reaperkv.ReaperRefreshDir), "", nil)
	if err != nil || len(keys) > 0 {
		t.Fatalf("refresh requests left: %v (%v)", keys, err)
	}
	ss, err := l.specServers(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range rep.Roles {
		// The report of the cycle that removed a done request still
		// shows it, as done; the next cycle's shows none.
		if r.Spec != after[r.Name] || r.Spec == before[r.Name] || r.Drifted+r.SpecUnknown > 0 || (r.Refresh != nil && r.Refresh.State != "done") {
			t.Fatalf("role %s at rest: spec %.12s (new %.12s, old %.12s), %d drifted, %d unknown, refresh %v", r.Name, r.Spec, after[r.Name], before[r.Name], r.Drifted, r.SpecUnknown, r.Refresh)
		}
		for _, s := range ss {
			if s.role == r.Name && s.spec != r.Spec {
				t.Fatalf("%s (role %s, standby %v) records spec %.12s, the reaper reports %.12s", s.name, r.Name, s.standby, s.spec, r.Spec)
			}
		}
	}
}

// refreshWatch samples the cloud every second or so for the whole
// scenario: each role's members serving, against its min_healthy and its
// refresh share, and when each member of the role as it was at the
// request leaves Nova's list (the end of its batch).
//
// Serving is counted as the reaper counts it (and Consul DNS): a member
// serves once it was seen with its validation check passing and no check
// critical, for as long as no check of its node is critical (a drain's
// maintenance is). A node re-running its eventual step (its converge check
// in warning while Puppet runs, never critical by design) still serves;
// the fewest members with every check passing is kept as a figure too.
type refreshWatch struct {
	mu      sync.Mutex
	roles   []*refreshRole
	served  map[string]bool // Nova ID -> seen serving
	samples int
	first   time.Time
	last    time.Time
	// broken is the first sample that saw a role below its share or its
	// min_healthy.
	broken string
}

// refreshRole is one role's part of the watch.
type refreshRole struct {
	name                              string
	count, minHealthy, percent, share int
	// requested is when its refresh was asked for; old its members then
	// (ID -> name), gone when each of them left Nova's list, in order.
	requested time.Time
	old       map[string]string
	gone      []time.Time
	// least is the fewest members serving in a sample, at leastAt;
	// leastPassing the fewest with every check passing.
	least, leastPassing int
	leastAt             time.Time
	// reported: the reaper's report showed the request's percent; batch
	// the largest batch it reported.
	reported bool
	batch    int
}

func newRefreshWatch(size Size) *refreshWatch {
	w := &refreshWatch{served: map[string]bool{}}
	for _, r := range size.Roles {
		p := refreshPercent(r.Count)
		w.roles = append(w.roles, &refreshRole{name: r.Name, count: r.Count, minHealthy: r.MinHealthy, percent: p, share: share(p, r.Count),
			least: r.Count + 1, leastPassing: r.Count + 1})
	}
	return w
}

// requested records the role's refresh request, and its members then.
func (w *refreshWatch) requested(role string, members []invariant.Server, at time.Time) {
	w.mu.Lock()
	defer w.mu.Unlock()
	for _, rr := range w.roles {
		if rr.name == role {
			rr.requested, rr.old = at, map[string]string{}
			for _, s := range members {
				rr.old[s.ID] = s.Name
			}
		}
	}
}

// watchRefresh samples until ctx ends: one look, then a second's pause.
func (l *Lab) watchRefresh(ctx context.Context, w *refreshWatch) {
	for ctx.Err() == nil {
		ss, err1 := l.Servers(ctx)
		health, err2 := l.roleHealth(ctx)
		rep, _ := l.Report(ctx)
		if err1 == nil && err2 == nil {
			w.sample(time.Now(), ss, health, rep)
		}
		select {
		case <-ctx.Done():
		case <-time.After(time.Second):
		}
	}
}

// sample takes one look: each role's members serving, the old members
// gone, the reaper's view of the refresh.
func (w *refreshWatch) sample(now time.Time, ss []invariant.Server, health map[string]nodeHealth, rep *reaperkv.ReaperReport) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.samples == 0 {
		w.first = now
	}
	w.samples++
	w.last = now
	for _, rr := range w.roles {
		n, passing, present := 0, 0, map[string]bool{}
		for _, s := range serversOf(ss, rr.name) {
			present[s.ID] = true
			h, ok := health[s.Name]
			// The first look is at the cloud at rest (waitRest just saw
			// every member serve on the version).
			if ok && !h.critical && (h.validated || w.samples == 1) {
				w.served[s.ID] = true
			}
			if ok && !h.critical && w.served[s.ID] {
				n++
			}
			if ok && h.passing {
				passing++
			}
		}
		if n < rr.least {
			rr.least, rr.leastAt = n, now
		}
		rr.leastPassing = min(rr.leastPassing, passing)
		if (n < rr.share || n < rr.minHealthy) && w.broken == "" {
			w.broken = fmt.Sprintf("%s: role %s had %d members serving, below its share %d (%d%% of %d) or min_healthy %d",
				now.UTC().Format("15:04:05"), rr.name, n, rr.share, rr.percent, rr.count, rr.minHealthy)
		}
		for id := range rr.old {
			if !present[id] {
				delete(rr.old, id)
				rr.gone = append(rr.gone, now)
			}
		}
		w.seeReport(rr, rep)
	}
}

// seeReport notes the reaper's view of the role's refresh: its percent
// and batch.
func (w *refreshWatch) seeReport(rr *refreshRole, rep *reaperkv.ReaperReport) {
	if rep == nil {
		return
	}
	for _, r := range rep.Roles {
		if r.Name == rr.name && r.Refresh != nil && r.Refresh.MinHealthyPercent == rr.percent {
			rr.reported, rr.batch = true, max(rr.batch, r.Refresh.Batch)
		}
	}
}

// failIfBroken fails t once a sample saw a role below its share.
func (w *refreshWatch) failIfBroken(t *testing.T) {
	t.Helper()
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.broken != "" {
		t.Fatalf("below the share: %s", w.broken)
	}
}

// figures checks what the watch saw (never below the share, every old
// member gone, the request's percent in the report) and gives, per role,
// the time per batch (from the request, or the batch before, to its old
// server leaving Nova's list), the fewest serving against the share.
func (w *refreshWatch) figures(t *testing.T) map[string]string {
	t.Helper()
	w.failIfBroken(t)
	w.mu.Lock()
	defer w.mu.Unlock()
	out := map[string]string{}
	for _, rr := range w.roles {
		if len(rr.old) > 0 || len(rr.gone) != rr.count || !rr.reported {
			t.Fatalf("role %s: %d of %d old members replaced (left: %v); the report showed its %d%%: %v", rr.name, len(rr.gone), rr.count, rr.old, rr.percent, rr.reported)
		}
		var most time.Duration
		prev := rr.requested
		for _, g := range rr.gone {
			most = max(most, g.Sub(prev))
			prev = g
		}
		mean := prev.Sub(rr.requested) / time.Duration(len(rr.gone))
		out[rr.name] = fmt.Sprintf("[%d batches of %d at %d%%: mean %s, max %s; least serving %d (every check passing %d), share %d, min_healthy %d]",
			len(rr.gone), rr.batch, rr.percent, mean.Round(time.Second), most.Round(time.Second), rr.least, rr.leastPassing, rr.share, rr.minHealthy)
	}
	out["samples"] = fmt.Sprintf("%d, one per %s", w.samples, (w.last.Sub(w.first) / time.Duration(max(w.samples-1, 1))).Round(100*time.Millisecond))
	return out
}
