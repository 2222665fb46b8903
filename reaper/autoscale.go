package reaper

import (
	"fmt"
	"math"
	"net/url"
	"strings"
	"time"

	"github.com/jiocloud/orchestrate/internal/store/schema"
)

// Metric sources of an autoscaled role.
const (
	// SourceConsul: the role's nodes report their own value into Consul KV
	// (`orchestrate report-metric NAME VALUE`); the reaper averages the
	// fresh reports of the role's serving servers.
	SourceConsul = "consul"
	// SourcePrometheus: a PromQL expression evaluated through Prometheus'
	// HTTP API gives the role's value.
	SourcePrometheus = "prometheus"
)

// Autoscale is a role's autoscaling policy: its desired count follows a
// metric by target tracking, as Kubernetes' HPA does.
type Autoscale struct {
	// Metric is where the role's per-node value comes from.
	Metric MetricSource `yaml:"metric"`
	// Target is the per-node value to hold.
	Target float64 `yaml:"target"`
	// Min and Max bound the desired count.
	Min int `yaml:"min"`
	Max int `yaml:"max"`
	// Tolerance: no change while value/target is within 1 ± Tolerance
	// (default 0.1). Nil: the default.
	Tolerance *float64 `yaml:"tolerance"`
	// ScaleOut and ScaleIn bound each direction's changes.
	ScaleOut ScaleRule `yaml:"scale_out"`
	ScaleIn  ScaleRule `yaml:"scale_in"`
}

// ScaleRule bounds one direction of autoscaling.
type ScaleRule struct {
	// MaxStep is the most servers one decision adds or removes.
	MaxStep int `yaml:"max_step"`
	// Cooldown: after a change, no change in this direction for this long
	// (scale out: since the last scale out; scale in: since the last
	// change either way).
	Cooldown Duration `yaml:"cooldown"`
	// Stabilization (scale in only): the highest recommendation over this
	// window wins, so a dip shorter than the window removes nothing.
	Stabilization Duration `yaml:"stabilization"`
}

// MetricSource says where a role's metric comes from.
type MetricSource struct {
	// Source is consul or prometheus.
	Source string `yaml:"source"`
	// Name is the metric nodes report (consul).
	Name string `yaml:"name"`
	// MaxAge: a report older than this is ignored (consul).
	MaxAge Duration `yaml:"max_age"`
	// Prometheus is the query and how to reach the server (prometheus).
	Prometheus *PrometheusSource `yaml:"prometheus"`
	// PlausibleMax is the most one node's value can be: a node's report
	// above it is taken at it (one node's report is one vote), and a
	// Prometheus value above it puts the metric in doubt. Default
	// defaultPlausibleFactor x target.
	PlausibleMax float64 `yaml:"plausible_max"`
}

// PrometheusSource evaluates PromQL through Prometheus' HTTP API
// (/api/v1/query). The HTTP client's settings are Prometheus' own
// (tls_config, basic_auth, authorization, ...), as its clients take
// them; secrets come from files only.
type PrometheusSource struct {
	// URL is the Prometheus server, e.g. https://prometheus:9090.
	URL string `yaml:"url"`
	// Query gives the role's value: one series or a scalar, e.g.
	// avg(1 - rate(node_cpu_seconds_total{mode="idle",role="compute"}[5m])).
	Query string `yaml:"query"`
	// HostQuery, optional, gives one series per host, labelled with
	// HostLabel (default "host"): scale in then picks the least loaded.
	HostQuery string `yaml:"host_query"`
	HostLabel string `yaml:"host_label"`
	// Timeout bounds one query (default 10s).
	Timeout Duration `yaml:"timeout"`
	// HTTP is Prometheus' HTTP client configuration (basic_auth,
	// authorization, tls_config, oauth2, proxy_url...), inline: the keys
	// this struct does not name. reaper/prometheus decodes and checks it.
	HTTP map[string]any `yaml:",inline"`
}

// Autoscaling defaults, from Kubernetes' HPA where it has one.
const (
	// 10%: HPA's --horizontal-pod-autoscaler-tolerance.
	defaultTolerance = 0.1
	// 5m: HPA's default scale-down stabilization window.
	defaultStabilization = 5 * time.Minute
	// 2 servers per scale out, 1 per scale in: growth is quick, shrinking
	// is careful (each removal drains a host).
	defaultScaleOutStep = 2
	defaultScaleInStep  = 1
	// 3m after a scale out before the next: new servers need boot and
	// Puppet before they take load, and the value falls only then.
	defaultScaleOutCooldown = 3 * time.Minute
	// 5m after any change before a scale in.
	defaultScaleInCooldown = 5 * time.Minute
	// 3m: a node reporting every minute misses two reports before it is
	// left out of the average.
	defaultMetricMaxAge = 3 * time.Minute
	// 4 x target: a node at four times its target is past saturation for
	// a utilization target (0.25 to 0.8 of a resource puts it at 1.0 to
	// 3.2), so an honest report is rarely clamped; and one node's report
	// adds at most 4 x target to the role's total, so one lying node moves
	// the recommendation at most 4 servers above what the others' load
	// needs (alone, it reaches max only where max is within 4 of that).
	// A role whose honest values run higher (a rate, a queue length)
	// sets plausible_max.
	defaultPlausibleFactor = 4
	// 10s per Prometheus query: a cycle must not wait on a slow server.
	defaultPromTimeout = 10 * time.Second
	defaultHostLabel   = "host"
)

func (a *Autoscale) ApplyDefaults() {
	if a.Tolerance == nil {
		t := defaultTolerance
		a.Tolerance = &t
	}
	if a.ScaleOut.MaxStep == 0 {
		a.ScaleOut.MaxStep = defaultScaleOutStep
	}
	if a.ScaleIn.MaxStep == 0 {
		a.ScaleIn.MaxStep = defaultScaleInStep
	}
	if a.ScaleOut.Cooldown == 0 {
		a.ScaleOut.Cooldown = Duration(defaultScaleOutCooldown)
	}
	if a.ScaleIn.Cooldown == 0 {
		a.ScaleIn.Cooldown = Duration(defaultScaleInCooldown)
	}
	if a.ScaleIn.Stabilization == 0 {
		a.ScaleIn.Stabilization = Duration(defaultStabilization)
	}
	if a.Metric.Source == SourceConsul && a.Metric.MaxAge == 0 {
		a.Metric.MaxAge = Duration(defaultMetricMaxAge)
	}
	if p := a.Metric.Prometheus; p != nil {
		if p.Timeout == 0 {
			p.Timeout = Duration(defaultPromTimeout)
		}
		if p.HostLabel == "" {
			p.HostLabel = defaultHostLabel
		}
	}
}

// validate names the first bad field of a role's policy.
func (a *Autoscale) validate(field string, r *Role) error {
	field += ".autoscale"
	switch {
	case !(a.Target > 0) || math.IsInf(a.Target, 0):
		return fmt.Errorf("%s.target: must be a positive number, got %v", field, a.Target)
	case a.Min < 1:
		return fmt.Errorf("%s.min: must be at least 1, got %d", field, a.Min)
	case a.Max < a.Min:
		return fmt.Errorf("%s.max: %d is below min %d", field, a.Max, a.Min)
	case a.Min < r.MinHealthy:
		return fmt.Errorf("%s.min: %d is below the role's min_healthy %d: the autoscaler would ask for a count no scale in may reach", field, a.Min, r.MinHealthy)
	case *a.Tolerance < 0 || *a.Tolerance >= 1:
		return fmt.Errorf("%s.tolerance: must be in [0, 1), got %v", field, *a.Tolerance)
	case a.ScaleOut.MaxStep < 1:
		return fmt.Errorf("%s.scale_out.max_step: must be at least 1, got %d", field, a.ScaleOut.MaxStep)
	case a.ScaleIn.MaxStep < 1:
		return fmt.Errorf("%s.scale_in.max_step: must be at least 1, got %d", field, a.ScaleIn.MaxStep)
	case a.ScaleOut.Cooldown < 0:
		return fmt.Errorf("%s.scale_out.cooldown: must not be negative, got %s", field, a.ScaleOut.Cooldown.D())
	case a.ScaleIn.Cooldown < 0:
		return fmt.Errorf("%s.scale_in.cooldown: must not be negative, got %s", field, a.ScaleIn.Cooldown.D())
	case a.ScaleIn.Stabilization < 0:
		return fmt.Errorf("%s.scale_in.stabilization: must not be negative, got %s", field, a.ScaleIn.Stabilization.D())
	case a.ScaleOut.Stabilization != 0:
		return fmt.Errorf("%s.scale_out.stabilization: a scale out is never held back for a window (only scale_in has one)", field)
	case r.Desired != 0 && (r.Desired < a.Min || r.Desired > a.Max):
		return fmt.Errorf("%s: the role's desired %d is outside min %d .. max %d", field, r.Desired, a.Min, a.Max)
	}
	if a.Metric.PlausibleMax == 0 {
		// Its default follows the target, so it is set once the target
		// is known good (and a policy built in code gets it too).
		a.Metric.PlausibleMax = defaultPlausibleFactor * a.Target
	}
	switch {
	case !(a.Metric.PlausibleMax > a.Target) || math.IsInf(a.Metric.PlausibleMax, 0):
		// NaN fails the first test too.
		return fmt.Errorf("%s.metric.plausible_max: must be a finite number above target %v (default %d x target), got %v", field, a.Target, defaultPlausibleFactor, a.Metric.PlausibleMax)
	}
	return a.Metric.validate(field + ".metric")
}

func (m *MetricSource) validate(field string) error {
	switch m.Source {
	case SourceConsul:
		if err := schema.ValidName("metric", m.Name); err != nil {
			return fmt.Errorf("%s.name: %w", field, err)
		}
		if m.MaxAge <= 0 {
			return fmt.Errorf("%s.max_age: must be a positive duration, got %s", field, m.MaxAge.D())
		}
		if m.Prometheus != nil {
			return fmt.Errorf("%s.prometheus: only for source prometheus", field)
		}
		return nil
	case SourcePrometheus:
		if m.Name != "" || m.MaxAge != 0 {
			return fmt.Errorf("%s: name and max_age are for source consul; a prometheus source takes prometheus.query", field)
		}
		if m.Prometheus == nil {
			return fmt.Errorf("%s.prometheus: required for source prometheus (url, query)", field)
		}
		return m.Prometheus.validate(field + ".prometheus")
	}
	return fmt.Errorf("%s.source: want %s or %s, got %q", field, SourceConsul, SourcePrometheus, m.Source)
}

func (p *PrometheusSource) validate(field string) error {
	u, err := url.Parse(p.URL)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return fmt.Errorf("%s.url: want http(s)://host:port, got %q", field, p.URL)
	}
	if u.User != nil {
		return fmt.Errorf("%s.url: credentials in the URL would be logged; use basic_auth with password_file", field)
	}
	if p.Query == "" {
		return fmt.Errorf("%s.query: required", field)
	}
	if p.Timeout <= 0 {
		return fmt.Errorf("%s.timeout: must be a positive duration, got %s", field, p.Timeout.D())
	}
	// Secrets from files only: a configuration file is read by many and
	// copied into tickets; a password in it is a password leaked.
	for _, sec := range inlineSecrets {
		if v, _ := lookup(p.HTTP, sec.path...).(string); v != "" {
			return fmt.Errorf("%s.%s: %s", field, strings.Join(sec.path, "."), sec.fix)
		}
	}
	return nil
}

// inlineSecrets are the keys of Prometheus' HTTP client configuration
// that would put a secret in the reaper's configuration file, each with
// the file-based key to use instead.
var inlineSecrets = []struct {
	path []string
	fix  string
}{
	{[]string{"bearer_token"}, "give the token in a file (bearer_token_file or authorization.credentials_file)"},
	{[]string{"basic_auth", "password"}, "give the password in a file (basic_auth.password_file)"},
	{[]string{"authorization", "credentials"}, "give them in a file (authorization.credentials_file)"},
	{[]string{"tls_config", "key"}, "give the private key in a file (tls_config.key_file)"},
	{[]string{"oauth2", "client_secret"}, "give it in a file (oauth2.client_secret_file)"},
}

// lookup returns the value at path in nested YAML maps, or nil.
func lookup(m map[string]any, path ...string) any {
	var v any = m
	for _, k := range path {
		mm, ok := v.(map[string]any)
		if !ok {
			return nil
		}
		v = mm[k]
	}
	return v
}

// MetricReading is an autoscaled role's metric as read this cycle from a
// source outside Consul KV (Prometheus). The consul source's reports are
// in Input.Scaling.
type MetricReading struct {
	// Value is the role's per-node value.
	Value float64
	// PerHost holds each host's own value, when the source gives them
	// (a host query): scale in then removes the least loaded.
	PerHost map[string]float64
	// Err says why no usable value was read ("" when Value is good).
	Err string
}

// ScaleChange is a desired count the autoscaler changes: written by the
// executor (with the leader check, and only while no override stands and
// the count is still From), acted on by the next cycle.
type ScaleChange struct {
	Role     string `json:"role"`
	From, To int
	// Index is the modify index of roles/<role>/desired when read (0: the
	// key did not exist).
	Index  uint64 `json:"-"`
	Reason string `json:"reason"`
}

// String describes the change for logs.
func (c ScaleChange) String() string {
	return fmt.Sprintf("scale %s from %d to %d (%s)", c.Role, c.From, c.To, c.Reason)
}
