package daemon_test

import (
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/consul/api"
	"github.com/jiocloud/orchestrate/internal/testutil"
	"gopkg.in/yaml.v3"
)

// The alerting rules and the dashboard the package ships (packaging/,
// tested there with promtool).
const (
	shippedAlertRules = "../../packaging/prometheus/orchestrate-alerts.yml"
	shippedDashboard  = "../../packaging/grafana/orchestrate-reaper.json"
)

// promqlKeywords are PromQL's words that are no metric's name: the binary
// operators and modifiers (a function or an aggregation is known by the
// parenthesis after it).
var promqlKeywords = []string{"and", "or", "unless", "bool", "offset", "by", "without", "on", "ignoring", "group_left", "group_right", "inf", "nan"}

var (
	promqlString     = regexp.MustCompile("\"(?:[^\"\\\\]|\\\\.)*\"|'(?:[^'\\\\]|\\\\.)*'|`[^`]*`")
	promqlBraces     = regexp.MustCompile(`\{[^{}]*\}|\[[^\[\]]*\]`)
	promqlLabelLists = regexp.MustCompile(`\b(by|without|on|ignoring|group_left|group_right)\s*\([^()]*\)`)
	promqlIdent      = regexp.MustCompile(`[A-Za-z_:][A-Za-z0-9_:]*(\s*\()?`)
)

// metricNames lists the metric names a PromQL expression selects: every
// identifier left once strings, label matchers, ranges and label lists are
// taken out that is neither a keyword nor called (a function, an
// aggregation).
func metricNames(expr string) []string {
	e := promqlString.ReplaceAllString(expr, `""`)
	e = promqlBraces.ReplaceAllString(e, " ")
	e = promqlLabelLists.ReplaceAllString(e, " ")
	var out []string
	for _, loc := range promqlIdent.FindAllStringSubmatchIndex(e, -1) {
		word := e[loc[0]:loc[1]]
		if loc[2] >= 0 || loc[0] > 0 && strings.ContainsAny(e[loc[0]-1:loc[0]], "0123456789.") {
			continue // called, or the end of a number (1e3)
		}
		if !slices.Contains(promqlKeywords, strings.ToLower(word)) {
			out = append(out, word)
		}
	}
	return out
}

func TestMetricNames(t *testing.T) {
	for _, tc := range []struct{ name, expr, want string }{
		{"a selector", `reaper_paused == 1`, "reaper_paused"},
		{"matchers and a range", `increase(reaper_actions_total{result="failed", op=~"a|b"}[30m]) > 2`, "reaper_actions_total"},
		{"aggregations and label lists", `sum by (job, instance) (rate(reaper_cycles_total[5m])) / on (job) group_left (role) reaper_leader`, "reaper_cycles_total reaper_leader"},
		{"keywords and functions", `(sum(reaper_leader) or vector(0)) < 1 and time() - reaper_last_cycle_timestamp_seconds > 6e2 unless up`, "reaper_leader reaper_last_cycle_timestamp_seconds up"},
		{"a string with a name in it", `label_replace(reaper_nodes, "x", "reaper_fake", "", "")`, "reaper_nodes"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := strings.Join(metricNames(tc.expr), " "); got != tc.want {
				t.Errorf("metricNames(%q) = %q, want %q", tc.expr, got, tc.want)
			}
		})
	}
}

// shippedQueries reads every PromQL expression of the shipped rules and
// dashboard, each with where it comes from.
func shippedQueries(t *testing.T) map[string]string {
	t.Helper()
	out := map[string]string{}
	b, err := os.ReadFile(shippedAlertRules)
	if err != nil {
		t.Fatal(err)
	}
	var rules struct {
		Groups []struct {
			Rules []struct{ Alert, Expr string } `yaml:"rules"`
		} `yaml:"groups"`
	}
	if err := yaml.Unmarshal(b, &rules); err != nil {
		t.Fatalf("%s: %v", shippedAlertRules, err)
	}
	for _, g := range rules.Groups {
		for _, r := range g.Rules {
			out["alert "+r.Alert] = r.Expr
		}
	}
	b, err = os.ReadFile(shippedDashboard)
	if err != nil {
		t.Fatal(err)
	}
	var dash struct {
		Panels []struct {
			Title   string `json:"title"`
			Targets []struct {
				RefID string `json:"refId"`
				Expr  string `json:"expr"`
			} `json:"targets"`
		} `json:"panels"`
	}
	if err := json.Unmarshal(b, &dash); err != nil {
		t.Fatalf("%s: %v", shippedDashboard, err)
	}
	for _, p := range dash.Panels {
		for _, tg := range p.Targets {
			out[fmt.Sprintf("panel %q %s", p.Title, tg.RefID)] = tg.Expr
		}
	}
	if len(out) < 20 {
		t.Fatalf("only %d queries in the rules and the dashboard", len(out))
	}
	return out
}

// exposedNames lists the series names an exposition declares (its TYPE
// lines, a summary's _sum and _count) or carries samples of.
func exposedNames(body string) map[string]bool {
	names := map[string]bool{}
	for _, line := range strings.Split(body, "\n") {
		if f := strings.Fields(line); len(f) == 4 && f[0] == "#" && f[1] == "TYPE" {
			names[f[2]] = true
			if f[3] == "summary" || f[3] == "histogram" {
				names[f[2]+"_sum"], names[f[2]+"_count"] = true, true
			}
			if f[3] == "histogram" {
				names[f[2]+"_bucket"] = true
			}
		} else if line != "" && !strings.HasPrefix(line, "#") {
			names[strings.FieldsFunc(line, func(r rune) bool { return r == '{' || r == ' ' })[0]] = true
		}
	}
	return names
}

// servicePort waits for the one reaper registered as service in c's
// catalog (as Prometheus's Consul discovery finds it) and returns its port.
func servicePort(t *testing.T, c *api.Client, service string, limit time.Duration) int {
	t.Helper()
	var port int
	testutil.Eventually(t, limit, "the reaper service", func() bool {
		svcs, _, err := c.Catalog().Service(service, "", nil)
		if err == nil && len(svcs) == 1 {
			port = svcs[0].ServicePort
		}
		return port != 0
	})
	return port
}

// scrapeService scrapes the /metrics port of the one reaper registered as
// service in c's catalog until done accepts the body, which it returns.
func scrapeService(t *testing.T, c *api.Client, service string, limit time.Duration, what string, done func(body string) bool) string {
	t.Helper()
	port := servicePort(t, c, service, limit)
	var body string
	testutil.Eventually(t, limit, what, func() bool {
		resp, err := http.Get(fmt.Sprintf("http://127.0.0.1:%d/metrics", port))
		if err != nil {
			return false
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		body = string(b)
		return resp.StatusCode == http.StatusOK && done(body)
	}, func() string { return body })
	return body
}

// Every series the shipped alerting rules and dashboard select is one a
// real reaper serves: a reaper leading over a real agent, scraped on its
// /metrics port as Prometheus scrapes it. Only the reaper's own series
// (reaper_*) are used, so the rules need no other exporter.
func TestAlertMetricsExist(t *testing.T) {
	f := newFixture(t)
	f.cfg.Listen = "127.0.0.1:0"
	f.seed(3)
	f.start(nil)
	body := scrapeService(t, f.c, f.cfg.ServiceName, 20*time.Second, "metrics of a leader's cycle", func(body string) bool {
		return strings.Contains(body, "reaper_leader 1\n") && !strings.Contains(body, "reaper_cycles_total 0\n")
	})
	served := exposedNames(body)
	queries := shippedQueries(t)
	for _, where := range slices.Sorted(maps.Keys(queries)) {
		names := metricNames(queries[where])
		if len(names) == 0 {
			t.Errorf("%s selects no series: %s", where, queries[where])
		}
		for _, n := range names {
			if !strings.HasPrefix(n, "reaper_") || !served[n] {
				t.Errorf("%s uses %s, which the reaper does not serve: %s", where, n, queries[where])
			}
		}
	}
}

// The shipped rules on a real Prometheus (Debian's) scraping a real
// reaper over a real agent: the file loads, every rule evaluates without
// error on the reaper's series, and of a healthy but never armed fleet's
// alerts only ReaperDisarmed is active, pending for its hour.
func TestShippedRulesOnARealPrometheus(t *testing.T) {
	f := newFixture(t)
	f.cfg.Listen = "127.0.0.1:0"
	f.seed(3)
	f.start(nil)
	port := servicePort(t, f.c, f.cfg.ServiceName, 10*time.Second)
	rulesFile, err := filepath.Abs(shippedAlertRules)
	if err != nil {
		t.Fatal(err)
	}
	prom, _, _ := startPrometheusWith(t, fmt.Sprintf("rule_files: [%q]\nscrape_configs:\n  - job_name: reaper\n    static_configs:\n      - targets: [\"127.0.0.1:%d\"]\n", rulesFile, port))
	var last string
	getJSON := func(path string, v any) bool {
		body, err := prom.get(path)
		last = string(body)
		if err != nil {
			last = err.Error()
			return false
		}
		if err := json.Unmarshal(body, v); err != nil {
			t.Fatalf("%s: %v", path, err)
		}
		return true
	}
	var rules struct {
		Data struct {
			Groups []struct {
				Rules []struct{ Name, Health, LastError string } `json:"rules"`
			} `json:"groups"`
		} `json:"data"`
	}
	testutil.Eventually(t, 30*time.Second, "every shipped rule evaluated", func() bool {
		if !getJSON("/api/v1/rules", &rules) || len(rules.Data.Groups) != 1 || len(rules.Data.Groups[0].Rules) < 20 {
			return false
		}
		ok := true
		for _, r := range rules.Data.Groups[0].Rules {
			if r.Health == "err" {
				t.Fatalf("rule %s fails on a real reaper's series: %s", r.Name, r.LastError)
			}
			ok = ok && r.Health == "ok"
		}
		return ok
	}, func() string { return last })
	var active []string
	testutil.Eventually(t, 30*time.Second, "only ReaperDisarmed active, pending", func() bool {
		var alerts struct {
			Data struct {
				Alerts []struct {
					Labels map[string]string `json:"labels"`
					State  string            `json:"state"`
				} `json:"alerts"`
			} `json:"data"`
		}
		if !getJSON("/api/v1/alerts", &alerts) {
			return false
		}
		active = active[:0]
		for _, a := range alerts.Data.Alerts {
			active = append(active, a.Labels["alertname"]+" "+a.State+" "+a.Labels["instance"])
		}
		return slices.Equal(active, []string{fmt.Sprintf("ReaperDisarmed pending 127.0.0.1:%d", port)})
	}, func() string { return fmt.Sprintf("active: %q", active) })
}
