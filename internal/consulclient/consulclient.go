// Package consulclient turns command-line flags and the CONSUL_* environment
// variables into a Consul API client, the way the consul CLI does, for every
// orchestrate binary.
//
// Precedence, highest first: --token-file, --token, CONSUL_HTTP_TOKEN_FILE,
// CONSUL_HTTP_TOKEN (the consul CLI's order). --consul-addr overrides
// CONSUL_HTTP_ADDR. TLS comes from CONSUL_CACERT, CONSUL_CLIENT_CERT,
// CONSUL_CLIENT_KEY and CONSUL_HTTP_SSL. A token is never written to a log
// line or an error message.
package consulclient

import (
	"errors"
	"fmt"
	"os"
	"strings"

	"github.com/hashicorp/consul/api"
	"github.com/spf13/pflag"

	"github.com/jiocloud/orchestrate/internal/exitcode"
	"github.com/jiocloud/orchestrate/internal/fileutil"
	"github.com/jiocloud/orchestrate/internal/paths"
)

// Options holds the connection flags shared by every binary.
type Options struct {
	Addr       string
	Token      string
	TokenFile  string
	Datacenter string
}

// AddFlags registers --consul-addr, --token, --token-file and --datacenter on fs.
func (o *Options) AddFlags(fs *pflag.FlagSet) {
	fs.StringVar(&o.Addr, "consul-addr", "", "Consul HTTP address (default $CONSUL_HTTP_ADDR, else "+paths.ConsulHTTPAddr+")")
	fs.StringVar(&o.Token, "token", "", "Consul ACL token; prefer --token-file or $CONSUL_HTTP_TOKEN_FILE, which keep it out of process listings")
	fs.StringVar(&o.TokenFile, "token-file", "", "file holding the Consul ACL token (default $CONSUL_HTTP_TOKEN_FILE)")
	fs.StringVar(&o.Datacenter, "datacenter", "", "Consul datacenter (default: the agent's)")
}

// Config builds the api.Config for these options on top of the environment.
// Problems with a token file are usage errors (exit 2); the message names the
// file, never its contents.
func (o Options) Config() (*api.Config, error) {
	cfg := api.DefaultConfig()
	if o.Addr != "" {
		cfg.Address = o.Addr
	}
	if o.Datacenter != "" {
		cfg.Datacenter = o.Datacenter
	}
	if o.Token != "" {
		cfg.Token = o.Token
		cfg.TokenFile = ""
	}
	if o.TokenFile != "" {
		cfg.TokenFile = o.TokenFile
	}
	if cfg.TokenFile != "" {
		if err := checkTokenFile(cfg.TokenFile); err != nil {
			return nil, exitcode.Wrap(exitcode.Usage, err)
		}
	}
	if strings.ContainsAny(cfg.Address, " \t\n") || cfg.Address == "" {
		return nil, exitcode.Usagef("consul address %q is not a host:port or URL", cfg.Address)
	}
	return cfg, nil
}

// Client returns a Consul client for these options.
func (o Options) Client() (*api.Client, error) {
	cfg, err := o.Config()
	if err != nil {
		return nil, err
	}
	return NewClient(cfg)
}

// NewClient returns a Consul client for a configuration that Config built.
// Its errors are usage errors (exit 2).
func NewClient(cfg *api.Config) (*api.Client, error) {
	c, err := api.NewClient(cfg)
	if err != nil {
		// api.NewClient fails only on local configuration (TLS files, token
		// file, address); none of its messages include the token.
		return nil, exitcode.Wrap(exitcode.Usage, fmt.Errorf("consul client: %w", err))
	}
	return c, nil
}

// maxTokenFile bounds a token file: a Consul token is a 36-character UUID;
// a file far larger (or a device such as /dev/zero) is refused before the
// Consul API client reads it whole.
const maxTokenFile = 64 << 10

func checkTokenFile(path string) error {
	data, err := fileutil.ReadLimited(path, maxTokenFile)
	if err != nil {
		var pe *os.PathError
		if errors.As(err, &pe) {
			return fmt.Errorf("read token file %s: %w", path, pe.Err)
		}
		return fmt.Errorf("read token file %s: %w", path, err)
	}
	if strings.TrimSpace(string(data)) == "" {
		return fmt.Errorf("token file %s is empty", path)
	}
	return nil
}
