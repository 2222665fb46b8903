package novatest

import (
	"bytes"
	"net/http"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/gophercloud/gophercloud/v2"
	"github.com/gophercloud/gophercloud/v2/openstack"
	"github.com/gophercloud/gophercloud/v2/openstack/compute/v2/servers"
	"github.com/gophercloud/gophercloud/v2/openstack/image/v2/imagedata"
	"github.com/gophercloud/gophercloud/v2/openstack/image/v2/images"
)

// CreateImage uploads a private image named name into the test's project
// (the fake driver boots nothing: a few bytes do) and waits for it to be
// active; it returns its ID. The image is deleted when the test ends.
func (c *Cloud) CreateImage(t testing.TB, name string) string {
	t.Helper()
	ctx, cancel := withTimeout(t, callTimeout)
	defer cancel()
	ic := c.imageClient(t)
	private := images.ImageVisibilityPrivate
	img, err := images.Create(ctx, ic, images.CreateOpts{Name: name, ContainerFormat: "bare", DiskFormat: "raw", Visibility: &private}).Extract()
	if err != nil {
		t.Fatalf("novatest: create image %s: %v", name, err)
	}
	t.Cleanup(func() { c.DeleteImage(t, img.ID) })
	if err := imagedata.Upload(ctx, ic, img.ID, bytes.NewReader(bytes.Repeat([]byte("orchestrate test image "+name+"\n"), 32))).ExtractErr(); err != nil {
		t.Fatalf("novatest: upload image %s: %v", name, err)
	}
	for {
		got, err := images.Get(ctx, ic, img.ID).Extract()
		if err == nil && got.Status == images.ImageStatusActive {
			return img.ID
		}
		select {
		case <-ctx.Done():
			t.Fatalf("novatest: image %s not active after %s (err %v)", name, callTimeout, err)
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// DeleteImage deletes one of the test's images; gone already is fine.
func (c *Cloud) DeleteImage(t testing.TB, id string) {
	t.Helper()
	ctx, cancel := withTimeout(t, callTimeout)
	defer cancel()
	if err := images.Delete(ctx, c.imageClient(t), id).ExtractErr(); err != nil && !gophercloud.ResponseCodeIs(err, http.StatusNotFound) {
		t.Errorf("novatest: delete image %s: %v", id, err)
	}
}

func (c *Cloud) imageClient(t testing.TB) *gophercloud.ServiceClient {
	t.Helper()
	ic, err := openstack.NewImageV2(c.user, c.endpoint())
	if err != nil {
		t.Fatalf("novatest: image client: %v", err)
	}
	return ic
}

// Lock locks one of the project's servers as the test's user: Nova then
// refuses to delete it (409) to anyone but an admin, as it does for a
// server an operator protected. It is unlocked when the test ends, so the
// project's cleanup can delete it.
func (c *Cloud) Lock(t testing.TB, id string) {
	t.Helper()
	ctx, cancel := withTimeout(t, callTimeout)
	defer cancel()
	if err := servers.Lock(ctx, c.Compute(t), id).ExtractErr(); err != nil {
		t.Fatalf("novatest: lock server %s: %v", id, err)
	}
	t.Cleanup(func() { c.Unlock(t, id) })
}

// Unlock unlocks a server Lock locked; gone already is fine.
func (c *Cloud) Unlock(t testing.TB, id string) {
	t.Helper()
	ctx, cancel := withTimeout(t, callTimeout)
	defer cancel()
	if err := servers.Unlock(ctx, c.Compute(t), id).ExtractErr(); err != nil && !gophercloud.ResponseCodeIs(err, http.StatusNotFound) {
		t.Errorf("novatest: unlock server %s: %v", id, err)
	}
}

var uuidRE = regexp.MustCompile(`^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$`)

// MoveToDownCell maps one of the project's servers to the cell e2e-down,
// whose database nothing serves (scripts/nova/configure.sh), as when the
// server's cell goes down: at microversion 2.69 or later Nova lists it as
// a partial record (status UNKNOWN, no name). The server itself stays in
// cell1's database, so this cloud also lists it whole beside the partial
// record; a real down cell shows only the partial one. It writes Nova's
// API database through the MariaDB client as root (unix socket), which
// `make nova-up` set up; the mapping is moved back by the returned
// function and, at the latest, when the test ends.
func (c *Cloud) MoveToDownCell(t testing.TB, id string) (restore func()) {
	t.Helper()
	if !uuidRE.MatchString(id) {
		t.Fatalf("novatest: %q is not a server ID", id)
	}
	c.mapToCell(t, id, "e2e-down")
	done := false
	restore = func() {
		if !done {
			done = true
			c.mapToCell(t, id, "cell1")
		}
	}
	t.Cleanup(restore)
	return restore
}

// mapToCell points the instance mapping of server id at the named cell.
func (c *Cloud) mapToCell(t testing.TB, id, cell string) {
	t.Helper()
	ctx, cancel := withTimeout(t, callTimeout)
	defer cancel()
	// id is a UUID and cell a constant: nothing in the statement comes
	// from elsewhere.
	sql := "update nova_api.instance_mappings m join nova_api.cell_mappings c on c.name='" + cell +
		"' set m.cell_id=c.id where m.instance_uuid='" + id + "'; select row_count();"
	cmd := exec.CommandContext(ctx, "mariadb", "--defaults-file="+filepath.Join(c.Dir, "etc", "my.cnf"), "-N", "-B")
	cmd.Stdin = strings.NewReader(sql)
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("novatest: map server %s to cell %s: %v: %s (the cell e2e-down needs `make nova-up` of this version, run as root)", id, cell, err, out)
	}
	if strings.TrimSpace(string(out)) != "1" {
		t.Fatalf("novatest: map server %s to cell %s: %s rows changed, want 1 (no cell %s? rerun `make nova-up`)", id, cell, strings.TrimSpace(string(out)), cell)
	}
}
