package daemon

import (
	"context"
	"crypto/sha256"
	"crypto/x509"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"strings"

	"github.com/hashicorp/consul/api"
	"github.com/jiocloud/orchestrate/internal/cli"
	"github.com/jiocloud/orchestrate/internal/consulclient"
	"github.com/jiocloud/orchestrate/internal/exitcode"
	"github.com/jiocloud/orchestrate/internal/fileutil"
	"github.com/jiocloud/orchestrate/internal/nodeid"
	"github.com/jiocloud/orchestrate/internal/paths"
	"github.com/jiocloud/orchestrate/internal/store"
	"github.com/jiocloud/orchestrate/reaper"
	"github.com/spf13/pflag"
)

// hostNames are the server names of role the operator pre-authorises:
// the role's largest count, its warm pool and in-flight replacements,
// and extra for names skipped while an old one's records linger.
func hostNames(cfg *reaper.Config, r *reaper.Role, extra int) []string {
	n := r.Desired
	if a := r.Autoscale; a != nil {
		n = max(n, a.Max)
	}
	if p := r.WarmPool; p != nil {
		n += p.Size
	}
	n += cfg.MaxInFlight + extra
	out := make([]string, 0, n)
	for i := 1; i <= n; i++ {
		out = append(out, r.ServerName(i))
	}
	return out
}

// identityPlan is what `reaper identity` writes.
type identityPlan struct {
	pub, fingerprint string
	nodeRules        string
	hosts            [][2]string // name, rules
}

// identityOpts are reaper identity's flags.
type identityOpts struct {
	conn               consulclient.Options
	config, nodePolicy string
	extra              int
	apply              bool
}

// identityFlags registers reaper identity's flags on fs.
func identityFlags(fs *pflag.FlagSet) *identityOpts {
	o := &identityOpts{}
	o.conn.AddFlags(fs)
	fs.StringVar(&o.config, "config", paths.ReaperConfig, "the reaper's configuration (roles, node_identity)")
	fs.StringVar(&o.nodePolicy, "node-policy", paths.NodePolicy, "the shared read-only policy of every node (the package's node.hcl)")
	fs.IntVar(&o.extra, "extra", 5, "names per role beyond its count, warm pool and max_in_flight (a name is skipped while its old records linger)")
	fs.BoolVar(&o.apply, "apply", false, "write it to Consul (needs a token with acl write); without, print it")
	return o
}

func runIdentity(ctx context.Context, args []string, stdio cli.IO) error {
	fs := pflag.NewFlagSet("reaper identity", pflag.ContinueOnError)
	fs.SetOutput(io.Discard)
	o := identityFlags(fs)
	config, nodePolicy, extra, apply := &o.config, &o.nodePolicy, &o.extra, &o.apply
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, pflag.ErrHelp) {
			return program().PrintHelp(stdio.Stdout, "identity")
		}
		return exitcode.Usagef("identity: %v", err)
	}
	if fs.NArg() > 0 || *extra < 0 || *extra > 10000 {
		return exitcode.Usagef("identity: unexpected arguments %q, or --extra %d outside 0..10000", fs.Args(), *extra)
	}
	plan, cfg, err := planIdentity(*config, *nodePolicy, *extra)
	if err != nil {
		return exitcode.Wrap(exitcode.Usage, err)
	}
	ni := cfg.NodeIdentity
	if !*apply {
		fmt.Fprintf(stdio.Stdout, "auth method %s (jwt, audience %s) trusting the public key of %s (sha256 %s)\n", ni.AuthMethod, ni.Audience, ni.KeyFile, plan.fingerprint)
		for _, r := range nodeid.BindingRules(ni.AuthMethod, nodeid.DefaultRole) {
			fmt.Fprintf(stdio.Stdout, "binding rule: %s %s\n", r.BindType, r.BindName)
		}
		fmt.Fprintf(stdio.Stdout, "role %s with policy %s, from %s\n", nodeid.DefaultRole, nodeid.DefaultRole, *nodePolicy)
		for _, h := range plan.hosts {
			fmt.Fprintf(stdio.Stdout, "policy %s:\n%s", nodeid.HostPolicyName(h[0]), indent(h[1]))
		}
		fmt.Fprintf(stdio.Stdout, "(nothing written: give --apply with a token that may write ACLs)\n")
		return nil
	}
	client, err := o.conn.Client()
	if err != nil {
		return err
	}
	return applyIdentity(ctx, client, cfg, plan, stdio.Stdout)
}

// planIdentity loads the configuration and renders what Consul needs.
func planIdentity(config, nodePolicy string, extra int) (*identityPlan, *reaper.Config, error) {
	// Both name the file (and the line) already.
	cfg, err := LoadConfig(config)
	if err != nil {
		return nil, nil, err
	}
	if err := CheckConfig(cfg); err != nil {
		return nil, nil, err
	}
	if cfg.NodeIdentity == nil {
		return nil, nil, fmt.Errorf("config %s has no node_identity: nothing to set up", config)
	}
	pub, err := nodeid.PublicPEM(cfg.NodeIdentity.SigningKey)
	if err != nil {
		return nil, nil, err
	}
	der, _ := x509.MarshalPKIXPublicKey(&cfg.NodeIdentity.SigningKey.PublicKey)
	sum := sha256.Sum256(der)
	rules, err := fileutil.ReadLimited(nodePolicy, 64<<10)
	if err != nil {
		return nil, nil, fmt.Errorf("--node-policy: %w", err)
	}
	plan := &identityPlan{pub: pub, fingerprint: hex.EncodeToString(sum[:8]), nodeRules: string(rules)}
	for i := range cfg.Roles {
		r := &cfg.Roles[i]
		for _, h := range hostNames(cfg, r, extra) {
			hr, err := store.HostPolicyRules(cfg.Prefix, h, r.Name)
			if err != nil {
				return nil, nil, fmt.Errorf("roles[%s]: %w", r.Name, err)
			}
			plan.hosts = append(plan.hosts, [2]string{h, hr})
		}
	}
	return plan, cfg, nil
}

// applyIdentity writes the plan; a refusal is exit 3 naming what Consul
// refused.
func applyIdentity(ctx context.Context, c *api.Client, cfg *reaper.Config, plan *identityPlan, out io.Writer) error {
	ni := cfg.NodeIdentity
	if err := nodeid.Setup(ctx, c, ni.AuthMethod, ni.Audience, nodeid.DefaultRole, plan.pub, plan.nodeRules); err != nil {
		return exitcode.Wrap(exitcode.Unavailable, err)
	}
	fmt.Fprintf(out, "auth method %s, its binding rules and role %s: up to date\n", ni.AuthMethod, nodeid.DefaultRole)
	for _, h := range plan.hosts {
		if err := nodeid.ApplyHostPolicy(ctx, c, h[0], h[1]); err != nil {
			return exitcode.Wrap(exitcode.Unavailable, err)
		}
	}
	fmt.Fprintf(out, "%d host policies up to date (%s ... %s)\n", len(plan.hosts), nodeid.HostPolicyName(plan.hosts[0][0]), nodeid.HostPolicyName(plan.hosts[len(plan.hosts)-1][0]))
	return nil
}

func indent(s string) string {
	var b strings.Builder
	for _, l := range strings.Split(strings.TrimRight(s, "\n"), "\n") {
		b.WriteString("  " + l + "\n")
	}
	return b.String()
}
