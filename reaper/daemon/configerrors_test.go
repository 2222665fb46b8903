package daemon_test

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/jiocloud/orchestrate/internal/cli"
	"github.com/jiocloud/orchestrate/reaper/daemon"
	"github.com/jiocloud/orchestrate/reaper/reapertest"
)

// implementation finds what a user must never read in a configuration
// error: a Go type or package (reaper.Role, []string, int, struct, a
// pointer), a YAML tag (!!int) or the decoder's own words (unmarshal).
var implementation = regexp.MustCompile(`reaper\.[A-Z]|!!|\bu?int(8|16|32|64)?\b|\bfloat(32|64)\b|\bbool\b|\[\]|struct|unmarshal|map\[|time\.Duration|\*[a-z]+\.|yaml: |Go `)

// edit is reapertest.GoodYAML (lines: 3 interval, 6 desired, 7
// min_healthy, 8 checks, 9 max_age, 10 max_age_jitter, 12 flavor, 16
// metadata) with old replaced by new.
func edit(t *testing.T, old, new string) string {
	text := strings.Replace(reapertest.GoodYAML, old, new, 1)
	if text == reapertest.GoodYAML {
		t.Fatalf("%q is not in the good configuration", old)
	}
	return text
}

// aliasBomb is a "billion laughs": nine levels of ten aliases each, under
// the one key that takes any value (Prometheus' inline HTTP settings).
var aliasBomb = func() string {
	var b strings.Builder
	b.WriteString("roles:\n  - name: web\n    desired: 2\n    boot: {flavor: f, image: i}\n")
	b.WriteString("    autoscale:\n      target: 0.5\n      min: 1\n      max: 3\n      metric:\n        source: prometheus\n")
	b.WriteString("        prometheus:\n          url: http://127.0.0.1:9090\n          query: up\n")
	b.WriteString("          a0: &a0 [x, x, x, x, x, x, x, x, x, x]\n")
	for i := 1; i < 9; i++ {
		fmt.Fprintf(&b, "          a%d: &a%d [%s]\n", i, i, strings.TrimSuffix(strings.Repeat(fmt.Sprintf("*a%d, ", i-1), 10), ", "))
	}
	return b.String()
}()

// Every configuration error, whatever is wrong, reaches the operator the
// same way through the binary's real loading path (reaper --check-config):
// one line on stderr, prefixed "reaper: ", naming the file, the line where
// there is one and the field path as the YAML writes it, in words without
// a Go type; exit 2, nothing on stdout.
func TestConfigErrorsNameFileLineAndField(t *testing.T) {
	dir := t.TempDir()
	cases := []struct {
		name string
		text string // the file's contents; unused with path
		path string // a path to give instead of a file written from text
		line int    // 0: no line applies
		// field is the path the message names ("" when none applies: a
		// syntax error, a file that cannot be read); want, more of it.
		field, want string
	}{
		{name: "unknown key at the top level", text: edit(t, "interval: 10s", "intervall: 10s"), line: 3, field: "intervall", want: `did you mean "interval"?`},
		{name: "unknown key in a role", text: edit(t, "    desired: 3", "    desird: 3"), line: 6, field: "roles[0]", want: `unknown field "desird" in roles[0]: did you mean "desired"?`},
		{name: "unknown key two levels down", text: edit(t, "      flavor: m1.small", "      flavr: m1.small"), line: 12, field: "roles[0].boot", want: `did you mean "flavor"?`},
		{name: "a key one level too high", text: edit(t, "    desired: 3", "    desired: 3\n    user_data_file: /x"), line: 7, field: "roles[0]", want: "it belongs under boot"},
		{name: "a key given twice", text: edit(t, "    desired: 3", "    desired: 3\n    desired: 4"), line: 7, field: "roles[0].desired", want: "given twice (first on line 6)"},
		{name: "a word for a number", text: edit(t, "    desired: 3", "    desired: many"), line: 6, field: "roles[0].desired", want: `want a whole number, got the string "many"`},
		{name: "a number for a list", text: "interval: 10s\nroles: 3\n", line: 2, field: "roles", want: "want a list of roles, got the number 3"},
		{name: "a string for a list", text: edit(t, `    checks: [serfHealth, "service:nginx"]`, "    checks: serfHealth"), line: 8, field: "roles[0].checks", want: "want a list of checks"},
		{name: "a list for a mapping", text: edit(t, "      metadata: {team: infra}", "      metadata: [infra]"), line: 16, field: "roles[0].boot.metadata", want: "want a mapping"},
		{name: "a mapping for a string", text: edit(t, "      flavor: m1.small", "      flavor: {name: m1.small}"), line: 12, field: "roles[0].boot.flavor", want: "want a string, got a mapping"},
		{name: "a word for true or false", text: edit(t, "dry_run: false", "dry_run: maybe"), line: 2, field: "dry_run", want: "want true or false"},
		{name: "a duration in words", text: edit(t, "    max_age: 168h", "    max_age: 3 days"), line: 9, field: "roles[0].max_age", want: `"3 days" is not a duration (use 72h)`},
		{name: "a duration without its unit", text: edit(t, "interval: 10s", "interval: 30"), line: 3, field: "interval", want: "use 30s"},
		{name: "a list for a duration", text: edit(t, "interval: 10s", "interval: [10s]"), line: 3, field: "interval", want: "want a duration"},
		{name: "a word for a fraction", text: edit(t, "interval: 10s", "interval: 10s\npause_fleet_fraction: half"), line: 4, field: "pause_fleet_fraction", want: "want a number"},
		{name: "a number too large for any count", text: edit(t, "    desired: 3", "    desired: 99999999999999999999"), line: 6, field: "roles[0].desired", want: "want a whole number"},
		{name: "a negative count", text: edit(t, "    min_healthy: 2", "    min_healthy: -1"), line: 7, field: "roles[0].min_healthy", want: "got -1"},
		{name: "an absurd count", text: edit(t, "    desired: 3", "    desired: 1000000000"), line: 6, field: "roles[0].desired", want: "must be between 0 and 10000, got 1000000000"},
		{name: "a validation rule across fields", text: edit(t, "    max_age_jitter: 24h", "    max_age_jitter: 200h"), line: 10, field: "roles[0].max_age_jitter", want: "shorter than max_age"},
		{name: "a lifecycle hook's unknown key", text: edit(t, "    desired: 3", "    desired: 3\n    on_launch: {timout: 1m}"), line: 7, field: "roles[0].on_launch", want: `did you mean "timeout"?`},
		{name: "zones written as one word", text: edit(t, "    desired: 3", "    desired: 3\n    availability_zones: az1"), line: 7, field: "roles[0].availability_zones", want: "want a list of zone names"},
		{name: "a tab-indented line", text: edit(t, "    min_healthy: 2", "\tmin_healthy: 2"), line: 7, want: "a tab indents this line"},
		{name: "not YAML", text: "roles: [web\n", line: 1, want: "not valid YAML"},
		{name: "a binary file", text: "\x00\x01\x02", want: "not valid YAML"},
		{name: "a list at the top", text: "- web\n", line: 1, want: "want a mapping of settings"},
		{name: "two documents", text: "interval: 10s\n---\nroles: []\n", line: 2, want: "a second YAML document"},
		{name: "an empty file", text: "", field: "roles", want: "at least one role"},
		{name: "aliases that repeat themselves", text: aliasBomb, want: "excessive aliasing"},
		{name: "a file that is a directory", path: dir, want: "is a directory, not a file"},
		{name: "a missing file", path: filepath.Join(dir, "absent.yaml"), want: "no such file"},
	}
	for i, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			path := tc.path
			if path == "" {
				path = filepath.Join(dir, fmt.Sprintf("reaper%d.yaml", i))
				if err := os.WriteFile(path, []byte(tc.text), 0o600); err != nil {
					t.Fatal(err)
				}
			}
			var out, errOut bytes.Buffer
			code := daemon.Run(context.Background(), []string{"--config", path, "--check-config"}, cli.IO{Stdout: &out, Stderr: &errOut})
			msg := errOut.String()
			if code != 2 || out.Len() > 0 {
				t.Fatalf("exit %d, stdout %q, stderr %q; want exit 2 and nothing on stdout", code, out.String(), msg)
			}
			if !strings.HasPrefix(msg, "reaper: "+path) || strings.Count(msg, "\n") != 1 || !strings.HasSuffix(msg, "\n") {
				t.Fatalf("stderr %q: want one line starting %q", msg, "reaper: "+path)
			}
			if tc.line > 0 && !strings.HasPrefix(msg, fmt.Sprintf("reaper: %s:%d: ", path, tc.line)) {
				t.Errorf("stderr %q does not name line %d", msg, tc.line)
			}
			if tc.line == 0 && regexp.MustCompile(`^reaper: `+regexp.QuoteMeta(path)+`:\d+:`).MatchString(msg) {
				t.Errorf("stderr %q names a line where none applies", msg)
			}
			if !strings.Contains(msg, tc.field) || !strings.Contains(msg, tc.want) {
				t.Errorf("stderr %q: want the field %q and %q", msg, tc.field, tc.want)
			}
			if bad := implementation.FindString(strings.ReplaceAll(msg, path, "FILE")); bad != "" {
				t.Errorf("stderr %q leaks the implementation: %q", msg, bad)
			}
		})
	}
}
