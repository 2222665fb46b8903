package novatest

import (
	"context"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/gophercloud/gophercloud/v2"
	"github.com/gophercloud/gophercloud/v2/openstack/compute/v2/servers"
	"github.com/gophercloud/gophercloud/v2/openstack/identity/v3/tokens"
	"github.com/gophercloud/gophercloud/v2/pagination"
)

// TestNovaSmoke proves the cloud does, through gophercloud, what the
// reaper's end-to-end tests need: a token for the test's own project, the
// flavor and image, a create with networks "none", metadata and tags that
// goes ACTIVE, one naming security groups, a paginated list, an over-quota
// create refused with 403 "Quota exceeded", a create no host can take ending
// in ERROR "No valid host", a server the admin puts into ERROR, and a delete
// that ends in 404.
func TestNovaSmoke(t *testing.T) {
	c := Start(t)
	ctx := t.Context()
	compute := c.Compute(t)

	// Token: scoped to the test's project, not admin's.
	res, ok := c.user.GetAuthResult().(tokens.CreateResult)
	if !ok {
		t.Fatalf("auth result is %T, want a v3 token", c.user.GetAuthResult())
	}
	proj, err := res.ExtractProject()
	if err != nil || proj.ID != c.ProjectID {
		t.Fatalf("token project = %+v (err %v), want %s", proj, err, c.ProjectID)
	}
	if c.FlavorID == "" || c.ImageID == "" {
		t.Fatalf("flavor %q -> %q, image %q -> %q", c.Flavor, c.FlavorID, c.Image, c.ImageID)
	}
	if all, err := c.ListServers(ctx, compute); err != nil || len(all) != 0 {
		t.Fatalf("new project has servers %s (err %v)", describe(all), err)
	}

	// Create with networks "none" and metadata -> ACTIVE.
	// Tags too, at the client's microversion.
	meta := map[string]string{"role": "smoke", "orchestrate-journal": "j-1"}
	opts1 := c.CreateOpts("smoke1", meta)
	opts1.Tags = []string{"orchestrate", "role-smoke"}
	start := time.Now()
	created1, err := servers.Create(ctx, compute, opts1, nil).Extract()
	if err != nil {
		t.Fatalf("create: %v", err)
	}
	s1 := c.WaitForStatus(t, created1.ID, "ACTIVE")
	t.Logf("create -> ACTIVE: %s", time.Since(start).Round(time.Millisecond))
	for k, v := range meta {
		if s1.Metadata[k] != v {
			t.Errorf("server metadata %s = %q, want %q (all: %v)", k, s1.Metadata[k], v, s1.Metadata)
		}
	}
	if s1.Tags == nil {
		t.Errorf("server has no tags, want [orchestrate role-smoke]")
	} else if tags := slices.Sorted(slices.Values(*s1.Tags)); !slices.Equal(tags, []string{"orchestrate", "role-smoke"}) {
		t.Errorf("server tags = %v, want [orchestrate role-smoke]", tags)
	}
	// Named security groups: the Neutron stand-in knows any name, so a boot
	// spec that lists them works (nothing is enforced: no ports).
	opts := c.CreateOpts("smoke2", map[string]string{"role": "smoke"})
	opts.SecurityGroups = []string{"default", "web"}
	created, err := servers.Create(ctx, compute, opts, nil).Extract()
	if err != nil {
		t.Fatalf("create with security groups: %v", err)
	}
	s2 := c.WaitForStatus(t, created.ID, "ACTIVE")

	// Paginated list: one server a page, both servers, two pages.
	var pages int
	seen := map[string]bool{}
	err = servers.List(compute, servers.ListOpts{Limit: 1}).EachPage(ctx, func(_ context.Context, p pagination.Page) (bool, error) {
		ss, err := servers.ExtractServers(p)
		if err != nil {
			return false, err
		}
		if len(ss) > 1 {
			return false, fmt.Errorf("page of %d servers with limit 1", len(ss))
		}
		pages++
		for _, s := range ss {
			seen[s.ID] = true
		}
		return true, nil
	})
	if err != nil {
		t.Fatalf("paginated list: %v", err)
	}
	if !seen[s1.ID] || !seen[s2.ID] || len(seen) != 2 || pages < 2 {
		t.Fatalf("paginated list saw %v in %d pages, want %s and %s in 2 or more", seen, pages, s1.ID, s2.ID)
	}

	// Quota 2 with 2 ACTIVE servers: a third create is refused.
	c.SetInstanceQuota(t, 2)
	_, err = servers.Create(ctx, compute, c.CreateOpts("smoke3", nil), nil).Extract()
	if !gophercloud.ResponseCodeIs(err, http.StatusForbidden) || !strings.Contains(err.Error(), "Quota exceeded") {
		t.Fatalf("over-quota create: err = %v, want 403 Quota exceeded", err)
	}
	t.Logf("over-quota create: %v", err)
	if all, err := c.ListServers(ctx, compute); err != nil || len(all) != 2 {
		t.Fatalf("after the refused create the project has %s (err %v), want 2 servers", describe(all), err)
	}

	// Out of capacity: the create is accepted (quota allows it), the
	// scheduler finds no host, the server goes to ERROR with Nova's fault.
	c.SetInstanceQuota(t, 3)
	if c.NoHostFlavorID == "" {
		t.Fatal("the env file names no no-host flavor: rerun `make nova-up`")
	}
	opts3 := c.CreateOpts("smoke-nohost", nil)
	opts3.FlavorRef = c.NoHostFlavorID
	created3, err := servers.Create(ctx, compute, opts3, nil).Extract()
	if err != nil {
		t.Fatalf("create with the no-host flavor: %v", err)
	}
	c.WaitForStatus(t, created3.ID, "ERROR")
	fault := c.WaitForFault(t, created3.ID)
	if !strings.Contains(fault, "No valid host") {
		t.Fatalf("no-host server fault = %q, want No valid host", fault)
	}
	t.Logf("no-host create: ERROR, fault %q", fault)

	// A server the admin puts into ERROR shows as ERROR to the project.
	c.SetServerError(t, s2.ID)
	c.WaitForStatus(t, s2.ID, "ERROR")

	// Delete -> 404.
	start = time.Now()
	if err := servers.Delete(ctx, compute, s1.ID).ExtractErr(); err != nil {
		t.Fatalf("delete %s: %v", s1.ID, err)
	}
	c.WaitGone(t, s1.ID)
	t.Logf("delete -> 404: %s", time.Since(start).Round(time.Millisecond))

	c.DeleteAllServers(t)
	if all, err := c.ListServers(ctx, compute); err != nil || len(all) != 0 {
		t.Fatalf("after DeleteAllServers: %s (err %v)", describe(all), err)
	}
}

// TestNovaProjectsAreSeparate proves two Clouds do not see each other's
// servers, so packages testing against the one Nova in parallel cannot
// disturb each other.
func TestNovaProjectsAreSeparate(t *testing.T) {
	a, b := Start(t), Start(t)
	if a.ProjectID == b.ProjectID {
		t.Fatalf("two Clouds share project %s", a.ProjectID)
	}
	s := a.CreateServer(t, "mine", nil)
	seen, err := b.ListServers(t.Context(), b.Compute(t))
	if err != nil {
		t.Fatal(err)
	}
	if len(seen) != 0 {
		t.Fatalf("project %s sees %s, created in %s", b.ProjectName, describe(seen), a.ProjectName)
	}
	b.DeleteAllServers(t)
	if _, err := servers.Get(t.Context(), a.Compute(t), s.ID).Extract(); err != nil {
		t.Fatalf("server %s gone after another project's DeleteAllServers: %v", s.ID, err)
	}
}

// BenchmarkNovaCreateDelete measures one server's round trip on the fake
// driver: create -> ACTIVE -> delete -> 404.
func BenchmarkNovaCreateDelete(b *testing.B) {
	c := Start(b)
	compute := c.Compute(b)
	for i := 0; b.Loop(); i++ {
		s := c.CreateServer(b, fmt.Sprintf("bench%d", i), nil)
		if err := servers.Delete(b.Context(), compute, s.ID).ExtractErr(); err != nil {
			b.Fatal(err)
		}
		c.WaitGone(b, s.ID)
	}
}

func TestParseEnv(t *testing.T) {
	full := "# written by start.sh\nOS_AUTH_URL=http://127.0.0.1:1/v3\nexport OS_USERNAME=admin\nOS_PASSWORD='p=w'\n" +
		"OS_PROJECT_NAME=admin\nOS_USER_DOMAIN_NAME=Default\nOS_PROJECT_DOMAIN_NAME=Default\n\n" +
		"OS_REGION_NAME=RegionOne\nNOVA_E2E_FLAVOR=f\nNOVA_E2E_IMAGE=i\n"
	tests := []struct {
		name, text, wantErr string
		want                map[string]string
	}{
		{name: "full", text: full, want: map[string]string{"OS_USERNAME": "admin", "OS_PASSWORD": "p=w", "NOVA_E2E_IMAGE": "i"}},
		{name: "missing key", text: strings.Replace(full, "NOVA_E2E_IMAGE=i\n", "", 1), wantErr: "NOVA_E2E_IMAGE missing"},
		{name: "empty value", text: strings.Replace(full, "OS_REGION_NAME=RegionOne", "OS_REGION_NAME=", 1), wantErr: "OS_REGION_NAME missing"},
		{name: "no equals", text: full + "garbage\n", wantErr: "line 12: want KEY=value"},
		{name: "bad key", text: "1X=y\n" + full, wantErr: "line 1: want KEY=value"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			p := filepath.Join(t.TempDir(), "env")
			if err := os.WriteFile(p, []byte(tc.text), 0o600); err != nil {
				t.Fatal(err)
			}
			got, err := parseEnv(p)
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("err = %v, want %q", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			for k, v := range tc.want {
				if got[k] != v {
					t.Errorf("%s = %q, want %q", k, got[k], v)
				}
			}
		})
	}
}

func TestEnvPath(t *testing.T) {
	t.Setenv("NOVA_E2E_ENV", "")
	t.Setenv("NOVA_E2E_DIR", "")
	if got := EnvPath(); got != DefaultDir+"/env" {
		t.Errorf("default: %s", got)
	}
	t.Setenv("NOVA_E2E_DIR", "/x")
	if got := EnvPath(); got != "/x/env" {
		t.Errorf("NOVA_E2E_DIR: %s", got)
	}
	t.Setenv("NOVA_E2E_ENV", "/y/file")
	if got := EnvPath(); got != "/y/file" {
		t.Errorf("NOVA_E2E_ENV: %s", got)
	}
}
