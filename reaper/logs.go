package reaper

import "time"

// Logs is where the servers' failure logs go (reaper.yaml logs:): a Swift
// container, and the temp URL key the reaper signs each server's
// write-only upload grant with (internal/logship). The grant rides in the
// reaper's part of the server's user data, next to its token, and is
// renewed in <prefix>/loggrants/<host>, which only that host's token reads
// (docs/acl.md). Needs node_identity.
type Logs struct {
	// ContainerURL is the container's URL,
	// https://SWIFT/v1/<account>/<container>.
	ContainerURL string `yaml:"container_url"`
	// TempURLKeyFile holds the container's temp URL key
	// (X-Container-Meta-Temp-URL-Key), readable by the reaper only.
	TempURLKeyFile string `yaml:"temp_url_key_file"`
	// GrantLifetime is how long a grant is valid (default 7 days).
	GrantLifetime Duration `yaml:"grant_lifetime"`
	// RenewBefore: a grant is renewed when it expires within this long
	// (default 2 days), so a node whose Consul is out for a while still
	// holds a valid one.
	RenewBefore Duration `yaml:"renew_before"`
	// Key is the temp URL key daemon.CheckConfig read (nil before).
	Key []byte `yaml:"-" json:"-"`
}

// Default grant timings: a week's grant renewed two days before its end
// leaves a node two days of Consul outage before its uploads are refused
// (they wait in its spool meanwhile).
const (
	DefaultGrantLifetime = 7 * 24 * time.Hour
	DefaultRenewBefore   = 2 * 24 * time.Hour
)
