package daemon_test

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/consul/api"

	"github.com/jiocloud/orchestrate/internal/logship"
	"github.com/jiocloud/orchestrate/internal/store"
	"github.com/jiocloud/orchestrate/internal/swifttest"
	"github.com/jiocloud/orchestrate/internal/testutil"
)

var grantInUserData = regexp.MustCompile(`(?m)^      (\{"container_url".*\})$`)

// With logs: each server the reaper builds finds a write-only grant for
// its own prefix in its user data, one a real Swift honours; the reaper
// keeps a renewed one in loggrants/<host> before it expires, re-signs one
// a hand changed, and removes the grant of a server that is gone. The key
// shows nowhere but in its file.
func TestLogGrantsIssuedAndRenewed(t *testing.T) {
	t.Parallel()
	f, rc := identityWorld(t)
	admin := f.c
	s := swifttest.Start(t)
	c := s.NewContainer(t)
	keyFile := filepath.Join(t.TempDir(), "swift-temp-url.key")
	if err := os.WriteFile(keyFile, []byte(c.Key+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	nodeKey := f.cfg.NodeIdentity.KeyFile
	// A grant of 2 minutes renewed when under 119 s are left: the reaper
	// renews it about a second after it signed it.
	f.cfg = fastConfig(t, "node_identity: {key_file: "+nodeKey+"}\nlogs: {container_url: "+c.URL+", temp_url_key_file: "+keyFile+", grant_lifetime: 2m, renew_before: 119s}\n")
	f.seed(3)
	arm(t, admin)
	if _, err := admin.KV().Put(&api.KVPair{Key: prefix + "/roles/web/desired", Value: []byte("4")}, nil); err != nil {
		t.Fatal(err)
	}
	startReaper(t, f.cfg, rc, f.cloud, nil)
	testutil.Eventually(t, 15*time.Second, "web4 built", func() bool { return strings.Contains(names(f.sim.Servers()), "web4") })
	ud := f.sim.UserData("web4")
	m := grantInUserData.FindSubmatch(ud)
	if m == nil {
		t.Fatalf("web4's user data holds no log grant:\n%s", ud)
	}
	g, err := logship.ParseGrant(m[1])
	if err != nil || g.Host() != "web4" || g.ContainerURL != c.URL {
		t.Fatalf("web4's grant: %v %v", g, err)
	}
	if !bytes.Contains(ud, []byte("path: /etc/orchestrate/log-grant.json\n    owner: root:root\n    permissions: \"0600\"")) {
		t.Fatalf("the grant's file is not root's, 0600:\n%s", ud)
	}
	ctx := context.Background()
	obj, _ := logship.ObjectName("web4", "v1", "provision", time.Now())
	if err := logship.Put(ctx, logship.Client(10*time.Second), g, obj, []byte("boot failed\n"), time.Now()); err != nil {
		t.Fatalf("Swift refuses the grant the reaper delivered: %v", err)
	}
	if err := logship.Put(ctx, logship.Client(10*time.Second), g, "web1/v1/provision/x.log", []byte("x"), time.Now()); err == nil {
		t.Fatal("web4's grant wrote under web1/")
	}

	st := mustStoreOf(t, admin)
	grantOf := func(host string) (logship.Grant, bool) {
		raw, err := st.LogGrant(ctx, host)
		if err != nil || raw == nil {
			return logship.Grant{}, false
		}
		g, err := logship.ParseGrant(raw)
		return g, err == nil
	}
	testutil.Eventually(t, 15*time.Second, "web4's grant renewed in KV", func() bool {
		kv, ok := grantOf("web4")
		return ok && kv.Expires.After(g.Expires)
	})
	// A grant changed by hand (signed with another key) is re-signed.
	forged, _ := logship.SignGrant([]byte("another key"), c.URL, "web4", time.Now().Add(time.Hour))
	raw, _ := json.Marshal(forged)
	if err := st.PutLogGrant(ctx, "web4", raw); err != nil {
		t.Fatal(err)
	}
	testutil.Eventually(t, 15*time.Second, "the forged grant re-signed", func() bool {
		kv, ok := grantOf("web4")
		return ok && kv.Signature != forged.Signature
	})
	kv, _ := grantOf("web4")
	if err := logship.Put(ctx, logship.Client(10*time.Second), kv, "web4/v1/provision/y.log", []byte("y"), time.Now()); err != nil {
		t.Fatalf("Swift refuses the renewed grant: %v", err)
	}
	// web4 dies and is replaced: its grant goes with its token.
	setCritical(t, admin, "web4")
	testutil.Eventually(t, 30*time.Second, "web4 gone and its grant removed", func() bool {
		_, ok := grantOf("web4")
		return !strings.Contains(names(f.sim.Servers()), "web4") && !ok
	})
	// The key is in no KV value and no server's metadata.
	pairs, _, _ := admin.KV().List("", nil)
	for _, p := range pairs {
		if strings.Contains(string(p.Value), c.Key) {
			t.Fatalf("KV %s holds the temp URL key", p.Key)
		}
	}
	for _, sv := range f.sim.Servers() {
		if strings.Contains(string(f.sim.UserData(sv.Name)), c.Key) {
			t.Fatalf("%s's user data holds the temp URL key", sv.Name)
		}
	}
}

func mustStoreOf(t *testing.T, c *api.Client) *store.Store {
	t.Helper()
	s, err := store.New(c, prefix)
	if err != nil {
		t.Fatal(err)
	}
	return s
}
