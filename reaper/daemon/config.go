package daemon

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"strings"

	"github.com/prometheus/exporter-toolkit/web"
	"gopkg.in/yaml.v3"

	"github.com/jiocloud/orchestrate/internal/fileutil"
	"github.com/jiocloud/orchestrate/internal/yamlconf"
	"github.com/jiocloud/orchestrate/reaper"
	"github.com/jiocloud/orchestrate/reaper/prometheus"
)

// maxConfigFile bounds the configuration file: a real one is a few KiB.
const maxConfigFile = 1 << 20

// LoadConfig reads and parses the file at path, over the defaults
// (ORCHESTRATE_PREFIX, when set, is the default prefix). Its errors name
// the file, the line and the field (internal/yamlconf).
func LoadConfig(path string) (*reaper.Config, error) {
	data, err := fileutil.ReadInput(path, maxConfigFile)
	if err != nil {
		return nil, err
	}
	def := reaper.DefaultConfig()
	if p := os.Getenv("ORCHESTRATE_PREFIX"); p != "" {
		def.Prefix = p
	}
	return reaper.DecodeFile(path, data, def)
}

// CheckConfig validates c (reaper.Config.Validate) and then reads and
// checks the files it names: the web configuration that protects /metrics,
// each role's user data, the node identity key. It names the first bad
// field, at its line of the configuration file when c was read from one.
func CheckConfig(c *reaper.Config) error {
	return c.Source.Annotate(checkConfig(c))
}

func checkConfig(c *reaper.Config) error {
	if err := c.Validate(); err != nil {
		return err
	}
	if err := checkWebConfig(c); err != nil {
		return err
	}
	for i := range c.Roles {
		if err := readUserData(reaper.RoleField(i), &c.Roles[i]); err != nil {
			return err
		}
	}
	for i := range c.Roles {
		if a := c.Roles[i].Autoscale; a != nil && a.Metric.Prometheus != nil {
			if _, err := prometheus.HTTPConfig(a.Metric.Prometheus); err != nil {
				return fmt.Errorf("%s.autoscale.metric.prometheus: %w", reaper.RoleField(i), err)
			}
		}
	}
	if err := validateIdentity(c); err != nil {
		return err
	}
	return validateLogs(c)
}

// readUserData reads the role's user-data file into its boot spec: a file
// that cannot be read is named with why; one too large for Nova says how
// large it may be.
func readUserData(field string, r *reaper.Role) error {
	b := &r.Boot
	if b.UserDataFile == "" {
		return nil
	}
	data, err := fileutil.ReadLimited(b.UserDataFile, reaper.MaxUserData)
	var pe *fs.PathError
	switch {
	case errors.Is(err, fileutil.ErrTooLarge):
		return fmt.Errorf("%s.boot.user_data_file: %s is larger than %d bytes, the most Nova takes (65,535 bytes of base64)", field, b.UserDataFile, reaper.MaxUserData)
	case errors.As(err, &pe):
		return fmt.Errorf("%s.boot.user_data_file: %s: %w", field, b.UserDataFile, pe.Err)
	case err != nil:
		return fmt.Errorf("%s.boot.user_data_file: %s: %w", field, b.UserDataFile, err)
	}
	b.UserData = data
	return nil
}

// checkWebConfig: a web configuration that is given must be valid; with
// /metrics off loopback it must serve TLS or ask for a password.
func checkWebConfig(c *reaper.Config) error {
	if c.WebConfigFile == "" {
		return nil
	}
	// The toolkit's own decoding names Go types; the file is walked first
	// so that a misspelt key or a wrong kind of value is named in YAML's
	// words, at its line.
	data, err := fileutil.ReadInput(c.WebConfigFile, maxConfigFile)
	if err != nil {
		return fmt.Errorf("web_config_file: %w", err)
	}
	if _, err := yamlconf.Decode(c.WebConfigFile, data, &web.Config{}); err != nil {
		return fmt.Errorf("web_config_file: %w", err)
	}
	if err := web.Validate(c.WebConfigFile); err != nil {
		if msg, ok := strings.CutPrefix(err.Error(), "crypto/bcrypt: "); ok {
			return fmt.Errorf("web_config_file %s: basic_auth_users: a password is not a bcrypt hash (htpasswd -nBC 10 USER makes one): %s", c.WebConfigFile, msg)
		}
		return fmt.Errorf("web_config_file %s: %w", c.WebConfigFile, err)
	}
	if c.Listen == "" || c.ListenLoopback() {
		return nil
	}
	protected, err := webConfigProtects(c.WebConfigFile)
	if err != nil {
		return fmt.Errorf("web_config_file %s: %w", c.WebConfigFile, err)
	}
	if !protected {
		return fmt.Errorf("listen %q is not a loopback address and web_config_file %s sets neither TLS (tls_server_config: cert_file or cert) nor basic_auth_users: /metrics would be open to the network", c.Listen, c.WebConfigFile)
	}
	return nil
}

// webConfigProtects says whether a Prometheus web configuration (already
// validated by the toolkit) serves TLS or asks for a password: a file that
// sets only headers or a rate limit protects nothing.
func webConfigProtects(path string) (bool, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return false, err
	}
	var wc struct {
		TLS struct {
			Cert     string `yaml:"cert"`
			CertFile string `yaml:"cert_file"`
		} `yaml:"tls_server_config"`
		Users map[string]string `yaml:"basic_auth_users"`
	}
	if err := yaml.Unmarshal(data, &wc); err != nil {
		return false, err
	}
	return wc.TLS.Cert != "" || wc.TLS.CertFile != "" || len(wc.Users) > 0, nil
}
