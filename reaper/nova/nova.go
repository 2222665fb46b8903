package nova

import (
	"bytes"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"strings"

	"github.com/gophercloud/gophercloud/v2"
	"github.com/gophercloud/gophercloud/v2/openstack"
	"github.com/gophercloud/gophercloud/v2/openstack/compute/v2/flavors"
	"github.com/gophercloud/gophercloud/v2/openstack/compute/v2/servergroups"
	"github.com/gophercloud/gophercloud/v2/openstack/compute/v2/servers"
	"github.com/gophercloud/gophercloud/v2/openstack/config/clouds"
	"github.com/gophercloud/gophercloud/v2/openstack/image/v2/images"
	"github.com/gophercloud/gophercloud/v2/pagination"
	"github.com/jiocloud/orchestrate/reaper"
	"gopkg.in/yaml.v3"
)

// novaMicroversion: 2.37 is the first that accepts networks "none"/"auto",
// 2.52 the first that accepts tags at create, 2.64 the first whose server
// groups take one policy (soft-anti-affinity since 2.15), 2.69 the first
// at which a server in a cell Nova cannot reach is listed as a partial
// record (status UNKNOWN, no name) instead of being left out of the list.
// Nova Zed serves up to 2.93.
const novaMicroversion = "2.69"

// Nova is the Cloud on OpenStack Nova through gophercloud.
type Nova struct {
	compute *gophercloud.ServiceClient
	image   *gophercloud.ServiceClient
}

var _ reaper.Cloud = (*Nova)(nil)

// NewNova authenticates the way the openstack CLI does: the clouds.yaml
// entry cc.Name (else $OS_CLOUD) when there is one, else the OS_* variables.
// Credentials are never logged or put in errors.
func NewNova(ctx context.Context, cc reaper.CloudConfig) (*Nova, error) {
	return NewNovaWithEnv(ctx, cc, os.Getenv)
}

// NewNovaWithEnv is NewNova reading the OS_* variables through getenv
// instead of the process environment (tests running in parallel, each with
// credentials of its own).
func NewNovaWithEnv(ctx context.Context, cc reaper.CloudConfig, getenv func(string) string) (*Nova, error) {
	var (
		ao     gophercloud.AuthOptions
		eo     gophercloud.EndpointOpts
		tlsCfg *tls.Config
		err    error
	)
	name := cc.Name
	if name == "" {
		name = getenv("OS_CLOUD")
	}
	if name != "" {
		opts := []clouds.ParseOption{clouds.WithCloudName(name), clouds.WithRegion(getenv("OS_REGION_NAME")), clouds.WithEndpointType(getenv("OS_INTERFACE"))}
		file := cc.CloudsFile
		if file == "" {
			file = getenv("OS_CLIENT_CONFIG_FILE")
		}
		if file != "" {
			opts = append(opts, clouds.WithLocations(file))
		}
		ao, eo, tlsCfg, err = clouds.Parse(opts...)
		if err != nil {
			return nil, fmt.Errorf("openstack cloud %q from clouds.yaml: %w", name, err)
		}
	} else {
		ao, eo, tlsCfg, err = authFromEnv(getenv)
		if err != nil {
			return nil, err
		}
	}
	if cc.Region != "" {
		eo.Region = cc.Region
	}
	ao.AllowReauth = true
	provider, err := openstack.NewClient(ao.IdentityEndpoint)
	if err != nil {
		return nil, fmt.Errorf("openstack auth url: %w", err)
	}
	if tlsCfg != nil {
		provider.HTTPClient = http.Client{Transport: &http.Transport{TLSClientConfig: tlsCfg, Proxy: http.ProxyFromEnvironment}}
	}
	if err := openstack.Authenticate(ctx, provider, ao); err != nil {
		return nil, classify("authenticate", err)
	}
	compute, err := openstack.NewComputeV2(provider, eo)
	if err != nil {
		return nil, fmt.Errorf("nova endpoint: %w", err)
	}
	compute.Microversion = novaMicroversion
	img, err := openstack.NewImageV2(provider, eo)
	if err != nil {
		return nil, fmt.Errorf("glance endpoint: %w", err)
	}
	return &Nova{compute: compute, image: img}, nil
}

// NewNovaClients wraps existing service clients (compute, whose
// microversion it sets, and image).
func NewNovaClients(compute, image *gophercloud.ServiceClient) *Nova {
	compute.Microversion = novaMicroversion
	return &Nova{compute: compute, image: image}
}

// authFromEnv reads the OS_* variables the way the openstack CLI does
// (including OS_USER_DOMAIN_NAME and OS_PROJECT_DOMAIN_NAME, which
// gophercloud's AuthOptionsFromEnv ignores), by handing them to the
// clouds.yaml parser as an in-memory cloud named "envvars", as
// openstacksdk does.
func authFromEnv(env func(string) string) (gophercloud.AuthOptions, gophercloud.EndpointOpts, *tls.Config, error) {
	first := func(keys ...string) string {
		for _, k := range keys {
			if v := env(k); v != "" {
				return v
			}
		}
		return ""
	}
	if env("OS_AUTH_URL") == "" {
		return gophercloud.AuthOptions{}, gophercloud.EndpointOpts{}, nil, errors.New("OS_AUTH_URL is not set (set OS_CLOUD for clouds.yaml, or source an openrc)")
	}
	auth := &clouds.AuthInfo{
		AuthURL:                     env("OS_AUTH_URL"),
		Token:                       env("OS_TOKEN"),
		Username:                    env("OS_USERNAME"),
		UserID:                      first("OS_USER_ID", "OS_USERID"),
		Password:                    env("OS_PASSWORD"),
		ApplicationCredentialID:     env("OS_APPLICATION_CREDENTIAL_ID"),
		ApplicationCredentialName:   env("OS_APPLICATION_CREDENTIAL_NAME"),
		ApplicationCredentialSecret: env("OS_APPLICATION_CREDENTIAL_SECRET"),
		SystemScope:                 env("OS_SYSTEM_SCOPE"),
		ProjectName:                 first("OS_PROJECT_NAME", "OS_TENANT_NAME"),
		ProjectID:                   first("OS_PROJECT_ID", "OS_TENANT_ID"),
		UserDomainName:              env("OS_USER_DOMAIN_NAME"),
		UserDomainID:                env("OS_USER_DOMAIN_ID"),
		ProjectDomainName:           env("OS_PROJECT_DOMAIN_NAME"),
		ProjectDomainID:             env("OS_PROJECT_DOMAIN_ID"),
		DomainName:                  env("OS_DOMAIN_NAME"),
		DomainID:                    env("OS_DOMAIN_ID"),
	}
	cloud := clouds.Cloud{AuthInfo: auth, RegionName: env("OS_REGION_NAME"), Interface: env("OS_INTERFACE"),
		CACertFile: env("OS_CACERT"), ClientCertFile: env("OS_CERT"), ClientKeyFile: env("OS_KEY")}
	if env("OS_INSECURE") == "true" {
		f := false
		cloud.Verify = &f
	}
	data, err := yaml.Marshal(clouds.Clouds{Clouds: map[string]clouds.Cloud{"envvars": cloud}})
	if err != nil {
		return gophercloud.AuthOptions{}, gophercloud.EndpointOpts{}, nil, err
	}
	ao, eo, tlsCfg, err := clouds.Parse(clouds.WithCloudName("envvars"), clouds.WithCloudsYAML(bytes.NewReader(data)),
		clouds.WithRegion(env("OS_REGION_NAME")), clouds.WithEndpointType(env("OS_INTERFACE")))
	if err != nil {
		return ao, eo, nil, fmt.Errorf("openstack credentials from OS_* variables: %w", err)
	}
	return ao, eo, tlsCfg, nil
}

func fromNova(s *servers.Server) reaper.Server {
	out := reaper.Server{ID: s.ID, Name: s.Name, Status: s.Status, Created: s.Created, Metadata: s.Metadata, Zone: s.AvailabilityZone}
	if s.Fault.Message != "" {
		out.Fault = s.Fault.Message
	}
	return out
}

// List returns every server of the project, following pagination.
func (n *Nova) List(ctx context.Context) ([]reaper.Server, error) {
	var out []reaper.Server
	err := servers.List(n.compute, servers.ListOpts{}).EachPage(ctx, func(_ context.Context, page pagination.Page) (bool, error) {
		ss, err := servers.ExtractServers(page)
		if err != nil {
			return false, err
		}
		for i := range ss {
			out = append(out, fromNova(&ss[i]))
		}
		return true, nil
	})
	if err != nil {
		return nil, classify("list servers", err)
	}
	n.fillFaults(ctx, out)
	return out, nil
}

// maxFaultGets bounds the servers whose fault one list fetches: the
// reaper's own creates in ERROR are rolled back within a cycle or two, so
// a handful at a time is what a cloud out of capacity gives.
const maxFaultGets = 20

// fillFaults fetches the fault of each server the reaper created (it
// carries a journal entry) that is in ERROR: Nova's list (servers/detail)
// carries no fault, only a GET of the server does. Found by the placement
// test on the real Nova: without it every failed boot looked like "no
// fault given" a minute later, so "No valid host" in one zone was taken
// for a fatal error of the role. A GET that fails leaves the fault empty
// (the planner waits for one, then rolls back as fatal).
func (n *Nova) fillFaults(ctx context.Context, out []reaper.Server) {
	asked := 0
	for i := range out {
		s := &out[i]
		if s.Status != reaper.StatusError || s.Fault != "" || s.Metadata[reaper.MetaJournal] == "" || asked == maxFaultGets {
			continue
		}
		asked++
		if got, err := servers.Get(ctx, n.compute, s.ID).Extract(); err == nil {
			s.Fault = got.Fault.Message
		}
	}
}

// Get returns one server.
func (n *Nova) Get(ctx context.Context, id string) (reaper.Server, error) {
	s, err := servers.Get(ctx, n.compute, id).Extract()
	if err != nil {
		return reaper.Server{}, classify("get server "+id, err)
	}
	return fromNova(s), nil
}

// Create asks Nova for a server.
func (n *Nova) Create(ctx context.Context, req reaper.CreateRequest) (reaper.Server, error) {
	b := req.Role.Boot
	flavor, err := n.ref(ctx, "flavor", b.Flavor)
	if err != nil {
		return reaper.Server{}, err
	}
	image, err := n.ref(ctx, "image", b.Image)
	if err != nil {
		return reaper.Server{}, err
	}
	opts := servers.CreateOpts{
		Name:             req.Name,
		FlavorRef:        flavor,
		ImageRef:         image,
		SecurityGroups:   b.SecurityGroups,
		AvailabilityZone: b.AvailabilityZone,
		Metadata:         req.Metadata,
		Tags:             req.Tags,
		UserData:         req.UserData,
	}
	if req.Zone != "" {
		opts.AvailabilityZone = req.Zone
	}
	switch {
	case len(b.Networks) == 1 && (b.Networks[0] == "none" || b.Networks[0] == "auto"):
		opts.Networks = b.Networks[0]
	case len(b.Networks) > 0:
		nets := make([]servers.Network, len(b.Networks))
		for i, id := range b.Networks {
			nets[i] = servers.Network{UUID: id}
		}
		opts.Networks = nets
	}
	var co servers.CreateOptsBuilder = opts
	if b.KeyName != "" {
		co = keyPairOpts{CreateOptsBuilder: opts, keyName: b.KeyName}
	}
	var hints servers.SchedulerHintOptsBuilder
	if req.ServerGroup != "" {
		hints = servers.SchedulerHintOpts{Group: req.ServerGroup}
	}
	s, err := servers.Create(ctx, n.compute, co, hints).Extract()
	if err != nil {
		return reaper.Server{}, classify("create server "+req.Name, err)
	}
	out := fromNova(s)
	if out.Name == "" {
		out.Name = req.Name
	}
	return out, nil
}

// keyPairOpts adds key_name to a create request.
type keyPairOpts struct {
	servers.CreateOptsBuilder
	keyName string
}

// ToServerCreateMap adds key_name to the create body.
func (o keyPairOpts) ToServerCreateMap() (map[string]any, error) {
	m, err := o.CreateOptsBuilder.ToServerCreateMap()
	if err != nil {
		return nil, err
	}
	m["server"].(map[string]any)["key_name"] = o.keyName
	return m, nil
}

// Delete asks Nova to delete a server.
func (n *Nova) Delete(ctx context.Context, id string) error {
	if err := servers.Delete(ctx, n.compute, id).ExtractErr(); err != nil {
		return classify("delete server "+id, err)
	}
	return nil
}

// UnsetMetadata removes one metadata key of a server; Nova answers 404
// both for a missing server and a missing key, and either leaves the key
// gone, which is what was asked.
func (n *Nova) UnsetMetadata(ctx context.Context, id, key string) error {
	err := servers.DeleteMetadatum(ctx, n.compute, id, key).ExtractErr()
	if err != nil && reaper.ClassOf(classify("unset metadata", err)) != reaper.NotFound {
		return classify("unset metadata "+key+" of server "+id, err)
	}
	return nil
}

// Stop powers a server off (os-stop).
func (n *Nova) Stop(ctx context.Context, id string) error {
	if err := servers.Stop(ctx, n.compute, id).ExtractErr(); err != nil {
		return classify("stop server "+id, err)
	}
	return nil
}

// Start powers a server on (os-start).
func (n *Nova) Start(ctx context.Context, id string) error {
	if err := servers.Start(ctx, n.compute, id).ExtractErr(); err != nil {
		return classify("start server "+id, err)
	}
	return nil
}

// Reboot hard-reboots a server (HARD: Nova takes it from ERROR and from a
// guest that does not answer, which a soft reboot waits on).
func (n *Nova) Reboot(ctx context.Context, id string) error {
	if err := servers.Reboot(ctx, n.compute, id, servers.RebootOpts{Type: servers.HardReboot}).ExtractErr(); err != nil {
		return classify("reboot server "+id, err)
	}
	return nil
}

// Rebuild rebuilds a server from req.Image (a name or an ID, looked up as
// a create's is). Only the image is sent: Nova keeps the server's ID,
// name, metadata, key pair and user data (at 2.57 and later a rebuild
// could replace the user data; the reaper keeps it, and with it the
// server's node token, which lives until the reaper logs it out before a
// delete).
func (n *Nova) Rebuild(ctx context.Context, req reaper.RebuildRequest) error {
	image, err := n.ref(ctx, "image", req.Image)
	if err != nil {
		return err
	}
	if err := servers.Rebuild(ctx, n.compute, req.ID, servers.RebuildOpts{ImageRef: image}).Err; err != nil {
		return classify("rebuild server "+req.ID, err)
	}
	return nil
}

// ref resolves a flavor or image name (or ID) to its ID, afresh for every
// create: an image rotated under the same name (the old one deleted or
// hidden, a new one uploaded) is the new one from the next create on, and
// a create never fails on an ID cached from before the rotation.
func (n *Nova) ref(ctx context.Context, kind, nameOrID string) (string, error) {
	var found []string
	var err error
	switch kind {
	case "flavor":
		err = flavors.ListDetail(n.compute, flavors.ListOpts{AccessType: flavors.AllAccess}).EachPage(ctx, func(_ context.Context, p pagination.Page) (bool, error) {
			fs, err := flavors.ExtractFlavors(p)
			for _, f := range fs {
				if f.ID == nameOrID || f.Name == nameOrID {
					found = append(found, f.ID)
				}
			}
			return true, err
		})
	default:
		err = images.List(n.image, images.ListOpts{}).EachPage(ctx, func(_ context.Context, p pagination.Page) (bool, error) {
			is, err := images.ExtractImages(p)
			for _, i := range is {
				// By name, only an active image: a rotated-out one
				// that is deactivated, not deleted, cannot boot.
				if i.ID == nameOrID || (i.Name == nameOrID && i.Status == images.ImageStatusActive) {
					found = append(found, i.ID)
				}
			}
			return true, err
		})
	}
	if err != nil {
		return "", classify("look up "+kind+" "+nameOrID, err)
	}
	switch len(found) {
	case 0:
		return "", &reaper.CloudError{Class: reaper.Fatal, Op: "look up " + kind, Err: fmt.Errorf("no %s named %q", kind, nameOrID)}
	case 1:
	default:
		return "", &reaper.CloudError{Class: reaper.Fatal, Op: "look up " + kind, Err: fmt.Errorf("%d %ss named %q: use the ID", len(found), kind, nameOrID)}
	}
	return found[0], nil
}

// classify turns a gophercloud error into a CloudError.
func classify(op string, err error) error {
	if err == nil {
		return nil
	}
	class := reaper.Fatal
	var code gophercloud.ErrUnexpectedResponseCode
	var codePtr *gophercloud.ErrUnexpectedResponseCode
	var netErr net.Error
	switch {
	case errors.As(err, &codePtr):
		class = classifyHTTP(codePtr.Actual, string(codePtr.Body))
	case errors.As(err, &code):
		class = classifyHTTP(code.Actual, string(code.Body))
	case errors.Is(err, context.DeadlineExceeded), errors.Is(err, context.Canceled), errors.As(err, &netErr):
		class = reaper.Transient
	default:
		if strings.Contains(err.Error(), "No valid host") {
			class = reaper.Capacity
		}
	}
	return &reaper.CloudError{Class: class, Op: op, Err: err}
}

// classifyHTTP maps a Nova response to a class.
func classifyHTTP(status int, body string) reaper.ErrorClass {
	lower := strings.ToLower(body)
	switch {
	case strings.Contains(body, "No valid host"):
		return reaper.Capacity
	case strings.Contains(lower, "servers in group"):
		// "Quota exceeded, too many servers in group": the
		// server_group_members quota holds the role's group, not the
		// project: the role's own creates stop (fatal, backed off),
		// not every role's.
		return reaper.Fatal
	case (status == http.StatusForbidden || status == http.StatusRequestEntityTooLarge) && strings.Contains(lower, "quota"):
		return reaper.Quota
	case status == http.StatusNotFound:
		return reaper.NotFound
	case status == http.StatusConflict:
		return reaper.Conflict
	case status == http.StatusTooManyRequests || status >= 500:
		return reaper.Transient
	default:
		return reaper.Fatal
	}
}

// fromGroup converts a Nova server group: its one policy (microversion
// 2.64 and later), else the first of its policies.
func fromGroup(g *servergroups.ServerGroup) reaper.ServerGroup {
	out := reaper.ServerGroup{ID: g.ID, Name: g.Name, Members: g.Members}
	switch {
	case g.Policy != nil:
		out.Policy = *g.Policy
	case len(g.Policies) > 0:
		out.Policy = g.Policies[0]
	}
	return out
}

// ServerGroup returns one server group.
func (n *Nova) ServerGroup(ctx context.Context, id string) (reaper.ServerGroup, error) {
	g, err := servergroups.Get(ctx, n.compute, id).Extract()
	if err != nil {
		return reaper.ServerGroup{}, classify("get server group "+id, err)
	}
	return fromGroup(g), nil
}

// FindServerGroups returns the project's server groups named name.
func (n *Nova) FindServerGroups(ctx context.Context, name string) ([]reaper.ServerGroup, error) {
	var out []reaper.ServerGroup
	err := servergroups.List(n.compute, servergroups.ListOpts{}).EachPage(ctx, func(_ context.Context, page pagination.Page) (bool, error) {
		gs, err := servergroups.ExtractServerGroups(page)
		if err != nil {
			return false, err
		}
		for i := range gs {
			if gs[i].Name == name {
				out = append(out, fromGroup(&gs[i]))
			}
		}
		return true, nil
	})
	if err != nil {
		return nil, classify("list server groups", err)
	}
	return out, nil
}

// CreateServerGroup makes a server group with one policy (microversion
// 2.64 and later: "policy", not "policies").
func (n *Nova) CreateServerGroup(ctx context.Context, name, policy string) (reaper.ServerGroup, error) {
	g, err := servergroups.Create(ctx, n.compute, servergroups.CreateOpts{Name: name, Policy: policy}).Extract()
	if err != nil {
		return reaper.ServerGroup{}, classify("create server group "+name, err)
	}
	return fromGroup(g), nil
}
