package reaper

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net/netip"
	"regexp"
	"strings"
	"time"

	"github.com/jiocloud/orchestrate/internal/store/reaperkv"
	"github.com/jiocloud/orchestrate/internal/store/schema"
	"github.com/jiocloud/orchestrate/internal/yamlconf"
	"gopkg.in/yaml.v3"
)

// Duration is a time.Duration written in YAML as a Go duration string
// ("90s", "10m", "168h").
type Duration time.Duration

// UnmarshalYAML reads a duration string.
func (d *Duration) UnmarshalYAML(n *yaml.Node) error {
	var s string
	if n.Kind != yaml.ScalarNode || n.Decode(&s) != nil {
		return fmt.Errorf("want a duration such as 90s, 10m or 72h, got %s", yamlconf.Describe(n))
	}
	v, err := yamlconf.ParseDuration(s)
	if err != nil {
		return err
	}
	*d = Duration(v)
	return nil
}

// MarshalYAML writes the duration as a string.
func (d Duration) MarshalYAML() (any, error) { return time.Duration(d).String(), nil }

// D returns the time.Duration.
func (d Duration) D() time.Duration { return time.Duration(d) }

// Replacement modes.
const (
	// ModeSurge creates the replacement first and deletes the old server only
	// once the new one checked in passing (launch-before-terminate).
	ModeSurge = "surge"
	// ModeDeleteFirst drains and deletes the old server, then creates its
	// replacement: for roles whose quota forbids a surge.
	ModeDeleteFirst = "delete-first"
)

// What a role does with its drifted servers (refresh).
const (
	// RefreshOff (the default): drifted servers are counted and reported.
	RefreshOff = "off"
	// RefreshAuto: each drifted server (or one with no recorded spec) is
	// replaced in turn, as a max-age retirement is.
	RefreshAuto = "auto"
)

// Config is the reaper's configuration: defaults, then the YAML file, then
// flags, then Validate.
type Config struct {
	// DryRun logs every action and takes none. Nil in a file means "not
	// said"; the default is dry run, so acting needs an explicit false.
	DryRun *bool `yaml:"dry_run"`
	// Prefix is the Consul KV prefix (default $ORCHESTRATE_PREFIX, else orchestrate).
	Prefix string `yaml:"prefix"`
	// Interval is the longest time between cycles: a full cycle runs at
	// least this often with no change seen.
	Interval Duration `yaml:"interval"`
	// WakeOnChange: a change in Consul's health or in the KV the cycle
	// reads, and the plan's next deadline, start a cycle before the
	// interval ends. Nil in a file means the default, true; false keeps
	// the fixed interval alone.
	WakeOnChange *bool `yaml:"wake_on_change"`
	// MinCycleGap is the least time from one cycle's start to the next
	// one's when woken early, so a flapping fleet cannot spin the
	// reaper; 0 means the default (5s, or the interval when shorter).
	MinCycleGap Duration `yaml:"min_cycle_gap"`
	// LockKey is the leader lock; default <prefix>/reaper/leader.
	LockKey string `yaml:"lock_key"`
	// SessionTTL and LockDelay shape the leader session (see leader.go).
	SessionTTL Duration `yaml:"session_ttl"`
	LockDelay  Duration `yaml:"lock_delay"`
	// Listen is the address of /metrics; empty disables it.
	Listen string `yaml:"listen"`
	// WebConfigFile is a Prometheus web configuration (TLS, basic auth),
	// as Prometheus exporters take it; needed when Listen is not loopback.
	WebConfigFile string `yaml:"web_config_file"`
	// ServiceName is the Consul service the reaper registers itself as.
	ServiceName string `yaml:"service_name"`
	// MaxInFlight bounds replacements and deletions in flight per role.
	MaxInFlight int `yaml:"max_in_flight"`
	// MaxCreatesPerCycle bounds the servers created (or retried) in one
	// cycle, across the fleet.
	MaxCreatesPerCycle int `yaml:"max_creates_per_cycle"`
	// MaxActionsPerHour bounds destructive actions (drains leading to a
	// delete) over any sliding hour, across the fleet.
	MaxActionsPerHour int `yaml:"max_actions_per_hour"`
	// PauseFleetFraction and PauseRoleFraction: above these fractions of
	// unhealthy-looking servers nothing destructive happens.
	PauseFleetFraction float64 `yaml:"pause_fleet_fraction"`
	PauseRoleFraction  float64 `yaml:"pause_role_fraction"`
	// PauseMinServers: a fraction is judged only over at least this many
	// servers (one dead server of two is not a partition).
	PauseMinServers int `yaml:"pause_min_servers"`
	// DrainPeriod is the time between maintenance mode and delete.
	DrainPeriod Duration `yaml:"drain_period"`
	// CloudTimeout bounds a Nova list, and how long a server whose delete
	// Nova accepted may stay before the delete counts as stalled (no cycle
	// waits for a server to boot or to go).
	CloudTimeout Duration `yaml:"cloud_timeout"`
	// QuotaBackoff and QuotaBackoffMax: exponential backoff after a quota or
	// capacity error.
	QuotaBackoff    Duration `yaml:"quota_backoff"`
	QuotaBackoffMax Duration `yaml:"quota_backoff_max"`
	// HeartbeatInterval is how often the leader rings the nodes'
	// heartbeat (<prefix>/reaper/heartbeat): each node's watch answers in
	// its own record, so a healthy idle node's records move too (silent
	// hosts, silent_after).
	HeartbeatInterval Duration `yaml:"heartbeat_interval"`
	// DepartedRetention is how long a forgotten host's departed record
	// (<prefix>/reaper/departed/<host>: its failure-log links) is kept;
	// the leader prunes older ones, and the oldest beyond
	// reaperkv.DefaultMaxDeparted.
	DepartedRetention Duration `yaml:"departed_retention"`
	// Cloud says how to reach OpenStack.
	Cloud CloudConfig `yaml:"cloud"`
	// Roles are the machine roles the reaper keeps.
	Roles []Role `yaml:"roles"`
	// NodeIdentity, when set, gives every server the reaper builds a Consul
	// token of its own (identity.go).
	NodeIdentity *NodeIdentity `yaml:"node_identity"`
	// Logs, when set, gives every server the reaper builds a write-only
	// grant to upload its failure logs to Swift, and renews it (logs.go).
	Logs *Logs `yaml:"logs"`

	// Source is the file the configuration was read from, which places
	// the errors of Validate at their line (nil when built in code).
	Source *yamlconf.Doc `yaml:"-"`
}

// CloudConfig selects OpenStack credentials.
type CloudConfig struct {
	// Name is an entry of clouds.yaml (like OS_CLOUD); empty: $OS_CLOUD,
	// else the OS_* variables.
	Name string `yaml:"name"`
	// Region overrides the region of the credentials.
	Region string `yaml:"region"`
	// CloudsFile is the clouds.yaml to read (like OS_CLIENT_CONFIG_FILE);
	// empty: $OS_CLIENT_CONFIG_FILE, else ./clouds.yaml,
	// ~/.config/openstack/clouds.yaml, /etc/openstack/clouds.yaml.
	CloudsFile string `yaml:"clouds_file"`
}

// Role is one kind of machine.
type Role struct {
	Name string `yaml:"name"`
	// NameRegex recognises servers without role metadata (older servers,
	// servers made by hand). Servers the reaper creates carry role=<name>.
	NameRegex string `yaml:"name_regex"`
	// Desired is the count when <prefix>/roles/<name>/desired is not set.
	Desired int `yaml:"desired"`
	// MinHealthy: no deletion takes the role's healthy count below this.
	MinHealthy int `yaml:"min_healthy"`
	// ReplaceSuspect: a server whose consistent Puppet run failed on every
	// attempt (orchestrate converge marks it suspect) is replaced like an
	// unhealthy one, under every safety rule. Default off.
	ReplaceSuspect bool `yaml:"replace_suspect"`
	// Checks restricts the health checks that count (by check ID or name);
	// empty: every check on the node counts when critical, and the node
	// checks in through a check of one of its services.
	Checks []string `yaml:"checks"`
	// BootGrace: critical checks do not count this long after create,
	// until the server first served (seen passing, or validated).
	BootGrace Duration `yaml:"boot_grace"`
	// CriticalGrace: counted checks must stay critical this long.
	CriticalGrace Duration `yaml:"critical_grace"`
	// BootTimeout: a server with no Consul node this long after create is
	// unaccounted.
	BootTimeout Duration `yaml:"boot_timeout"`
	// AbsentGrace: after boot, a server counts as unaccounted only once it
	// has had no node (or none of the counted checks) this long without a
	// break; a catalog blip is not a death. Default: critical_grace.
	AbsentGrace Duration `yaml:"absent_grace"`
	// ErrorGrace: a server in Nova ERROR whose node passes its checks is
	// replaced only once the ERROR has lasted this long (or its checks
	// fail). Default: critical_grace.
	ErrorGrace Duration `yaml:"error_grace"`
	// SilentAfter: a server Nova lists whose host's own records (under
	// <prefix>/hosts/<host>/, its heartbeat included) have not moved this
	// long is silent: shown, counted, never replaced for it. At least
	// twice heartbeat_interval.
	SilentAfter Duration `yaml:"silent_after"`
	// OrphanGrace: the records of a host named like the role's servers,
	// with no server in Nova, no Consul node and no journal entry, are
	// removed once the host has been so this long without a break.
	OrphanGrace Duration `yaml:"orphan_grace"`
	// MaxAge (0: none) and MaxAgeJitter: servers are replaced after
	// MaxAge minus a per-server share of the jitter.
	MaxAge       Duration `yaml:"max_age"`
	MaxAgeJitter Duration `yaml:"max_age_jitter"`
	// ReplaceMode is surge (default) or delete-first.
	ReplaceMode string `yaml:"replace_mode"`
	// Refresh is off (default: drifted servers are reported) or auto:
	// the role's servers built from another boot spec, or with none
	// recorded, are replaced one at a time, oldest first, only while every
	// server of the role serves and nothing else of it is in flight.
	Refresh string `yaml:"refresh"`
	// RefreshMinHealthyPercent (default 90, AWS instance refresh's) sizes
	// a refresh's batches: at most desired minus this share of it (at
	// least 1, at most max_in_flight) drifted servers are replaced at a
	// time.
	RefreshMinHealthyPercent int `yaml:"refresh_min_healthy_percent"`
	// DrainTimeout is how long a drain waits for the node's (or the
	// platform's) answer that its work moved away, before the server is
	// deleted all the same. Default: the config's drain_period.
	DrainTimeout Duration `yaml:"drain_timeout"`
	// OnDrainFailure and OnDrainTimeout say how a scale-in's or a max-age
	// retirement's drain ends when the node answers that moving its work
	// away failed, or does not answer by drain_timeout: abort (the
	// default: the server stays, back in service, and is not chosen
	// again for DrainCooloff) or delete. Replacements for health delete
	// whatever the answer. See drainabort.go.
	OnDrainFailure string   `yaml:"on_drain_failure"`
	OnDrainTimeout string   `yaml:"on_drain_timeout"`
	DrainCooloff   Duration `yaml:"drain_cooloff"`
	// MaxHeld caps the role's servers held for a human (hold.go); nil:
	// reaperkv.DefaultMaxHeld, 0: no hold of the role is honoured.
	// HoldFailures: the reaper holds this many of the role's failures
	// itself (at most max_held at once), for HoldFor with HoldReason.
	MaxHeld      *int     `yaml:"max_held"`
	HoldFailures int      `yaml:"hold_failures"`
	HoldFor      Duration `yaml:"hold_for"`
	HoldReason   string   `yaml:"hold_reason"`
	// Repair is the role's repair ladder (repair.go): a prefix of rerun,
	// reboot, rebuild, tried in turn on an unhealthy server before it is
	// replaced; empty: replaced at once, as before.
	Repair []string `yaml:"repair"`
	// RepairGrace is how long a rerun or a reboot has to make the server
	// serve again (a rebuild has boot_grace). Default: critical_grace.
	RepairGrace Duration `yaml:"repair_grace"`
	// OnLaunch and OnTerminate are the role's lifecycle hooks (hooks.go):
	// absent, none.
	OnLaunch    *Hook `yaml:"on_launch"`
	OnTerminate *Hook `yaml:"on_terminate"`
	// Autoscale, when set, makes the role's desired count follow a
	// metric; absent, the count is fixed (desired, or orchestrate scale).
	Autoscale *Autoscale `yaml:"autoscale"`
	// WarmPool, when set with a size, keeps standby servers of the role
	// built and converged, claimed instead of created; absent or size 0:
	// every server is created when needed.
	WarmPool *WarmPool `yaml:"warm_pool"`
	// AvailabilityZones spreads the role's servers across these Nova
	// availability zones: a create goes to the zone with the fewest
	// serving members (a zone backed off after a capacity refusal is
	// skipped), a scale-in takes from the fullest. Empty: Nova's choice,
	// or boot.availability_zone (never both).
	AvailabilityZones ZoneList `yaml:"availability_zones"`
	// AntiAffinity puts every server the reaper builds for the role in a
	// Nova server group of its own: soft (the default, policy
	// soft-anti-affinity: spread over hosts where Nova can), hard
	// (anti-affinity: never two on one host; a create Nova cannot place
	// fails as capacity) or none (no group).
	AntiAffinity string `yaml:"anti_affinity"`
	// Boot is how to create a server of this role.
	Boot BootSpec `yaml:"boot"`

	nameRE *regexp.Regexp
	// namePrefix and nameSuffix are what the name template puts before and
	// after the first {n}, with {role} filled in: parsed once by validate,
	// read by every plan to find free and stray names.
	namePrefix, nameSuffix string
}

// Warm pool standby states.
const (
	// PoolRunning keeps standbys running (in Consul maintenance).
	PoolRunning = "running"
	// PoolStopped stops ready standbys through Nova; a claim starts them.
	PoolStopped = "stopped"
)

// maxPoolSize bounds a role's warm pool: standbys cost quota and money,
// and the pool's records are synced in one Consul transaction per cycle
// (Consul takes at most 64 operations in one).
const maxPoolSize = 20

// defaultClaimTimeout is how long a claimed standby has to serve: it is
// converged already, so it needs its node out of maintenance and a check
// interval or two; 5m also covers a stopped standby's start.
const defaultClaimTimeout = 5 * time.Minute

// WarmPool is a role's pool of standby servers.
type WarmPool struct {
	// Size is the number of standbys kept (0: no pool).
	Size int `yaml:"size"`
	// State is running (default) or stopped.
	State string `yaml:"state"`
	// ClaimTimeout: a claimed standby that does not serve this long after
	// its claim is rolled back like a failed create (default 5m).
	ClaimTimeout Duration `yaml:"claim_timeout"`
}

// hasPool reports whether any role has a warm pool.
func (c *Config) HasPool() bool {
	for i := range c.Roles {
		if c.Roles[i].PoolSize() > 0 {
			return true
		}
	}
	return false
}

// PoolSize is the role's warm pool size (0 without one).
func (r *Role) PoolSize() int {
	if r.WarmPool == nil {
		return 0
	}
	return r.WarmPool.Size
}

// claimTimeout is the pool's claim timeout (the default without a pool:
// a claim entry outlives a pool removed from the configuration).
func (w *WarmPool) ClaimWait() time.Duration {
	if w == nil || w.ClaimTimeout == 0 {
		return defaultClaimTimeout
	}
	return w.ClaimTimeout.D()
}

func (w *WarmPool) validate(field string) error {
	if w.Size < 0 || w.Size > maxPoolSize {
		return fmt.Errorf("%s.warm_pool.size: must be between 0 and %d, got %d", field, maxPoolSize, w.Size)
	}
	switch w.State {
	case "":
		w.State = PoolRunning
	case PoolRunning:
	case PoolStopped:
	default:
		return fmt.Errorf("%s.warm_pool.state: want %s or %s, got %q", field, PoolRunning, PoolStopped, w.State)
	}
	if w.ClaimTimeout == 0 {
		w.ClaimTimeout = Duration(defaultClaimTimeout)
	}
	if w.ClaimTimeout < 0 {
		return fmt.Errorf("%s.warm_pool.claim_timeout: must be a positive duration, got %s", field, w.ClaimTimeout.D())
	}
	return nil
}

// BootSpec is what Nova needs to create a server.
type BootSpec struct {
	Flavor string `yaml:"flavor"`
	Image  string `yaml:"image"`
	// Networks are network UUIDs, or the single word "none" or "auto".
	Networks         []string          `yaml:"networks"`
	KeyName          string            `yaml:"key_name"`
	SecurityGroups   []string          `yaml:"security_groups"`
	AvailabilityZone string            `yaml:"availability_zone"`
	UserDataFile     string            `yaml:"user_data_file"`
	Metadata         map[string]string `yaml:"metadata"`
	Tags             []string          `yaml:"tags"`
	// NameTemplate names new servers: {role} is the role, {n} the lowest
	// free index from 1, e.g. "{role}{n}-prod".
	NameTemplate string `yaml:"name_template"`

	// UserData is the content of UserDataFile, read by daemon.CheckConfig
	// (never a key of the file: a configuration names its user data by
	// path).
	UserData []byte `yaml:"-"`
}

// Digest is the boot spec as one value, recorded in the Nova metadata of
// every server the reaper builds (MetaSpec): a SHA-256 over what the
// server is built from, which a change of makes the role's servers
// drifted: the image, the flavor, the networks, the key pair and the user
// data (the role's file; a node token's part, different for each server,
// is not in it). Names, tags, metadata, security groups and the
// availability zone are not: changing them needs no new server. An image
// or flavor is taken as the configuration names it: a new image uploaded
// under the same name is no change of the spec.
func (b *BootSpec) Digest() string {
	h := sha256.New()
	for _, f := range [][]byte{[]byte(b.Image), []byte(b.Flavor), []byte(strings.Join(b.Networks, "\n")), []byte(b.KeyName), b.UserData} {
		// Each field length-prefixed: no two specs share an encoding.
		fmt.Fprintf(h, "%d:", len(f))
		h.Write(f)
	}
	return hex.EncodeToString(h.Sum(nil))
}

// Defaults. Each number is chosen to be cautious: a reaper that waits a
// cycle too long costs little, one that deletes too soon can cause an outage.
const (
	// 30s: a dead machine is noticed within a cycle of its grace ending;
	// each cycle is one Nova list and one health query, cheap at this rate.
	defaultInterval = 30 * time.Second
	// 5s between cycles woken by a change: a cycle costs one Nova list,
	// so a fleet whose checks flap all the time costs at most 12 lists a
	// minute, and a grace of minutes is acted on within seconds.
	defaultMinCycleGap = 5 * time.Second
	// Session TTL and lock delay: see leader.go.
	defaultSessionTTL = 15 * time.Second
	defaultLockDelay  = 15 * time.Second
	// Loopback only: metrics are for the local Prometheus agent.
	defaultListen      = "127.0.0.1:9469"
	defaultServiceName = "reaper"
	// One replacement per role at a time: a bad image or flavor costs one
	// failed server, not the role.
	defaultMaxInFlight = 1
	// 90%: AWS instance refresh's MinHealthyPercentage default.
	defaultRefreshMinHealthy = 90
	// 10 creates a cycle: a count set by mistake (40 for 4), or a whole
	// cloud's first build, reaches Nova in paced batches (20 a minute at
	// the default interval) instead of all at once, and a bad image
	// costs one batch before the errors back the role off.
	defaultMaxCreates = 10
	// 10 an hour: a runaway (bad health check, bad config) destroys at
	// most 10 machines before a human looks.
	defaultMaxPerHour = 10
	// The anchors' numbers: Kubernetes' node lifecycle controller stops
	// evicting above 55% unhealthy in a zone; cluster-autoscaler's
	// max-total-unready-percentage is 45.
	defaultPauseFleet = 0.45
	defaultPauseRole  = 0.55
	// Below 3 servers a fraction says nothing (1 of 2 is 50%).
	defaultPauseMin = 3
	// 60s: long enough for DNS TTLs and load balancer health checks to
	// stop sending traffic to a node in maintenance.
	defaultDrainPeriod = 60 * time.Second
	// 10m: a Nova create or delete normally takes seconds to a minute.
	defaultCloudTimeout    = 10 * time.Minute
	defaultQuotaBackoff    = time.Minute
	defaultQuotaBackoffMax = 30 * time.Minute
	// 15m after create before critical checks count: a Puppet run on a new
	// node takes minutes, and its services are critical until it is done.
	defaultBootGrace = 15 * time.Minute
	// 5m critical before a node counts as dead: longer than a service
	// restart or a Puppet run's brief outage.
	defaultCriticalGrace = 5 * time.Minute
	// 30m without a Consul node: the machine never booted or never joined.
	defaultBootTimeout = 30 * time.Minute
	// 10m between heartbeats: a fleet of 1,000 nodes writes 100 records a
	// minute for it (docs/orchestrate.md, "Silent hosts").
	defaultHeartbeatInterval = 10 * time.Minute
	// 30m: three heartbeats missed, not one answer lost or late.
	defaultSilentAfter = 30 * time.Minute
	// 1h: far longer than a Nova list that misses a server for a cycle, or
	// a server rebuilt under its name.
	defaultOrphanGrace = time.Hour
)

// DefaultConfig returns a config with every default filled in and no roles.
func DefaultConfig() *Config {
	return &Config{
		Prefix:             schema.DefaultPrefix,
		Interval:           Duration(defaultInterval),
		SessionTTL:         Duration(defaultSessionTTL),
		LockDelay:          Duration(defaultLockDelay),
		Listen:             defaultListen,
		ServiceName:        defaultServiceName,
		MaxInFlight:        defaultMaxInFlight,
		MaxCreatesPerCycle: defaultMaxCreates,
		MaxActionsPerHour:  defaultMaxPerHour,
		PauseFleetFraction: defaultPauseFleet,
		PauseRoleFraction:  defaultPauseRole,
		PauseMinServers:    defaultPauseMin,
		DrainPeriod:        Duration(defaultDrainPeriod),
		CloudTimeout:       Duration(defaultCloudTimeout),
		QuotaBackoff:       Duration(defaultQuotaBackoff),
		QuotaBackoffMax:    Duration(defaultQuotaBackoffMax),
		HeartbeatInterval:  Duration(defaultHeartbeatInterval),
		DepartedRetention:  Duration(reaperkv.DefaultDepartedRetention),
	}
}

// ParseConfig reads YAML on top of DefaultConfig. Unknown fields are errors.
// Role defaults are applied; Validate still has to be called.
func ParseConfig(r io.Reader) (*Config, error) {
	return Decode(r, DefaultConfig())
}

// Decode reads a configuration from r over c (defaults, or defaults the
// caller changed) and fills in each role's defaults.
func Decode(r io.Reader, c *Config) (*Config, error) {
	data, err := io.ReadAll(r)
	if err != nil {
		return nil, err
	}
	return DecodeFile("", data, c)
}

// DecodeFile reads the configuration in data, the contents of file, over
// c. Its errors, and those of Validate through c.Source, name the file,
// the line and the field as the YAML writes it.
func DecodeFile(file string, data []byte, c *Config) (*Config, error) {
	doc, err := yamlconf.Decode(file, data, c)
	if err != nil {
		return nil, err
	}
	c.Source = doc
	for i := range c.Roles {
		c.Roles[i].ApplyDefaults()
	}
	return c, nil
}

// maxUserData is the most raw user data Nova takes: it accepts 65,535 bytes
// of base64, which encodes 49,149 bytes.
const MaxUserData = 49149

func (r *Role) ApplyDefaults() {
	if r.BootGrace == 0 {
		r.BootGrace = Duration(defaultBootGrace)
	}
	if r.CriticalGrace == 0 {
		r.CriticalGrace = Duration(defaultCriticalGrace)
	}
	if r.BootTimeout == 0 {
		r.BootTimeout = Duration(defaultBootTimeout)
	}
	if r.AbsentGrace == 0 {
		r.AbsentGrace = r.CriticalGrace
	}
	if r.ErrorGrace == 0 {
		r.ErrorGrace = r.CriticalGrace
	}
	if r.SilentAfter == 0 {
		r.SilentAfter = Duration(defaultSilentAfter)
	}
	if r.OrphanGrace == 0 {
		r.OrphanGrace = Duration(defaultOrphanGrace)
	}
	if r.ReplaceMode == "" {
		r.ReplaceMode = ModeSurge
	}
	if r.RefreshMinHealthyPercent == 0 {
		r.RefreshMinHealthyPercent = defaultRefreshMinHealthy
	}
	if r.Boot.NameTemplate == "" {
		r.Boot.NameTemplate = "{role}{n}"
	}
	if r.AntiAffinity == "" {
		r.AntiAffinity = AntiAffinitySoft
	}
	if r.Autoscale != nil {
		r.Autoscale.ApplyDefaults()
		if r.Desired == 0 {
			r.Desired = r.Autoscale.Min
		}
	}
}

// WakesOnChange reports whether a change or a deadline may start a cycle
// before the interval ends (the default).
func (c *Config) WakesOnChange() bool { return c.WakeOnChange == nil || *c.WakeOnChange }

// CycleGap is the least time between the starts of two cycles when woken
// early: min_cycle_gap, or by default 5s, or the interval when shorter.
func (c *Config) CycleGap() time.Duration {
	if c.MinCycleGap > 0 {
		return c.MinCycleGap.D()
	}
	return min(defaultMinCycleGap, c.Interval.D())
}

// IsDryRun reports whether the reaper only logs (the default).
func (c *Config) IsDryRun() bool { return c.DryRun == nil || *c.DryRun }

// LeaderKey is the lock key.
func (c *Config) LeaderKey() string {
	if c.LockKey != "" {
		return c.LockKey
	}
	return reaperkv.ReaperKey(c.Prefix, reaperkv.ReaperLeaderKey)
}

// Role returns the role named name, or nil.
func (c *Config) Role(name string) *Role {
	for i := range c.Roles {
		if c.Roles[i].Name == name {
			return &c.Roles[i]
		}
	}
	return nil
}

// validateListen: /metrics off loopback needs a web configuration (TLS
// and/or basic auth); whether the file given protects /metrics is checked
// where files are read (daemon.CheckConfig).
func (c *Config) validateListen() error {
	if c.Listen == "" {
		return nil
	}
	if _, err := listenHost(c.Listen); err != nil {
		return fmt.Errorf("listen %q: want host:port: %w", c.Listen, err)
	}
	if c.ListenLoopback() {
		return nil
	}
	if c.WebConfigFile == "" {
		return fmt.Errorf("listen %q is not a loopback address: /metrics would be open to the network; set web_config_file (a Prometheus web configuration with TLS and/or basic auth) or listen on 127.0.0.1", c.Listen)
	}
	return nil
}

// ListenLoopback reports whether /metrics listens on loopback only.
func (c *Config) ListenLoopback() bool {
	host, err := listenHost(c.Listen)
	if err != nil {
		return false
	}
	ip, err := netip.ParseAddr(host)
	return host == "localhost" || (err == nil && ip.Unmap().IsLoopback())
}

// listenHost returns the host of a host:port ("[::1]:9469" gives ::1),
// as net.SplitHostPort would, without the net package.
func listenHost(hostPort string) (string, error) {
	i := strings.LastIndexByte(hostPort, ':')
	if i < 0 {
		return "", errors.New("missing port in address")
	}
	host := hostPort[:i]
	if strings.HasPrefix(host, "[") && strings.HasSuffix(host, "]") {
		return host[1 : len(host)-1], nil
	}
	if strings.ContainsAny(host, ":[]") {
		return "", errors.New("too many colons in address")
	}
	return host, nil
}

// Validate checks every value and names the first bad field; it compiles
// the regexes and fills in what the values imply. It reads no file: the
// files a configuration names (user data, the web configuration, the node
// identity key) are read and checked by daemon.CheckConfig.
//
// Its errors start with the field's path as the YAML writes it
// (roles[1].min_healthy) and, for a configuration read from a file
// (Source), name the file and the field's line.
func (c *Config) Validate() error {
	return c.Source.Annotate(c.validate())
}

func (c *Config) validate() error {
	c.Prefix = strings.Trim(c.Prefix, "/")
	if err := schema.ValidPrefix(c.Prefix); err != nil {
		return fmt.Errorf("prefix: %w", err)
	}
	if c.LockKey != "" && (strings.HasPrefix(c.LockKey, "/") || strings.HasSuffix(c.LockKey, "/") || strings.Contains(c.LockKey, "//")) {
		return fmt.Errorf("lock_key %q: want a KV key without leading, trailing or double slashes", c.LockKey)
	}
	if err := c.validateTimings(); err != nil {
		return err
	}
	if err := c.validateBrakes(); err != nil {
		return err
	}
	if err := c.validateListen(); err != nil {
		return err
	}
	if c.ServiceName == "" || schema.ValidName("service", c.ServiceName) != nil {
		return fmt.Errorf("service_name %q: want a plain name", c.ServiceName)
	}
	if err := c.validateRoles(); err != nil {
		return err
	}
	for i, r := range c.Roles {
		if r.SilentAfter < 2*c.HeartbeatInterval {
			return fmt.Errorf("%s.silent_after: %s is shorter than twice heartbeat_interval %s: one late heartbeat would make a host silent", RoleField(i), r.SilentAfter.D(), c.HeartbeatInterval.D())
		}
		if r.OrphanGrace < r.AbsentGrace {
			return fmt.Errorf("%s.orphan_grace: %s is shorter than absent_grace %s, the time a server may be missing from a Nova list", RoleField(i), r.OrphanGrace.D(), r.AbsentGrace.D())
		}
	}
	return nil
}

// validateTimings: every period is positive, the session TTL and lock
// delay are within what Consul accepts, and the quota backoff's cap is not
// below its start.
func (c *Config) validateTimings() error {
	pos := func(field string, d Duration) error {
		if d <= 0 {
			return fmt.Errorf("%s: must be a positive duration, got %s", field, d.D())
		}
		return nil
	}
	for _, f := range []struct {
		name string
		d    Duration
	}{{"interval", c.Interval}, {"drain_period", c.DrainPeriod}, {"cloud_timeout", c.CloudTimeout},
		{"quota_backoff", c.QuotaBackoff}, {"quota_backoff_max", c.QuotaBackoffMax}, {"lock_delay", c.LockDelay}, {"heartbeat_interval", c.HeartbeatInterval}} {
		if err := pos(f.name, f.d); err != nil {
			return err
		}
	}
	// Every node answers each ring with a KV write: a fleet of thousands
	// rung every few seconds would be a write storm.
	if c.HeartbeatInterval.D() < time.Minute {
		return fmt.Errorf("heartbeat_interval: %s is under a minute; every node writes its heartbeat record at each ring", c.HeartbeatInterval.D())
	}
	// Consul refuses session TTLs above 24h, and below its session_ttl_min
	// (10s unless the servers are configured otherwise).
	if c.SessionTTL.D() < time.Second || c.SessionTTL.D() > 24*time.Hour {
		return fmt.Errorf("session_ttl: must be between 1s and 24h (and at least the Consul servers' session_ttl_min, 10s by default), got %s", c.SessionTTL.D())
	}
	// A departed record kept less than an hour is gone before anyone
	// reads it; one kept over a year is a record nobody meant to keep.
	if c.DepartedRetention.D() < time.Hour || c.DepartedRetention.D() > 366*24*time.Hour {
		return fmt.Errorf("departed_retention: must be between 1h and 366 days (8784h), got %s", c.DepartedRetention.D())
	}
	if c.LockDelay.D() > 60*time.Second {
		return fmt.Errorf("lock_delay: must be at most 60s (Consul's limit), got %s", c.LockDelay.D())
	}
	if c.MinCycleGap < 0 {
		return fmt.Errorf("min_cycle_gap: must be a positive duration, got %s", c.MinCycleGap.D())
	}
	if c.MinCycleGap > c.Interval {
		return fmt.Errorf("min_cycle_gap: %s is longer than interval %s; a cycle runs at least every interval", c.MinCycleGap.D(), c.Interval.D())
	}
	if c.QuotaBackoffMax < c.QuotaBackoff {
		return fmt.Errorf("quota_backoff_max: %s is shorter than quota_backoff %s", c.QuotaBackoffMax.D(), c.QuotaBackoff.D())
	}
	return nil
}

// validateBrakes: the limits on how much the reaper does at once
// (max_in_flight and max_creates_per_cycle at least 1, max_actions_per_hour
// not negative) and the thresholds of its pause (the fleet and role
// fractions in (0, 1], pause_min_servers at least 1).
func (c *Config) validateBrakes() error {
	if c.MaxInFlight < 1 {
		return fmt.Errorf("max_in_flight: must be at least 1, got %d", c.MaxInFlight)
	}
	if c.MaxCreatesPerCycle < 1 {
		return fmt.Errorf("max_creates_per_cycle: must be at least 1, got %d", c.MaxCreatesPerCycle)
	}
	if c.MaxActionsPerHour < 0 {
		return fmt.Errorf("max_actions_per_hour: must not be negative, got %d", c.MaxActionsPerHour)
	}
	if c.PauseFleetFraction <= 0 || c.PauseFleetFraction > 1 {
		return fmt.Errorf("pause_fleet_fraction: must be in (0, 1], got %g", c.PauseFleetFraction)
	}
	if c.PauseRoleFraction <= 0 || c.PauseRoleFraction > 1 {
		return fmt.Errorf("pause_role_fraction: must be in (0, 1], got %g", c.PauseRoleFraction)
	}
	if c.PauseMinServers < 1 {
		return fmt.Errorf("pause_min_servers: must be at least 1, got %d", c.PauseMinServers)
	}
	return nil
}

// MaxRoleSize bounds a role's desired and min_healthy counts: no Nova
// project holds ten thousand servers of one role, so a larger number is a
// typo (a count pasted twice, a byte size) that would have the reaper
// create servers in batches until the quota stops it.
const MaxRoleSize = 10_000

// RoleField is how errors name the i-th role: as the YAML path to it,
// roles[i] (from 0), which the configuration's loader places at its line.
func RoleField(i int) string { return fmt.Sprintf("roles[%d]", i) }

// validateRoles: at least one role, each valid (its drain_timeout
// defaulting to drain_period) and named once. A role is named in errors by
// its place in the list (RoleField).
func (c *Config) validateRoles() error {
	if len(c.Roles) == 0 {
		return errors.New("roles: at least one role is needed")
	}
	seen := map[string]bool{}
	for i := range c.Roles {
		r := &c.Roles[i]
		field := RoleField(i)
		if r.DrainTimeout == 0 {
			r.DrainTimeout = c.DrainPeriod
		}
		if err := r.validate(field); err != nil {
			return err
		}
		if seen[r.Name] {
			return fmt.Errorf("%s.name: role %q is listed twice", field, r.Name)
		}
		seen[r.Name] = true
	}
	return nil
}

func (r *Role) validate(field string) error {
	if err := schema.ValidName("role", r.Name); err != nil {
		return fmt.Errorf("%s.name: %w", field, err)
	}
	if r.NameRegex != "" {
		re, err := regexp.Compile(r.NameRegex)
		if err != nil {
			return fmt.Errorf("%s.name_regex: %w", field, err)
		}
		r.nameRE = re
	}
	if r.Desired < 0 || r.Desired > MaxRoleSize {
		return fmt.Errorf("%s.desired: must be between 0 and %d, got %d", field, MaxRoleSize, r.Desired)
	}
	if r.MinHealthy < 0 || r.MinHealthy > MaxRoleSize {
		return fmt.Errorf("%s.min_healthy: must be between 0 and %d, got %d", field, MaxRoleSize, r.MinHealthy)
	}
	for _, f := range []struct {
		name string
		d    Duration
	}{{"boot_grace", r.BootGrace}, {"critical_grace", r.CriticalGrace}, {"boot_timeout", r.BootTimeout}, {"absent_grace", r.AbsentGrace}, {"error_grace", r.ErrorGrace}, {"drain_timeout", r.DrainTimeout},
		{"silent_after", r.SilentAfter}, {"orphan_grace", r.OrphanGrace}} {
		if f.d <= 0 {
			return fmt.Errorf("%s.%s: must be a positive duration, got %s", field, f.name, f.d.D())
		}
	}
	if r.MaxAge < 0 {
		return fmt.Errorf("%s.max_age: must not be negative, got %s", field, r.MaxAge.D())
	}
	if r.MaxAgeJitter < 0 || (r.MaxAge > 0 && r.MaxAgeJitter >= r.MaxAge) {
		return fmt.Errorf("%s.max_age_jitter: must be at least 0 and shorter than max_age, got %s", field, r.MaxAgeJitter.D())
	}
	if r.MaxAge > 0 && r.MaxAge < r.BootTimeout {
		return fmt.Errorf("%s.max_age: %s is shorter than boot_timeout %s", field, r.MaxAge.D(), r.BootTimeout.D())
	}
	if r.ReplaceMode != ModeSurge && r.ReplaceMode != ModeDeleteFirst {
		return fmt.Errorf("%s.replace_mode: want %s or %s, got %q", field, ModeSurge, ModeDeleteFirst, r.ReplaceMode)
	}
	if r.Refresh != "" && r.Refresh != RefreshOff && r.Refresh != RefreshAuto {
		return fmt.Errorf("%s.refresh: want %s or %s, got %q", field, RefreshOff, RefreshAuto, r.Refresh)
	}
	if r.RefreshMinHealthyPercent < 0 || r.RefreshMinHealthyPercent > 100 {
		return fmt.Errorf("%s.refresh_min_healthy_percent: want 0 to 100, got %d", field, r.RefreshMinHealthyPercent)
	}
	if err := r.validateDrainEnd(field); err != nil {
		return err
	}
	if err := r.validateHolds(field); err != nil {
		return err
	}
	if err := r.validateHooks(field); err != nil {
		return err
	}
	if err := r.validateRepair(field); err != nil {
		return err
	}
	if err := r.validatePlacement(field); err != nil {
		return err
	}
	if r.Autoscale != nil {
		if err := r.Autoscale.validate(field, r); err != nil {
			return err
		}
	}
	if r.WarmPool != nil {
		if err := r.WarmPool.validate(field); err != nil {
			return err
		}
	}
	for j, c := range r.Checks {
		if strings.TrimSpace(c) == "" {
			return fmt.Errorf("%s.checks[%d]: empty check name", field, j)
		}
	}
	return r.validateBoot(field)
}

// validateBoot checks the role's boot spec, parses its name template and
// reads its user data.
func (r *Role) validateBoot(field string) error {
	b := &r.Boot
	if b.Flavor == "" {
		return fmt.Errorf("%s.boot.flavor: required", field)
	}
	if b.Image == "" {
		return fmt.Errorf("%s.boot.image: required", field)
	}
	if len(b.Networks) > 1 {
		for j, n := range b.Networks {
			if n == "none" || n == "auto" {
				return fmt.Errorf("%s.boot.networks[%d]: %q must be the only entry", field, j, n)
			}
		}
	}
	for j, n := range b.Networks {
		if strings.TrimSpace(n) == "" {
			return fmt.Errorf("%s.boot.networks[%d]: empty", field, j)
		}
	}
	if !strings.Contains(b.NameTemplate, "{n}") {
		return fmt.Errorf("%s.boot.name_template %q: must contain {n}", field, b.NameTemplate)
	}
	if err := schema.ValidName("host", r.ServerName(1)); err != nil {
		return fmt.Errorf("%s.boot.name_template %q: %w", field, b.NameTemplate, err)
	}
	r.namePrefix, r.nameSuffix, _ = strings.Cut(strings.ReplaceAll(b.NameTemplate, "{role}", r.Name), "{n}")
	for k, v := range b.Metadata {
		if k == MetaRole || k == MetaJournal || k == MetaStandby || k == MetaSpec {
			return fmt.Errorf("%s.boot.metadata.%s: reserved for the reaper", field, k)
		}
		if len(k) > 255 || len(v) > 255 {
			return fmt.Errorf("%s.boot.metadata.%s: keys and values are limited to 255 bytes", field, k)
		}
	}
	for j, t := range b.Tags {
		if t == "" || strings.ContainsAny(t, ",/") || len(t) > 60 {
			return fmt.Errorf("%s.boot.tags[%d] %q: want 1-60 characters without , or /", field, j, t)
		}
	}
	return nil
}

// ServerName renders the role's name template for index n.
func (r *Role) ServerName(n int) string {
	s := strings.ReplaceAll(r.Boot.NameTemplate, "{role}", r.Name)
	return strings.ReplaceAll(s, "{n}", fmt.Sprint(n))
}

// Matches reports whether a server belongs to this role: its role metadata
// names the role, or it has no role metadata and its name matches the regex.
func (r *Role) Matches(s *Server) bool {
	if role, ok := s.Metadata[MetaRole]; ok {
		return role == r.Name
	}
	return r.nameRE != nil && r.nameRE.MatchString(s.Name)
}
