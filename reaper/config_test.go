package reaper

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

const goodYAML = `
dry_run: false
interval: 10s
roles:
  - name: web
    desired: 3
    min_healthy: 2
    checks: [serfHealth, "service:nginx"]
    max_age: 168h
    max_age_jitter: 24h
    boot:
      flavor: m1.small
      image: debian-12
      networks: [none]
      name_template: "{role}{n}-prod"
      metadata: {team: infra}
      tags: [orchestrate]
`

// A role's hooks: absent, none; present, each default filled in (10m,
// abandon, AWS's default result); what is given, kept.
func TestHookDefaults(t *testing.T) {
	c, err := ParseConfig(strings.NewReader(strings.Replace(goodYAML, "    desired: 3", "    desired: 3\n    on_launch: {}\n    on_terminate: {timeout: 2h, default_result: continue}", 1)))
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Validate(); err != nil {
		t.Fatal(err)
	}
	r := c.Role("web")
	if l, term := r.OnLaunch, r.OnTerminate; l.Timeout.D() != 10*time.Minute || l.DefaultResult != "abandon" || term.Timeout.D() != 2*time.Hour || term.DefaultResult != "continue" {
		t.Fatalf("on_launch %+v, on_terminate %+v", l, term)
	}
	bare, _ := ParseConfig(strings.NewReader(goodYAML))
	if err := bare.Validate(); err != nil || bare.Roles[0].OnLaunch != nil || bare.Roles[0].OnTerminate != nil {
		t.Fatalf("a role without hooks: %+v %+v %v", bare.Roles[0].OnLaunch, bare.Roles[0].OnTerminate, err)
	}
}

func TestParseConfig(t *testing.T) {
	c, err := ParseConfig(strings.NewReader(goodYAML))
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Validate(); err != nil {
		t.Fatal(err)
	}
	r := c.Role("web")
	switch {
	case c.IsDryRun():
		t.Error("dry_run: false was not read")
	case c.Interval.D() != 10*time.Second:
		t.Errorf("interval = %v", c.Interval.D())
	case c.MaxActionsPerHour != 10 || c.PauseFleetFraction != 0.45 || c.PauseRoleFraction != 0.55 || c.MaxInFlight != 1:
		t.Errorf("global defaults not applied: %+v", c)
	case r == nil || r.CriticalGrace.D() != 5*time.Minute || r.ReplaceMode != ModeSurge:
		t.Errorf("role defaults not applied: %+v", r)
	case r.ServerName(2) != "web2-prod":
		t.Errorf("name template: %q", r.ServerName(2))
	case c.LeaderKey() != c.Prefix+"/reaper/leader":
		t.Errorf("leader key %q", c.LeaderKey())
	}
	d, err := ParseConfig(strings.NewReader("roles: []"))
	if err != nil {
		t.Fatal(err)
	}
	if !d.IsDryRun() {
		t.Error("dry run is not the default")
	}
}

func TestConfigErrorsNameTheField(t *testing.T) {
	cases := []configCase{
		{name: "unknown top-level field", old: "interval: 10s", yaml: "intervall: 10s", want: "intervall"},
		{name: "unknown role field", old: "    desired: 3", yaml: "    desird: 3", want: "desird"},
		{name: "bad duration", old: "interval: 10s", yaml: "interval: often", want: "often"},
		{name: "negative interval", old: "interval: 10s", yaml: "interval: -1s", want: "interval"},
		{name: "session ttl below consul's minimum", old: "interval: 10s", yaml: "session_ttl: 500ms", want: "session_ttl"},
		{name: "fraction out of range", old: "interval: 10s", yaml: "pause_fleet_fraction: 1.5", want: "pause_fleet_fraction"},
		{name: "max in flight zero", old: "interval: 10s", yaml: "max_in_flight: 0", want: "max_in_flight"},
		{name: "negative desired", old: "    desired: 3", yaml: "    desired: -1", want: "roles[0].desired"},
		{name: "bad role name", old: "  - name: web", yaml: "  - name: 'we b'", want: `line 5: roles[0].name: role "we b"`},
		{name: "missing flavor", old: "      flavor: m1.small", yaml: "", want: "roles[0].boot.flavor"},
		{name: "missing image", old: "      image: debian-12", yaml: "", want: "roles[0].boot.image"},
		{name: "template without {n}", old: `      name_template: "{role}{n}-prod"`, yaml: `      name_template: "{role}-prod"`, want: "name_template"},
		{name: "bad regex", old: "    desired: 3", yaml: "    desired: 3\n    name_regex: '('", want: "roles[0].name_regex"},
		{name: "jitter not below max age", old: "    max_age_jitter: 24h", yaml: "    max_age_jitter: 200h", want: "max_age_jitter"},
		{name: "bad replace mode", old: "    desired: 3", yaml: "    desired: 3\n    replace_mode: yolo", want: "replace_mode"},
		{name: "none among networks", old: "      networks: [none]", yaml: "      networks: [none, abc]", want: "boot.networks[0]"},
		{name: "reserved metadata", old: "      metadata: {team: infra}", yaml: "      metadata: {role: x}", want: "boot.metadata.role"},
		{name: "reserved metadata: the boot spec digest", old: "      metadata: {team: infra}", yaml: "      metadata: {reaper-spec: x}", want: "boot.metadata.reaper-spec: reserved for the reaper"},
		{name: "refresh", old: "    max_age: 168h", yaml: "    max_age: 168h\n    refresh: sometimes", want: "roles[0].refresh: want off or auto, got \"sometimes\""},
		{name: "duplicate role", old: "roles:", yaml: "roles:\n  - {name: web, boot: {flavor: f, image: i}}", want: "listed twice"},
		{name: "no roles", old: "roles:", yaml: "roles: []\nunused:", want: "unused"},
		{name: "departed retention too short", old: "interval: 10s", yaml: "interval: 10s\ndeparted_retention: 10m", want: "departed_retention: must be between 1h and 366 days (8784h), got 10m0s"},
		{name: "departed retention too long", old: "interval: 10s", yaml: "interval: 10s\ndeparted_retention: 9000h", want: "departed_retention: must be between 1h and 366 days"},
		{name: "departed retention not a duration", old: "interval: 10s", yaml: "interval: 10s\ndeparted_retention: forever", want: `line 4: departed_retention: "forever" is not a duration (use a number and a unit`},
		{name: "min cycle gap negative", old: "interval: 10s", yaml: "interval: 10s\nmin_cycle_gap: -1s", want: "min_cycle_gap: must be a positive duration, got -1s"},
		{name: "min cycle gap above the interval", old: "interval: 10s", yaml: "interval: 10s\nmin_cycle_gap: 11s", want: "min_cycle_gap: 11s is longer than interval 10s"},
		{name: "min cycle gap not a duration", old: "interval: 10s", yaml: "interval: 10s\nmin_cycle_gap: often", want: `"often" is not a duration`},
		{name: "wake on change not a bool", old: "interval: 10s", yaml: "interval: 10s\nwake_on_change: maybe", want: "maybe"},
		{name: "heartbeat not positive", old: "interval: 10s", yaml: "interval: 10s\nheartbeat_interval: 0s", want: "heartbeat_interval: must be a positive duration"},
		{name: "heartbeat storm", old: "interval: 10s", yaml: "interval: 10s\nheartbeat_interval: 5s", want: "heartbeat_interval: 5s is under a minute"},
		{name: "silent after one heartbeat", old: "    desired: 3", yaml: "    desired: 3\n    silent_after: 15m", want: "roles[0].silent_after: 15m0s is shorter than twice heartbeat_interval 10m0s"},
		{name: "negative silent_after", old: "    desired: 3", yaml: "    desired: 3\n    silent_after: -1m", want: "roles[0].silent_after: must be a positive duration"},
		{name: "orphan grace below absent grace", old: "    desired: 3", yaml: "    desired: 3\n    absent_grace: 2h\n    orphan_grace: 1h", want: "roles[0].orphan_grace: 1h0m0s is shorter than absent_grace 2h0m0s"},
		{name: "metrics on every address without a web config", old: "interval: 10s", yaml: "interval: 10s\nlisten: 0.0.0.0:9469", want: `listen "0.0.0.0:9469" is not a loopback address`},
		{name: "metrics on a host name without a web config", old: "interval: 10s", yaml: "interval: 10s\nlisten: boot1.example.com:9469", want: "not a loopback address"},
		{name: "metrics on an empty host without a web config", old: "interval: 10s", yaml: "interval: 10s\nlisten: ':9469'", want: "not a loopback address"},
		{name: "negative warm pool", old: "    desired: 3", yaml: "    desired: 3\n    warm_pool: {size: -1}", want: "roles[0].warm_pool.size: must be between 0 and 20, got -1"},
		{name: "warm pool too large", old: "    desired: 3", yaml: "    desired: 3\n    warm_pool: {size: 21}", want: "roles[0].warm_pool.size"},
		{name: "warm pool unknown state", old: "    desired: 3", yaml: "    desired: 3\n    warm_pool: {size: 2, state: paused}", want: `roles[0].warm_pool.state: want running or stopped, got "paused"`},
		{name: "warm pool unknown field", old: "    desired: 3", yaml: "    desired: 3\n    warm_pool: {size: 2, min: 1}", want: "min"},
		{name: "warm pool negative claim timeout", old: "    desired: 3", yaml: "    desired: 3\n    warm_pool: {size: 2, claim_timeout: -1m}", want: "roles[0].warm_pool.claim_timeout"},
		{name: "standby metadata is the reaper's", old: "      metadata: {team: infra}", yaml: "      metadata: {reaper-standby: web}", want: "boot.metadata.reaper-standby"},
		{name: "autoscale without a target", old: "    desired: 3", yaml: "    desired: 3\n    autoscale: {min: 2, max: 4, metric: {source: consul, name: load}}", want: "roles[0].autoscale.target"},
		{name: "autoscale max below min", old: "    desired: 3", yaml: "    desired: 3\n    autoscale: {target: 0.5, min: 3, max: 2, metric: {source: consul, name: load}}", want: "roles[0].autoscale.max"},
		{name: "autoscale min below min_healthy", old: "    desired: 3", yaml: "    desired: 3\n    autoscale: {target: 0.5, min: 1, max: 4, metric: {source: consul, name: load}}", want: "roles[0].autoscale.min: 1 is below the role's min_healthy 2"},
		{name: "autoscale desired outside min..max", old: "    desired: 3", yaml: "    desired: 3\n    autoscale: {target: 0.5, min: 4, max: 8, metric: {source: consul, name: load}}", want: "desired 3 is outside min 4 .. max 8"},
		{name: "autoscale unknown source", old: "    desired: 3", yaml: "    desired: 3\n    autoscale: {target: 0.5, min: 2, max: 4, metric: {source: graphite}}", want: "roles[0].autoscale.metric.source"},
		{name: "autoscale consul metric without a name", old: "    desired: 3", yaml: "    desired: 3\n    autoscale: {target: 0.5, min: 2, max: 4, metric: {source: consul}}", want: "roles[0].autoscale.metric.name"},
		{name: "autoscale tolerance of 1", old: "    desired: 3", yaml: "    desired: 3\n    autoscale: {target: 0.5, min: 2, max: 4, tolerance: 1, metric: {source: consul, name: load}}", want: "autoscale.tolerance"},
		{name: "autoscale stabilization on scale out", old: "    desired: 3", yaml: "    desired: 3\n    autoscale: {target: 0.5, min: 2, max: 4, scale_out: {stabilization: 1m}, metric: {source: consul, name: load}}", want: "scale_out.stabilization"},
		{name: "autoscale plausible_max below the target", old: "    desired: 3", yaml: "    desired: 3\n    autoscale: {target: 0.5, min: 2, max: 4, metric: {source: consul, name: load, plausible_max: 0.4}}", want: "metric.plausible_max: must be a finite number above target 0.5 (default 4 x target), got 0.4"},
		{name: "autoscale plausible_max NaN", old: "    desired: 3", yaml: "    desired: 3\n    autoscale: {target: 0.5, min: 2, max: 4, metric: {source: consul, name: load, plausible_max: .nan}}", want: "metric.plausible_max"},
		{name: "autoscale plausible_max infinite", old: "    desired: 3", yaml: "    desired: 3\n    autoscale: {target: 0.5, min: 2, max: 4, metric: {source: consul, name: load, plausible_max: .inf}}", want: "metric.plausible_max"},
		{name: "autoscale target whose default plausible_max overflows", old: "    desired: 3", yaml: "    desired: 3\n    autoscale: {target: 1e308, min: 2, max: 4, metric: {source: consul, name: load}}", want: "metric.plausible_max: must be a finite number above target 1e+308 (default 4 x target), got +Inf"},
		{name: "prometheus without a query", old: "    desired: 3", yaml: "    desired: 3\n    autoscale: {target: 0.5, min: 2, max: 4, metric: {source: prometheus, prometheus: {url: 'http://127.0.0.1:9090'}}}", want: "metric.prometheus.query"},
		{name: "prometheus url with credentials", old: "    desired: 3", yaml: "    desired: 3\n    autoscale: {target: 0.5, min: 2, max: 4, metric: {source: prometheus, prometheus: {url: 'http://u:secret@127.0.0.1:9090', query: up}}}", want: "credentials in the URL"},
		{name: "prometheus password inline", old: "    desired: 3", yaml: "    desired: 3\n    autoscale: {target: 0.5, min: 2, max: 4, metric: {source: prometheus, prometheus: {url: 'http://127.0.0.1:9090', query: up, basic_auth: {username: u, password: secret}}}}", want: "basic_auth.password: give the password in a file"},
		{name: "user data only by file", old: "      tags: [orchestrate]", yaml: "      tags: [orchestrate]\n      userdata: '#!/bin/sh'", want: `line 18: unknown field "userdata" in roles[0].boot`},
		{name: "negative drain timeout", old: "    desired: 3", yaml: "    desired: 3\n    drain_timeout: -1s", want: "roles[0].drain_timeout"},
		{name: "drain failure neither abort nor delete", old: "    desired: 3", yaml: "    desired: 3\n    on_drain_failure: retry", want: `roles[0].on_drain_failure: want abort or delete, got "retry"`},
		{name: "drain timeout a YAML boolean", old: "    desired: 3", yaml: "    desired: 3\n    on_drain_timeout: yes", want: `roles[0].on_drain_timeout: want abort or delete, got "yes"`},
		{name: "drain timeout in capitals", old: "    desired: 3", yaml: "    desired: 3\n    on_drain_timeout: DELETE", want: "roles[0].on_drain_timeout"},
		{name: "negative cool-off", old: "    desired: 3", yaml: "    desired: 3\n    drain_cooloff: -1h", want: "roles[0].drain_cooloff: must be a positive duration"},
		{name: "a cool-off of a century", old: "    desired: 3", yaml: "    desired: 3\n    drain_cooloff: 876000h", want: "roles[0].drain_cooloff: must be a positive duration of at most 720h0m0s"},
		{name: "a cool-off that is no duration", old: "    desired: 3", yaml: "    desired: 3\n    drain_cooloff: forever", want: "forever"},
		{name: "zones and the boot spec's zone", old: "      tags: [orchestrate]", yaml: "      tags: [orchestrate]\n      availability_zone: az1\n    availability_zones: [az1, az2]", want: `roles[0].availability_zones: set with boot.availability_zone "az1"`},
		{name: "a zone listed twice", old: "    desired: 3", yaml: "    desired: 3\n    availability_zones: [az1, az2, az1]", want: `roles[0].availability_zones[2]: zone "az1" is listed twice`},
		{name: "an empty zone", old: "    desired: 3", yaml: "    desired: 3\n    availability_zones: [az1, '']", want: "roles[0].availability_zones[1]"},
		{name: "a zone forcing a host", old: "    desired: 3", yaml: "    desired: 3\n    availability_zones: ['az1:compute7']", want: "roles[0].availability_zones[0]: \"az1:compute7\": want a zone name, not zone:host"},
		{name: "zones not a list", old: "    desired: 3", yaml: "    desired: 3\n    availability_zones: az1", want: "availability_zones: want a list of zone names"},
		{name: "anti-affinity neither soft, hard nor none", old: "    desired: 3", yaml: "    desired: 3\n    anti_affinity: strict", want: `roles[0].anti_affinity: want soft, hard or none, got "strict"`},
		{name: "anti-affinity a YAML boolean", old: "    desired: 3", yaml: "    desired: 3\n    anti_affinity: yes", want: "roles[0].anti_affinity"},
	}
	checkConfigErrors(t, cases)
}

// configCase is a change of one line of goodYAML (or an addition) and
// the error it must cause.
type configCase struct {
	name string
	yaml string // replaces a line of goodYAML, or is appended
	old  string
	want string
}

// checkConfigErrors runs cases: each must be refused, naming want.
func checkConfigErrors(t *testing.T, cases []configCase) {
	t.Helper()
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			text := strings.Replace(goodYAML, tc.old, tc.yaml, 1)
			if text == goodYAML {
				t.Fatalf("case does not change the config (%q not found)", tc.old)
			}
			c, err := ParseConfig(strings.NewReader(text))
			if err == nil {
				err = c.Validate()
			}
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("error = %v, want one naming %q", err, tc.want)
			}
		})
	}
}

// A role's hooks: a bad value names the field.
func TestHookConfigErrorsNameTheField(t *testing.T) {
	checkConfigErrors(t, []configCase{
		{name: "hook result neither continue nor abandon", old: "    desired: 3", yaml: "    desired: 3\n    on_launch: {default_result: proceed}", want: `roles[0].on_launch.default_result: want continue or abandon, got "proceed"`},
		{name: "hook result a YAML boolean", old: "    desired: 3", yaml: "    desired: 3\n    on_terminate: {default_result: yes}", want: `roles[0].on_terminate.default_result: want continue or abandon, got "yes"`},
		{name: "hook result in capitals", old: "    desired: 3", yaml: "    desired: 3\n    on_terminate: {default_result: CONTINUE}", want: "roles[0].on_terminate.default_result"},
		{name: "negative hook timeout", old: "    desired: 3", yaml: "    desired: 3\n    on_launch: {timeout: -1m}", want: "roles[0].on_launch.timeout: must be a positive duration of at most 48h0m0s"},
		{name: "a hook timeout of a week", old: "    desired: 3", yaml: "    desired: 3\n    on_terminate: {timeout: 168h}", want: "roles[0].on_terminate.timeout: must be a positive duration of at most 48h0m0s"},
		{name: "a hook timeout that is no duration", old: "    desired: 3", yaml: "    desired: 3\n    on_launch: {timeout: never}", want: "never"},
		{name: "unknown hook field", old: "    desired: 3", yaml: "    desired: 3\n    on_launch: {default: continue}", want: "default"},
		{name: "a hook that is a word", old: "    desired: 3", yaml: "    desired: 3\n    on_launch: continue", want: "on_launch"},
	})
}

// TestPlacementConfig: availability_zones and anti_affinity as read, and
// what a role without them does: no zones (or boot.availability_zone
// alone), a soft anti-affinity group named for the role.
func TestPlacementConfig(t *testing.T) {
	text := strings.Replace(goodYAML, "    desired: 3", "    desired: 3\n    availability_zones: [az1, az2, az3]\n    anti_affinity: hard", 1)
	c, err := ParseConfig(strings.NewReader(text))
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Validate(); err != nil {
		t.Fatal(err)
	}
	r := c.Role("web")
	if got := strings.Join(r.Zones(), ","); got != "az1,az2,az3" || !r.HasZone("az2") || r.HasZone("nova") {
		t.Errorf("zones %q", got)
	}
	if r.GroupPolicy() != PolicyAntiAffinity || r.GroupName() != "reaper-web" {
		t.Errorf("hard: policy %q, group %q", r.GroupPolicy(), r.GroupName())
	}
	d, err := ParseConfig(strings.NewReader(goodYAML))
	if err != nil {
		t.Fatal(err)
	}
	if err := d.Validate(); err != nil {
		t.Fatal(err)
	}
	r = d.Role("web")
	if r.Zones() != nil || r.AntiAffinity != AntiAffinitySoft || r.GroupPolicy() != PolicySoftAntiAffinity {
		t.Errorf("defaults: zones %v, anti_affinity %q, policy %q", r.Zones(), r.AntiAffinity, r.GroupPolicy())
	}
	r.Boot.AvailabilityZone = "nova"
	r.AntiAffinity = AntiAffinityNone
	if got := r.Zones(); len(got) != 1 || got[0] != "nova" || r.GroupPolicy() != "" {
		t.Errorf("boot.availability_zone alone: zones %v; none: policy %q", got, r.GroupPolicy())
	}
}

// Every YAML block of README.md is a valid configuration, and the first,
// the reference, and the second, the autoscaling example, document the
// real defaults.
func TestREADMEConfigIsValid(t *testing.T) {
	data, err := os.ReadFile("README.md")
	if err != nil {
		t.Fatal(err)
	}
	ud := filepath.Join(t.TempDir(), "user-data")
	os.WriteFile(ud, []byte("#cloud-config\n"), 0o600)
	var blocks []string
	for rest := string(data); ; {
		var ok bool
		if _, rest, ok = strings.Cut(rest, "```yaml\n"); !ok {
			break
		}
		block, after, ok := strings.Cut(rest, "```")
		if !ok {
			t.Fatal("README.md has an unterminated yaml block")
		}
		blocks, rest = append(blocks, strings.ReplaceAll(block, "/etc/orchestrate/web-user-data", ud)), after
	}
	if len(blocks) < 2 {
		t.Fatalf("README.md has %d yaml blocks, want the reference and the autoscaling example", len(blocks))
	}
	for i, block := range blocks {
		c, err := ParseConfig(strings.NewReader(block))
		if err != nil {
			t.Fatalf("block %d: %v", i+1, err)
		}
		if err := c.Validate(); err != nil {
			t.Fatalf("block %d: %v", i+1, err)
		}
		if i == 1 {
			// The autoscaling example writes each default out: they are
			// the real ones.
			a := c.Roles[0].Autoscale
			if a.Metric.PlausibleMax != defaultPlausibleFactor*a.Target || a.Metric.MaxAge.D() != defaultMetricMaxAge || *a.Tolerance != defaultTolerance ||
				a.ScaleOut.MaxStep != defaultScaleOutStep || a.ScaleOut.Cooldown.D() != defaultScaleOutCooldown ||
				a.ScaleIn.MaxStep != defaultScaleInStep || a.ScaleIn.Cooldown.D() != defaultScaleInCooldown || a.ScaleIn.Stabilization.D() != defaultStabilization {
				t.Fatalf("README.md's autoscaling example documents defaults that are not the real ones: %+v", a)
			}
		}
		// The lifecycle hooks' example writes each default out.
		for _, r := range c.Roles {
			for _, h := range []*Hook{r.OnLaunch, r.OnTerminate} {
				if h != nil && (h.Timeout.D() != defaultHookTimeout || h.DefaultResult != "abandon") {
					t.Fatalf("block %d documents a hook %+v; the defaults are %s, abandon", i+1, h, defaultHookTimeout)
				}
			}
		}
		if i > 0 {
			continue
		}
		d := DefaultConfig()
		if !c.IsDryRun() || c.Interval != d.Interval || c.MaxActionsPerHour != d.MaxActionsPerHour ||
			c.PauseFleetFraction != d.PauseFleetFraction || c.SessionTTL != d.SessionTTL || c.Listen != d.Listen {
			t.Fatal("README.md's documented defaults differ from DefaultConfig")
		}
		// A role's drain ending, as documented, is what a role that says
		// nothing gets.
		bare, err := ParseConfig(strings.NewReader("roles: [{name: web, boot: {flavor: f, image: i}}]"))
		if err != nil || bare.Validate() != nil {
			t.Fatalf("a bare role: %v", err)
		}
		got, want := c.Roles[0], bare.Roles[0]
		if got.AntiAffinity != want.AntiAffinity {
			t.Fatalf("README.md documents anti_affinity %s; the default is %s", got.AntiAffinity, want.AntiAffinity)
		}
		if got.OnDrainFailure != want.OnDrainFailure || got.OnDrainTimeout != want.OnDrainTimeout || got.DrainCooloff != want.DrainCooloff {
			t.Fatalf("README.md documents on_drain_failure %s, on_drain_timeout %s, drain_cooloff %s; the defaults are %s, %s, %s",
				got.OnDrainFailure, got.OnDrainTimeout, got.DrainCooloff.D(), want.OnDrainFailure, want.OnDrainTimeout, want.DrainCooloff.D())
		}
	}
}

// TestCycleGapDefault: min_cycle_gap defaults to 5s, or to the interval
// when that is shorter (a test's or a demo's), and waking on change is on
// unless the file says false.
func TestCycleGapDefault(t *testing.T) {
	cases := []struct {
		name     string
		extra    string
		wantGap  time.Duration
		wantWake bool
	}{
		{name: "defaults", extra: "interval: 30s", wantGap: 5 * time.Second, wantWake: true},
		{name: "an interval under the default gap", extra: "interval: 2s", wantGap: 2 * time.Second, wantWake: true},
		{name: "set", extra: "interval: 30s\nmin_cycle_gap: 10s\nwake_on_change: false", wantGap: 10 * time.Second},
		{name: "equal to the interval", extra: "interval: 30s\nmin_cycle_gap: 30s", wantGap: 30 * time.Second, wantWake: true},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			text := strings.Replace(goodYAML, "interval: 10s", tc.extra, 1)
			c, err := ParseConfig(strings.NewReader(text))
			if err != nil {
				t.Fatal(err)
			}
			if err := c.Validate(); err != nil {
				t.Fatal(err)
			}
			if c.CycleGap() != tc.wantGap || c.WakesOnChange() != tc.wantWake {
				t.Fatalf("gap %s wake %v, want %s %v", c.CycleGap(), c.WakesOnChange(), tc.wantGap, tc.wantWake)
			}
		})
	}
}
