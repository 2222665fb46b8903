package packaging_test

import (
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/jiocloud/orchestrate/internal/testutil"
	"gopkg.in/yaml.v3"
)

// The alerting rules and the Grafana dashboard the package ships
// (packaging/prometheus, packaging/grafana), checked with Debian's
// promtool. reaper/daemon's TestAlertMetricsExist checks that every
// series they name is one a real reaper serves.
const (
	alertRulesFile = "prometheus/orchestrate-alerts.yml"
	alertTestsFile = "testdata/alerts-test.yml"
	dashboardFile  = "grafana/orchestrate-reaper.json"
	alertsDoc      = "../docs/alerts.md"
)

// alertRule is an alerting rule as the rules file holds it.
type alertRule struct {
	Alert       string            `yaml:"alert"`
	Expr        string            `yaml:"expr"`
	For         string            `yaml:"for"`
	Labels      map[string]string `yaml:"labels"`
	Annotations map[string]string `yaml:"annotations"`
}

// readAlertRules reads the shipped rules file's alerting rules.
func readAlertRules(t *testing.T) []alertRule {
	t.Helper()
	b, err := os.ReadFile(alertRulesFile)
	if err != nil {
		t.Fatal(err)
	}
	var f struct {
		Groups []struct {
			Name  string      `yaml:"name"`
			Rules []alertRule `yaml:"rules"`
		} `yaml:"groups"`
	}
	if err := yaml.Unmarshal(b, &f); err != nil {
		t.Fatalf("%s: %v", alertRulesFile, err)
	}
	var rules []alertRule
	for _, g := range f.Groups {
		rules = append(rules, g.Rules...)
	}
	if len(rules) == 0 {
		t.Fatalf("%s holds no rule", alertRulesFile)
	}
	return rules
}

// promtool runs Debian's promtool and returns its output; a non-zero exit
// fails the test with it.
func promtool(t *testing.T, args ...string) string {
	t.Helper()
	bin := testutil.RequireTool(t, "promtool", "prometheus")
	out, err := exec.Command(bin, args...).CombinedOutput()
	if err != nil {
		t.Fatalf("promtool %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	return string(out)
}

// promtool check rules accepts the shipped file, every rule of it.
func TestAlertRulesCheck(t *testing.T) {
	rules := readAlertRules(t)
	out := promtool(t, "check", "rules", alertRulesFile)
	if want := fmt.Sprintf("SUCCESS: %d rules found", len(rules)); !strings.Contains(out, want) {
		t.Fatalf("promtool check rules: want %q:\n%s", want, out)
	}
}

// promtool test rules passes the unit tests of testdata/alerts-test.yml,
// which fire every alert of the shipped file on its series and nothing on
// a healthy fleet.
func TestAlertRulesFire(t *testing.T) {
	rules := readAlertRules(t)
	b, err := os.ReadFile(alertTestsFile)
	if err != nil {
		t.Fatal(err)
	}
	var tf struct {
		RuleFiles []string `yaml:"rule_files"`
		Tests     []struct {
			Name  string `yaml:"name"`
			Evals []struct {
				Alertname string           `yaml:"alertname"`
				ExpAlerts []map[string]any `yaml:"exp_alerts"`
			} `yaml:"alert_rule_test"`
		} `yaml:"tests"`
	}
	if err := yaml.Unmarshal(b, &tf); err != nil {
		t.Fatalf("%s: %v", alertTestsFile, err)
	}
	if !slices.Equal(tf.RuleFiles, []string{"../" + alertRulesFile}) {
		t.Fatalf("%s tests %v, want the shipped file ../%s", alertTestsFile, tf.RuleFiles, alertRulesFile)
	}
	// Every alert fires in some test and is asked, and silent, in the
	// healthy fleet's (the first).
	fires, quiet := map[string]bool{}, map[string]bool{}
	for i, tc := range tf.Tests {
		for _, e := range tc.Evals {
			if len(e.ExpAlerts) > 0 {
				fires[e.Alertname] = true
			} else if i == 0 {
				quiet[e.Alertname] = true
			}
		}
	}
	for _, r := range rules {
		if !fires[r.Alert] {
			t.Errorf("%s: no test of %s fires %s", alertTestsFile, alertRulesFile, r.Alert)
		}
		if !quiet[r.Alert] {
			t.Errorf("%s: the healthy fleet's test (the first) does not check that %s stays silent", alertTestsFile, r.Alert)
		}
	}
	out := promtool(t, "test", "rules", alertTestsFile)
	if !strings.Contains(out, "SUCCESS") {
		t.Fatalf("promtool test rules:\n%s", out)
	}
}

// Every alert has a severity an operator's routing knows, a summary and a
// description that names what to run and its section of docs/alerts.md,
// and docs/alerts.md explains exactly the shipped alerts.
func TestAlertsDocumented(t *testing.T) {
	rules := readAlertRules(t)
	doc, err := os.ReadFile(alertsDoc)
	if err != nil {
		t.Fatal(err)
	}
	headings := map[string]bool{}
	for _, m := range regexp.MustCompile(`(?m)^### (\w+)$`).FindAllStringSubmatch(string(doc), -1) {
		headings[m[1]] = true
	}
	command := regexp.MustCompile("`(orchestrate|systemctl|journalctl) [^`]+`")
	seen := map[string]bool{}
	for _, r := range rules {
		if seen[r.Alert] {
			t.Errorf("alert %s defined twice", r.Alert)
		}
		seen[r.Alert] = true
		if s := r.Labels["severity"]; s != "critical" && s != "warning" && s != "info" {
			t.Errorf("%s: severity %q, want critical, warning or info", r.Alert, s)
		}
		if r.Annotations["summary"] == "" {
			t.Errorf("%s: no summary", r.Alert)
		}
		d := r.Annotations["description"]
		if !command.MatchString(d) {
			t.Errorf("%s: the description names no command to run: %q", r.Alert, d)
		}
		if anchor := "docs/alerts.md#" + strings.ToLower(r.Alert); !strings.Contains(d, anchor) {
			t.Errorf("%s: the description does not point at %s: %q", r.Alert, anchor, d)
		}
		if !headings[r.Alert] {
			t.Errorf("docs/alerts.md has no section ### %s", r.Alert)
		}
	}
	for h := range headings {
		if !seen[h] {
			t.Errorf("docs/alerts.md explains %s, which %s does not define", h, alertRulesFile)
		}
	}
}

// The dashboard is JSON Grafana imports: a uid and a title, and panels
// that each query a Prometheus data source (a row aside).
func TestDashboardIsGrafanaJSON(t *testing.T) {
	b, err := os.ReadFile(dashboardFile)
	if err != nil {
		t.Fatal(err)
	}
	var d struct {
		UID           string `json:"uid"`
		Title         string `json:"title"`
		SchemaVersion int    `json:"schemaVersion"`
		Templating    struct {
			List []struct {
				Name, Type, Query string
			} `json:"list"`
		} `json:"templating"`
		Panels []struct {
			ID         int    `json:"id"`
			Type       string `json:"type"`
			Title      string `json:"title"`
			Datasource *struct {
				Type, UID string
			} `json:"datasource"`
			GridPos *struct{ H, W, X, Y int } `json:"gridPos"`
			Targets []struct {
				RefID string `json:"refId"`
				Expr  string `json:"expr"`
			} `json:"targets"`
		} `json:"panels"`
	}
	dec := json.NewDecoder(strings.NewReader(string(b)))
	if err := dec.Decode(&d); err != nil {
		t.Fatalf("%s: %v", dashboardFile, err)
	}
	if !regexp.MustCompile(`^[a-zA-Z0-9_-]{1,40}$`).MatchString(d.UID) || d.Title == "" || d.SchemaVersion == 0 {
		t.Fatalf("%s: uid %q (at most 40 letters, digits, - and _), title %q, schemaVersion %d", dashboardFile, d.UID, d.Title, d.SchemaVersion)
	}
	dsVar := false
	for _, v := range d.Templating.List {
		dsVar = dsVar || v.Name == "datasource" && v.Type == "datasource" && v.Query == "prometheus"
	}
	if !dsVar {
		t.Errorf("%s: no template variable datasource of type prometheus, which the panels name", dashboardFile)
	}
	if len(d.Panels) == 0 {
		t.Fatalf("%s: no panels", dashboardFile)
	}
	ids := map[int]bool{}
	// Each query, as a recording rule, for promtool to parse.
	var queries strings.Builder
	queries.WriteString("groups:\n  - name: dashboard\n    rules:\n")
	for _, p := range d.Panels {
		if ids[p.ID] || p.ID == 0 {
			t.Errorf("panel %q: id %d is 0 or not unique", p.Title, p.ID)
		}
		ids[p.ID] = true
		if p.Title == "" || p.GridPos == nil || p.GridPos.W == 0 || p.GridPos.H == 0 {
			t.Errorf("panel %d: no title or no place (gridPos)", p.ID)
		}
		if p.Type == "row" {
			continue
		}
		if p.Datasource == nil || p.Datasource.Type != "prometheus" || p.Datasource.UID != "${datasource}" {
			t.Errorf("panel %q: datasource %+v, want prometheus ${datasource}", p.Title, p.Datasource)
		}
		if len(p.Targets) == 0 {
			t.Errorf("panel %q: no targets", p.Title)
		}
		for _, tg := range p.Targets {
			if tg.RefID == "" || strings.TrimSpace(tg.Expr) == "" {
				t.Errorf("panel %q: a target without refId or expr", p.Title)
			}
			expr, _ := json.Marshal(tg.Expr) // a YAML string too
			fmt.Fprintf(&queries, "      - record: dashboard:panel_%d_%s\n        expr: %s\n", p.ID, tg.RefID, expr)
		}
	}
	rules := filepath.Join(t.TempDir(), "dashboard-queries.yml")
	if err := os.WriteFile(rules, []byte(queries.String()), 0o644); err != nil {
		t.Fatal(err)
	}
	promtool(t, "check", "rules", rules)
}
