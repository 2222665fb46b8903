// Package paths owns every location and local address that more than one
// part of orchestrate uses: where the Debian package installs the binaries,
// units and configuration, where hiera-services writes the hiera data that
// converge and Puppet read, the node's token file, the log directory and
// the lock files. The binaries take their defaults from here; the Puppet
// module, the systemd units, nfpm.yaml, the packaged configuration and the
// examples spell the same values, and the package's test
// (agree_test.go) fails when one of them says otherwise.
//
// The Consul KV prefix is not here: internal/store owns it
// (schema.DefaultPrefix), as it owns every key.
package paths

// Binaries, as the package installs them (packaging/nfpm.yaml).
const (
	// BinDir holds the four binaries.
	BinDir = "/usr/bin"
	// Orchestrate is the orchestrate binary, which the watches run.
	Orchestrate = BinDir + "/orchestrate"
	// HieraServices is the hiera-services binary, which the watches and
	// orchestrate-hiera-services.service run.
	HieraServices = BinDir + "/hiera-services"
	// Reaper is the reaper binary (orchestrate-reaper.service).
	Reaper = BinDir + "/reaper"
	// ServiceBlocker is the service-blocker binary that
	// orchestrate::service_blocker execs.
	ServiceBlocker = BinDir + "/service-blocker"
)

// Configuration, in the package's configuration directory.
const (
	// ConfigDir is the package's configuration directory.
	ConfigDir = "/etc/orchestrate"
	// Dependencies is the node's dependencies file (hiera-services and
	// watch-config --dependencies); the package installs an empty one.
	Dependencies = ConfigDir + "/dependencies.yaml"
	// NodeToken is the node's Consul token file, read by the watch
	// handlers, orchestrate and hiera-services (policy node.hcl). The
	// package does not install it: the user data or Puppet writes it.
	NodeToken = ConfigDir + "/node.token"
	// HieraServicesEnv is the environment file of
	// orchestrate-hiera-services.service.
	HieraServicesEnv = ConfigDir + "/hiera-services.env"
	// HieraPublisherEnv is the environment file of
	// orchestrate-hiera-publisher.service.
	HieraPublisherEnv = ConfigDir + "/hiera-publisher.env"
	// HieraPublisherToken is the catalog change feed publisher's Consul
	// token file (policy hiera-publisher.hcl), which
	// HieraPublisherEnv names.
	HieraPublisherToken = ConfigDir + "/hiera-publisher.token"
	// ReaperConfig is the reaper's configuration (reaper --config).
	ReaperConfig = ConfigDir + "/reaper.yaml"
	// ReaperEnv is the environment file of orchestrate-reaper.service.
	ReaperEnv = ConfigDir + "/reaper.env"
	// ReaperToken is the reaper's Consul token file (policy reaper.hcl).
	ReaperToken = ConfigDir + "/reaper.token"
	// Clouds is the reaper's clouds.yaml (OS_CLIENT_CONFIG_FILE).
	Clouds = ConfigDir + "/clouds.yaml"
	// NodeIdentityKey is the reaper's private key for the servers' tokens
	// (reaper.yaml node_identity.key_file), readable by the reaper only.
	NodeIdentityKey = ConfigDir + "/node-identity.key"
	// LogGrant is a node's write-only upload grant for its failure logs
	// (a Swift prefix temp URL, internal/logship), written by the first
	// boot from the reaper's user-data part, mode 0600.
	LogGrant = ConfigDir + "/log-grant.json"
)

// State, logs and locks.
const (
	// StateDir is the state directory of the package's units (systemd
	// StateDirectory=orchestrate) and the home of the user orchestrate.
	StateDir = "/var/lib/orchestrate"
	// HieraDir holds the hiera data (StateDirectory=orchestrate/hiera).
	HieraDir = StateDir + "/hiera"
	// HieraData is the services.yaml hiera-services writes (its --out),
	// converge reads (its --hiera-data) and Puppet's hiera reads through
	// a level of its own (examples/hiera.yaml).
	HieraData = HieraDir + "/services.yaml"
	// LogDir receives converge's run logs.
	LogDir = "/var/log/orchestrate"
	// LogSpool holds the failure logs not yet uploaded to Swift
	// (internal/logship), retried by the next converge and `orchestrate
	// logs flush`.
	LogSpool = StateDir + "/log-spool"
	// LockDir is where the per-host locks live (Debian's /var/lock is a
	// link to it).
	LockDir = "/run/lock"
	// ConvergeLock serialises converge runs on a host: every watch that
	// runs converge takes the same one.
	ConvergeLock = LockDir + "/orchestrate-converge.lock"
	// DrainLock serialises drain handler runs on a host.
	DrainLock = LockDir + "/orchestrate-drain.lock"
)

// Consul's side of a node.
const (
	// ConsulConfigDir is the Consul agent's configuration directory.
	ConsulConfigDir = "/etc/consul.d"
	// WatchConfig is the file in it holding the watches watch-config
	// generates (class orchestrate writes it).
	WatchConfig = ConsulConfigDir + "/orchestrate-watches.json"
	// AgentTokenFile is the file in it, written by the reaper's part of a
	// server's user data, that gives the agent the node's own token (its
	// agent and default tokens).
	AgentTokenFile = ConsulConfigDir + "/orchestrate-node-token.json"
	// ConsulHTTPAddr is the local agent's HTTP API, the Consul API
	// client's default.
	ConsulHTTPAddr = "127.0.0.1:8500"
	// ConsulDNSAddr is the local agent's DNS server (service-blocker
	// --dns).
	ConsulDNSAddr = "127.0.0.1:8600"
)

// What else the package installs.
const (
	// User is the unprivileged user the units run as (sysusers.conf).
	User = "orchestrate"
	// ACLDir holds the shipped Consul ACL policies.
	ACLDir = "/usr/share/orchestrate/acl"
	// NodePolicy is the shared read-only policy every node's token
	// carries (the role orchestrate-node).
	NodePolicy = ACLDir + "/node.hcl"
	// AlertRules is the shipped Prometheus alerting rules file, for a
	// Prometheus server's rule_files (docs/alerts.md).
	AlertRules = "/usr/share/orchestrate/prometheus/orchestrate-alerts.yml"
	// Dashboard is the shipped Grafana dashboard of the reaper's metrics.
	Dashboard = "/usr/share/orchestrate/grafana/orchestrate-reaper.json"
	// PuppetModuleDir holds the Puppet module (class orchestrate and the
	// rest of puppet/orchestrate), in Debian puppet's modulepath
	// (/usr/share/puppet/modules), so `include orchestrate` finds it.
	PuppetModuleDir = "/usr/share/puppet/modules/orchestrate"
	// DocDir holds the documents and examples.
	DocDir = "/usr/share/doc/orchestrate"
	// BashCompletionDir, ZshCompletionDir and FishCompletionDir hold the
	// binaries' completion scripts (NAME, _NAME and NAME.fish), where
	// Debian's bash-completion, zsh and fish look for a package's own.
	BashCompletionDir = "/usr/share/bash-completion/completions"
	ZshCompletionDir  = "/usr/share/zsh/vendor-completions"
	FishCompletionDir = "/usr/share/fish/vendor_completions.d"
	// UnitDir is where the package puts its systemd units.
	UnitDir = "/lib/systemd/system"
	// HieraServicesUnit runs hiera-services --watch.
	HieraServicesUnit = "orchestrate-hiera-services.service"
	// HieraPublisherUnit runs hiera-services --publish, the catalog
	// change feed's publisher, on the bootstrap node(s).
	HieraPublisherUnit = "orchestrate-hiera-publisher.service"
	// ReaperUnit runs the reaper.
	ReaperUnit = "orchestrate-reaper.service"
)
