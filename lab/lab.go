//go:build lab

package lab

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/gophercloud/gophercloud/v2"
	"github.com/gophercloud/gophercloud/v2/openstack"
	"github.com/gophercloud/gophercloud/v2/openstack/compute/v2/servers"
	"github.com/gophercloud/gophercloud/v2/openstack/config/clouds"
	"github.com/hashicorp/consul/api"

	"github.com/jiocloud/orchestrate/internal/nodeid"
	"github.com/jiocloud/orchestrate/lab/consullab"
	"github.com/jiocloud/orchestrate/lab/debs"
	"github.com/jiocloud/orchestrate/lab/hypervisor"
	"github.com/jiocloud/orchestrate/lab/image"
	"github.com/jiocloud/orchestrate/lab/internal/labenv"
	"github.com/jiocloud/orchestrate/lab/invariant"
	"github.com/jiocloud/orchestrate/lab/netlab"
	"github.com/jiocloud/orchestrate/lab/novalab"
	"github.com/jiocloud/orchestrate/lab/repo"
	"github.com/jiocloud/orchestrate/lab/swiftlab"
)

// The lab's fixed addresses (lab/README.md): the host on the bridge, where
// the apt repository and the lab's Nova listen, and the containers' pool.
var (
	hostAddr = netip.MustParseAddr("198.18.0.1")
	repoAddr = "198.18.0.1:8480"
	pool     = netip.MustParsePrefix("198.18.1.0/24")
	subnet   = netip.MustParsePrefix("198.18.0.0/16")
)

// cloudName is the clouds.yaml entry of the lab's Nova (scripts/nova).
const cloudName = "nova-e2e"

// Lab is the whole cloud, up.
type Lab struct {
	Dir, Root string
	Size      Size
	// Bin holds the host's orchestrate and reaper binaries.
	Bin    string
	Net    *netlab.Net
	Consul *consullab.Cluster
	Tokens *consullab.Tokens
	Nova   *novalab.Cloud
	// Swift is the lab's failure-log store (docs/logs.md): its container
	// and temp URL key.
	Swift   *swiftlab.Store
	Compute *gophercloud.ServiceClient
	// Image is the lab's Glance, as the cloud's admin (the refresh
	// scenario uploads a second image).
	Image   *gophercloud.ServiceClient
	HV      *hypervisor.Hypervisor
	Checker *invariant.Checker
	// Admin is a client of a Consul server with the management token, for
	// what the lab itself reads; operator commands use Tokens.Operator.
	Admin *api.Client
	Log   *slog.Logger

	checkMu sync.Mutex // guards Checker

	site     Site
	version  string            // the version the operator triggered last
	image    string            // the base image's tar
	userData map[string][]byte // role -> its user data
	cancel   context.CancelFunc
	hvDone   chan error
	obsDone  chan struct{}
	stops    []func()
	// roleImage is the image the roles boot from once a scenario changed
	// it (refresh); "" is the lab Nova's own (NOVA_E2E_IMAGE).
	roleImage string
}

// Up brings the whole cloud up, step by step, each timed in the log:
// network, Consul servers, image and packages, the repository, Nova, the
// ACL setup, the hypervisor, then the bootstrap servers (the reapers),
// which build every role's servers through Nova.
func Up(ctx context.Context, size Size, log *slog.Logger) (_ *Lab, err error) {
	// l is not the named result: a "return nil, err" must not take from
	// the deferred Down what it has to stop.
	l := &Lab{Size: size, Log: log, userData: map[string][]byte{}}
	defer func() {
		if err != nil {
			l.Down(context.Background())
		}
	}()
	if l.Dir, err = labenv.Dir(); err != nil {
		return nil, err
	}
	if l.Root, err = labenv.RepoRoot(); err != nil {
		return nil, err
	}
	bg, cancel := context.WithCancel(context.Background())
	l.cancel = cancel
	for _, s := range []struct {
		name string
		f    func(context.Context) error
	}{
		{"binaries", l.build},
		{"network", l.network},
		{"consul servers", l.consul},
		{"image, packages and repository", func(ctx context.Context) error { return l.packages(ctx, bg) }},
		{"nova", l.nova},
		{"swift", l.swift},
		{"acl setup", l.acls},
		{"empty cloud", l.emptyCloud},
		{"hypervisor", func(ctx context.Context) error { return l.hypervisor(bg) }},
	} {
		start := time.Now()
		if err := s.f(ctx); err != nil {
			return nil, fmt.Errorf("lab up: %s: %w", s.name, err)
		}
		log.Info("lab up", "step", s.name, "took", time.Since(start).Round(100*time.Millisecond))
	}
	l.Checker = invariant.New(size.minHealthy())
	l.obsDone = make(chan struct{})
	go l.observe(bg)
	return l, nil
}

// build compiles the host's orchestrate and reaper (for the ACL setup and
// the operator's commands).
func (l *Lab) build(ctx context.Context) error {
	l.Bin = filepath.Join(l.Dir, "bin")
	cmd := exec.CommandContext(ctx, "go", "build", "-o", l.Bin+"/", "./cmd/orchestrate", "./cmd/reaper")
	cmd.Dir = l.Root
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("go build: %v\n%s", err, out)
	}
	return nil
}

func (l *Lab) network(ctx context.Context) error {
	cfg := netlab.Default()
	cfg.Log = l.Log
	if err := netlab.Clean(ctx, cfg); err != nil {
		return err
	}
	n, err := netlab.Up(ctx, cfg)
	if err != nil {
		return err
	}
	l.Net = n
	l.stops = append(l.stops, func() { n.Down(context.Background()) })
	return nil
}

func (l *Lab) consul(ctx context.Context) error {
	dir := filepath.Join(l.Dir, "consul")
	if err := consullab.StopDir(ctx, dir); err != nil {
		return err
	}
	if err := os.RemoveAll(dir); err != nil {
		return err
	}
	c, err := consullab.StartWith(ctx, consullab.Options{Dir: dir, Bin: labenv.ConsulBin(l.Root), Log: l.Log})
	if err != nil {
		return err
	}
	l.Consul = c
	l.stops = append(l.stops, c.Stop)
	if _, err := c.WaitLeader(ctx, time.Minute); err != nil {
		return err
	}
	l.Admin, err = c.Client(0, c.ManagementToken)
	return err
}

// packages builds (or finds cached) the image, the orchestrate and roles
// packages, and serves the signed repository on the bridge.
func (l *Lab) packages(ctx, bg context.Context) error {
	tar, err := image.Ensure(ctx, l.Dir)
	if err != nil {
		return err
	}
	l.image = tar
	out := filepath.Join(l.Dir, "debs")
	if err := os.RemoveAll(out); err != nil {
		return err
	}
	var pkgs []string
	for _, b := range []func() (string, error){
		func() (string, error) { return debs.Orchestrate(ctx, l.Root, out) },
		func() (string, error) { return debs.Roles(ctx, l.Root, out, "") },
	} {
		deb, err := b()
		if err != nil {
			return err
		}
		pkgs = append(pkgs, deb)
	}
	dir := filepath.Join(l.Dir, "repo")
	key, err := repo.Build(ctx, dir, pkgs)
	if err != nil {
		return err
	}
	srv, err := repo.Serve(bg, repoAddr, dir)
	if err != nil {
		return err
	}
	l.site = Site{RepoSource: "deb [signed-by=$KEY_FILE] " + srv.URL + " ./", RepoKey: key,
		GossipKey: l.Consul.GossipKey, CAPEM: string(l.Consul.CAPEM), SitePackage: "orchestrate-lab-roles"}
	for _, a := range l.Consul.Addrs {
		l.site.ConsulServers = append(l.site.ConsulServers, a.String())
	}
	return nil
}

// swift starts the lab's Swift, its proxy on the bridge (the nodes upload
// their failure logs to it, the reapers sign their grants for it).
func (l *Lab) swift(ctx context.Context) error {
	o := swiftlab.Options{Dir: filepath.Join(l.Dir, "swift"), Host: hostAddr, Scripts: filepath.Join(l.Root, "scripts/swift"), Log: l.Log}
	s, err := swiftlab.Up(ctx, o)
	if err != nil {
		return err
	}
	l.Swift = s
	l.stops = append(l.stops, func() { s.Down(context.Background()) })
	return nil
}

func (l *Lab) nova(ctx context.Context) error {
	o := novalab.Options{Dir: filepath.Join(l.Dir, "nova"), Host: hostAddr, Scripts: filepath.Join(l.Root, "scripts/nova"), Log: l.Log}
	c, err := novalab.Up(ctx, o)
	if err != nil {
		return err
	}
	l.Nova = c
	l.stops = append(l.stops, func() { c.Down(context.Background()) })
	ao, eo, _, err := clouds.Parse(clouds.WithCloudName(cloudName), clouds.WithLocations(c.CloudsYAML))
	if err != nil {
		return err
	}
	provider, err := openstack.AuthenticatedClient(ctx, ao)
	if err != nil {
		return err
	}
	if l.Compute, err = openstack.NewComputeV2(provider, eo); err != nil {
		return err
	}
	l.Image, err = openstack.NewImageV2(provider, eo)
	return err
}

// acls does the operator's ACL setup (docs/acl.md): the
// shipped policies, the reaper's, operator's and DNS tokens, and `reaper
// identity --apply` with the reaper's configuration, which needs the
// roles' user data written first.
func (l *Lab) acls(ctx context.Context) error {
	if _, pemKey, err := nodeid.NewKey(); err != nil {
		return err
	} else if err := os.WriteFile(l.keyFile(), pemKey, 0o600); err != nil {
		return err
	}
	example, err := os.ReadFile(filepath.Join(l.Root, "examples/user-data.yaml"))
	if err != nil {
		return err
	}
	for _, r := range l.Size.Roles {
		ud, err := RoleUserData(example, l.site, "labroles::"+r.Name)
		if err != nil {
			return err
		}
		l.userData[r.Name] = ud
		if err := writeFile(l.hostUserData(r.Name), ud, 0o644); err != nil {
			return err
		}
	}
	if err := writeFile(l.hostReaperConfig(), []byte(l.reaperConfig(true)), 0o600); err != nil {
		return err
	}
	t, err := l.Consul.Bootstrap(ctx, consullab.BootstrapOptions{ACLDir: filepath.Join(l.Root, "packaging/acl"),
		Reaper: filepath.Join(l.Bin, "reaper"), ReaperConfig: l.hostReaperConfig()})
	if err != nil {
		return err
	}
	l.Tokens = t
	return nil
}

// emptyCloud starts the cloud from nothing: the lab's Nova keeps its
// database between runs (a fast Up), so the servers an earlier run left are
// deleted, and what the hypervisor kept of them goes.
func (l *Lab) emptyCloud(ctx context.Context) error {
	machines := filepath.Join(l.Dir, "machines")
	if err := hypervisor.Remove(machines, 30*time.Second, l.Log); err != nil {
		return err
	}
	left, err := l.Servers(ctx)
	if err != nil {
		return err
	}
	for _, s := range left {
		if err := servers.Delete(ctx, l.Compute, s.ID).ExtractErr(); err != nil {
			return fmt.Errorf("delete %s left by an earlier run: %w", s.Name, err)
		}
	}
	deadline := time.Now().Add(2 * time.Minute)
	for len(left) > 0 {
		if time.Now().After(deadline) {
			return fmt.Errorf("servers of an earlier run still listed: %v", left)
		}
		time.Sleep(time.Second)
		if left, err = l.Servers(ctx); err != nil {
			return err
		}
	}
	return nil
}

func (l *Lab) hypervisor(bg context.Context) error {
	hv, err := hypervisor.New(hypervisor.Config{Compute: l.Compute, Bridge: netlab.Default().Bridge,
		MakeRoot: func(ctx context.Context, dest string) error { return image.Root(ctx, l.image, dest) },
		Pool:     pool, Subnet: subnet, StateDir: filepath.Join(l.Dir, "machines"), Logger: l.Log})
	if err != nil {
		return err
	}
	l.HV = hv
	l.hvDone = make(chan error, 1)
	go func() { l.hvDone <- hv.Run(bg) }()
	return nil
}

// Down stops everything Up started, in reverse order, and waits for the
// hypervisor to power its containers off.
func (l *Lab) Down(ctx context.Context) {
	if l.cancel != nil {
		l.cancel()
	}
	if l.obsDone != nil {
		<-l.obsDone
	}
	if l.hvDone != nil {
		if err := <-l.hvDone; err != nil && !errors.Is(err, context.Canceled) {
			l.Log.Warn("hypervisor", "err", err)
		}
	}
	for i := len(l.stops) - 1; i >= 0; i-- {
		l.stops[i]()
	}
	l.stops = nil
}

// paths of what the lab writes for the operator's side.
func (l *Lab) keyFile() string              { return filepath.Join(l.Dir, "node-identity.key") }
func (l *Lab) hostReaperConfig() string     { return filepath.Join(l.Dir, "reaper.yaml") }
func (l *Lab) hostUserData(r string) string { return filepath.Join(l.Dir, "userdata", r+".yaml") }

func writeFile(path string, data []byte, mode os.FileMode) error {
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return err
	}
	return os.WriteFile(path, data, mode)
}

// orchestrate runs the host's orchestrate with the operator's token and
// one of the Consul servers, and returns its output and exit code.
func (l *Lab) orchestrate(ctx context.Context, args ...string) (string, int) {
	cmd := exec.CommandContext(ctx, filepath.Join(l.Bin, "orchestrate"), args...)
	cmd.Env = append(os.Environ(), "CONSUL_HTTP_ADDR="+l.Consul.HTTPAddr(0), "CONSUL_HTTP_TOKEN_FILE="+l.Consul.TokenFile("operator"))
	out, err := cmd.CombinedOutput()
	code := 0
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		code = ee.ExitCode()
	} else if err != nil {
		return err.Error(), -1
	}
	return strings.TrimSpace(string(out)), code
}
