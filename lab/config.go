//go:build lab

package lab

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/hashicorp/consul/api"
	"gopkg.in/yaml.v3"

	"github.com/jiocloud/orchestrate/internal/paths"
	"github.com/jiocloud/orchestrate/reaper"
	"github.com/jiocloud/orchestrate/reaper/nova"
)

// RoleSize is one role of the lab: its count and min_healthy.
type RoleSize struct {
	Name              string
	Count, MinHealthy int
}

// poolRole keeps a warm pool of one stopped standby (scenario warmpool);
// autoscaledRole follows its nodes' load reports between its count and
// one more (scenario autoscale). Every size has both roles.
const (
	poolRole       = "db"
	autoscaledRole = "compute"
)

// Size is how big a lab is: its roles (in the order their dependencies
// allow them to come up) and how many bootstrap servers run a reaper.
type Size struct {
	Name    string
	Roles   []RoleSize
	Reapers int
	// Pool gives poolRole its warm pool, Autoscale autoscaledRole its
	// autoscaling: a lab that runs neither scenario (CI's) spends no time
	// building a standby, and its compute count holds.
	Pool, Autoscale bool
}

// sizes are LAB_SIZE's values. small is what CI runs (7 containers);
// default fits this machine with room (9); large is the seed's shape (14).
var sizes = map[string]Size{
	"small":   {Name: "small", Roles: []RoleSize{{"db", 2, 1}, {"lb", 1, 0}, {"controller", 1, 0}, {"compute", 1, 0}}, Reapers: 2},
	"default": {Name: "default", Roles: []RoleSize{{"db", 2, 1}, {"lb", 1, 0}, {"controller", 2, 1}, {"compute", 2, 1}}, Reapers: 2},
	"large":   {Name: "large", Roles: []RoleSize{{"db", 3, 2}, {"lb", 2, 1}, {"controller", 3, 2}, {"compute", 4, 2}}, Reapers: 2},
}

// SizeFromEnv is LAB_SIZE's size (default "default").
func SizeFromEnv() (Size, error) {
	name := os.Getenv("LAB_SIZE")
	if name == "" {
		name = "default"
	}
	s, ok := sizes[name]
	if !ok {
		return Size{}, fmt.Errorf("LAB_SIZE=%q: want small, default or large", name)
	}
	return s, nil
}

func (s Size) minHealthy() map[string]int {
	m := map[string]int{}
	for _, r := range s.Roles {
		m[r.Name] = r.MinHealthy
	}
	return m
}

// Servers counts the containers of a lab of this size.
func (s Size) Servers() int {
	n := s.Reapers
	for _, r := range s.Roles {
		n += r.Count
	}
	return n
}

// reaperConfig is the lab reaper's reaper.yaml: the operator's (host) copy,
// for `reaper identity --apply`, or the bootstrap servers' copy. Timings
// are short so that a scenario takes minutes, and safe for a machine of
// two cores building several servers at once: a server may take minutes
// to boot, install and apply Puppet before it first serves.
func (l *Lab) reaperConfig(host bool) string {
	key, clouds, ud, logKey := paths.NodeIdentityKey, paths.Clouds, roleUserData("%s"), swiftKeyFile
	if host {
		key, clouds, ud, logKey = l.keyFile(), l.Nova.CloudsYAML, filepath.Join(l.Dir, "userdata", "%s.yaml"), l.Swift.KeyFile
	}
	var b strings.Builder
	fmt.Fprintf(&b, `# The lab's reaper (lab/config.go).
dry_run: false
interval: 5s
session_ttl: 10s
lock_delay: 5s
listen: 127.0.0.1:9469
drain_period: 5s
cloud_timeout: 3m
quota_backoff: 20s
quota_backoff_max: 2m
max_actions_per_hour: 30
cloud: {name: %s, clouds_file: %s}
node_identity: {key_file: %s}
logs: {container_url: %s, temp_url_key_file: %s}
roles:
`, cloudName, clouds, key, l.Swift.ContainerURL, logKey)
	for _, r := range l.Size.Roles {
		fmt.Fprintf(&b, `  - name: %s
    desired: %d
    min_healthy: %d
    boot_grace: 8m
    critical_grace: 30s
    boot_timeout: 12m
    absent_grace: 60s
    drain_timeout: 30s
    boot: {flavor: %s, image: %s, networks: [none], name_template: "%s{n}", user_data_file: %s}
`, r.Name, r.Count, r.MinHealthy, l.Nova.Env["NOVA_E2E_FLAVOR"], l.bootImage(), r.Name, fmt.Sprintf(ud, r.Name))
		if r.Name != autoscaledRole {
			// Only compute's nodes run a drain handler (lab/puppet): the
			// others never answer a drain, which a refresh's replacement
			// or a max-age retirement would abort at drain_timeout (the
			// old server kept, cooling off for an hour) without this.
			b.WriteString("    on_drain_timeout: delete\n")
		}
		switch {
		case r.Name == poolRole && l.Size.Pool:
			b.WriteString("    warm_pool: {size: 1, state: stopped, claim_timeout: 8m}\n")
		case r.Name == autoscaledRole && l.Size.Autoscale:
			// Short windows, so that a scale out and back in takes minutes;
			// min is the role's count, which the lab's rest state keeps.
			fmt.Fprintf(&b, `    autoscale:
      metric: {source: consul, name: load, max_age: 90s}
      target: 0.5
      min: %d
      max: %d
      scale_out: {max_step: 1, cooldown: 30s}
      scale_in: {max_step: 1, cooldown: 30s, stabilization: 30s}
`, max(r.Count, r.MinHealthy, 1), r.Count+1)
		}
	}
	return b.String()
}

// bootImage is the image every role boots from: the lab Nova's, until
// the refresh scenario points the roles at another.
func (l *Lab) bootImage() string {
	if l.roleImage != "" {
		return l.roleImage
	}
	return l.Nova.Env["NOVA_E2E_IMAGE"]
}

// swiftKeyFile is where a bootstrap server keeps the log container's temp
// URL key (the reaper's logs.temp_url_key_file), as reaper/README.md's
// example names it.
const swiftKeyFile = paths.ConfigDir + "/swift-temp-url.key"

// roleUserData is where a bootstrap server keeps role's user data (the
// reaper's user_data_file), named as reaper/README.md's example names it.
func roleUserData(role string) string { return paths.ConfigDir + "/" + role + "-user-data" }

// cloudFile is one write_files entry of cloud-config.
type cloudFile struct {
	Path        string `yaml:"path"`
	Owner       string `yaml:"owner,omitempty"`
	Permissions string `yaml:"permissions"`
	Content     string `yaml:"content"`
	Defer       bool   `yaml:"defer,omitempty"`
}

// bootstrapUserData is the user data of a bootstrap server, which the
// operator builds by hand (not the reaper): the orchestrate package, a
// Consul agent like every node's (its token is the operator's, as
// docs/acl.md gives one to a node the reaper does not build), and the reaper
// with its unit, configuration, token, key, cloud credentials and the
// roles' user data. Files for the user orchestrate wait for the package
// (defer) that creates it.
func (l *Lab) bootstrapUserData(token string) ([]byte, error) {
	agent := map[string]any{
		"datacenter": "dc1", "data_dir": "/var/lib/consul", "server": false,
		"retry_join": l.site.ConsulServers, "client_addr": "127.0.0.1", "leave_on_terminate": true,
		"bind_addr":               `{{ GetAllInterfaces | include "flags" "up" | exclude "flags" "loopback" | include "type" "IPv4" | limit 1 | attr "address" }}`,
		"encrypt":                 l.site.GossipKey,
		"encrypt_verify_incoming": true, "encrypt_verify_outgoing": true,
		"auto_encrypt": map[string]any{"tls": true},
		"tls": map[string]any{"defaults": map[string]any{"ca_file": "/etc/consul.d/consul-agent-ca.pem", "verify_outgoing": true},
			"internal_rpc": map[string]any{"verify_server_hostname": true}},
		"acl": map[string]any{"enabled": true, "default_policy": "deny", "enable_token_persistence": false,
			"tokens": map[string]string{"agent": token, "default": token}},
	}
	agentJSON, err := json.MarshalIndent(agent, "", "  ")
	if err != nil {
		return nil, err
	}
	clouds, err := os.ReadFile(l.Nova.CloudsYAML)
	if err != nil {
		return nil, err
	}
	key, err := os.ReadFile(l.keyFile())
	if err != nil {
		return nil, err
	}
	logKey, err := os.ReadFile(l.Swift.KeyFile)
	if err != nil {
		return nil, err
	}
	files := []cloudFile{
		{Path: "/etc/consul.d/agent.json", Owner: "root:root", Permissions: "0640", Content: string(agentJSON) + "\n"},
		{Path: "/etc/consul.d/consul-agent-ca.pem", Owner: "root:root", Permissions: "0644", Content: l.site.CAPEM},
		{Path: "/etc/systemd/system/consul.service.d/orchestrate.conf", Owner: "root:root", Permissions: "0644", Content: "[Service]\nUser=root\nGroup=root\n"},
		{Path: paths.ReaperConfig, Owner: "root:orchestrate", Permissions: "0640", Content: l.reaperConfig(false), Defer: true},
		{Path: paths.ReaperEnv, Owner: "root:orchestrate", Permissions: "0640", Defer: true,
			Content: "CONSUL_HTTP_TOKEN_FILE=" + paths.ReaperToken + "\nOS_CLIENT_CONFIG_FILE=" + paths.Clouds + "\n"},
		{Path: paths.ReaperToken, Owner: "orchestrate:orchestrate", Permissions: "0600", Content: l.Tokens.Reaper + "\n", Defer: true},
		{Path: paths.Clouds, Owner: "orchestrate:orchestrate", Permissions: "0600", Content: string(clouds), Defer: true},
		{Path: paths.NodeIdentityKey, Owner: "root:orchestrate", Permissions: "0640", Content: string(key), Defer: true},
		{Path: swiftKeyFile, Owner: "root:orchestrate", Permissions: "0640", Content: string(logKey), Defer: true},
	}
	for _, r := range l.Size.Roles {
		files = append(files, cloudFile{Path: roleUserData(r.Name), Owner: "root:orchestrate", Permissions: "0640", Content: string(l.userData[r.Name]), Defer: true})
	}
	cc := map[string]any{
		"apt":         map[string]any{"sources": map[string]any{"orchestrate": map[string]string{"source": l.site.RepoSource, "key": l.site.RepoKey}}},
		"packages":    []string{"orchestrate"},
		"write_files": files,
		"runcmd": [][]string{
			{"systemctl", "enable", "--now", "consul"},
			{"sh", "-c", "for i in $(seq 60); do consul members >/dev/null 2>&1 && break; sleep 5; done"},
			{"systemctl", "enable", "--now", "orchestrate-reaper"},
		},
	}
	data, err := yaml.Marshal(cc)
	if err != nil {
		return nil, err
	}
	return append([]byte("#cloud-config\n"), data...), nil
}

// createBootstrap creates bootstrap server name through Nova, with a node
// token the operator makes for it (its node identity and the role
// orchestrate-node).
func (l *Lab) createBootstrap(ctx context.Context, name string) (string, error) {
	tok, _, err := l.Admin.ACL().TokenCreate(&api.ACLToken{
		Description:    "lab bootstrap node " + name,
		NodeIdentities: []*api.ACLNodeIdentity{{NodeName: name, Datacenter: "dc1"}},
		Roles:          []*api.ACLTokenRoleLink{{Name: "orchestrate-node"}},
	}, (&api.WriteOptions{}).WithContext(ctx))
	if err != nil {
		return "", fmt.Errorf("token of %s: %w", name, err)
	}
	ud, err := l.bootstrapUserData(tok.SecretID)
	if err != nil {
		return "", err
	}
	// The operator creates it as the reaper creates servers (its Nova
	// client resolves the flavor's and image's names).
	nova, err := nova.NewNova(ctx, reaper.CloudConfig{Name: cloudName, CloudsFile: l.Nova.CloudsYAML})
	if err != nil {
		return "", err
	}
	role := &reaper.Role{Name: "bootstrap", Boot: reaper.BootSpec{Flavor: l.Nova.Env["NOVA_E2E_FLAVOR"], Image: l.Nova.Env["NOVA_E2E_IMAGE"], Networks: []string{"none"}}}
	s, err := nova.Create(ctx, reaper.CreateRequest{Name: name, Role: role, Metadata: map[string]string{"lab": "bootstrap"}, UserData: ud})
	if err != nil {
		return "", fmt.Errorf("create %s: %w", name, err)
	}
	return s.ID, nil
}
