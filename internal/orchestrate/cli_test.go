package orchestrate

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/hashicorp/consul/api"

	"github.com/jiocloud/orchestrate/internal/consultest"
)

// TestDoneWhenSession is an operator's session (trigger an update, hosts
// report, verify, look at failures), through Run.
func TestDoneWhenSession(t *testing.T) {
	a := consultest.Start(t, consultest.Options{})
	mustCode(t, cli(t, a, "", "trigger-update", "v2"), 0, "trigger-update v2")
	r := cli(t, a, "", "current-version")
	mustCode(t, r, 0, "current-version")
	if strings.TrimSpace(r.stdout) != "v2" {
		t.Fatalf("current-version printed %q", r.stdout)
	}
	mustCode(t, cli(t, a, "", "report-version", "v1", "--host", "h1"), 0, "report v1")
	r = cli(t, a, "", "pending-update", "--host", "h1")
	mustCode(t, r, 0, "pending-update at v1")
	if strings.TrimSpace(r.stdout) != "v2" {
		t.Fatalf("pending-update printed %q, want v2", r.stdout)
	}
	mustCode(t, cli(t, a, "", "report-version", "v2", "--host", "h1"), 0, "report v2")
	mustCode(t, cli(t, a, "", "pending-update", "--host", "h1"), 1, "pending-update at v2")
	mustCode(t, cli(t, a, "", "verify-hosts", "v2", "h1"), 0, "verify-hosts v2 h1")
	r = cli(t, a, "", "verify-hosts", "v2", "h1", "h2")
	mustCode(t, r, 1, "verify-hosts v2 h1 h2")
	if !strings.Contains(r.stdout, "h2") || strings.Contains(r.stdout, "h1") {
		t.Fatalf("verify-hosts must name h2 only, printed %q", r.stdout)
	}
	mustCode(t, cli(t, a, "", "update-status", "puppet", "failed", "--host", "h1", "--detail", "exec failed"), 0, "status failed")
	r = cli(t, a, "", "get-failures")
	mustCode(t, r, 1, "get-failures with a failure")
	if !strings.Contains(r.stdout, "puppet\th1") || !strings.Contains(r.stdout, "exec failed") {
		t.Fatalf("get-failures printed %q", r.stdout)
	}
	mustCode(t, cli(t, a, "", "update-status", "puppet", "success", "--host", "h1"), 0, "status success")
	p, _, err := a.Client.KV().Get("orchestrate/hosts/h1/status/puppet", nil)
	if err != nil || p == nil || !strings.HasPrefix(string(p.Value), `{"state":"success",`) {
		t.Fatalf("h1's puppet status: %v %v, want success", p, err)
	}
	mustCode(t, cli(t, a, "", "get-failures"), 0, "get-failures after success")

	// The status value records the running version and the time.
	var v map[string]any
	if err := json.Unmarshal(p.Value, &v); err != nil {
		t.Fatalf("status value %q: %v", p.Value, err)
	}
	for _, k := range []string{"state", "time", "version", "detail", "log_url"} {
		if _, ok := v[k]; !ok {
			t.Errorf("status value lacks %q: %s", k, p.Value)
		}
	}
	if v["version"] != "v2" {
		t.Errorf("status version = %v, want v2 (the host's running version)", v["version"])
	}
}

func TestStatusTableAndJSON(t *testing.T) {
	a := consultest.Start(t, consultest.Options{NodeName: "agent-node"})
	mustCode(t, cli(t, a, "", "trigger-update", "v2"), 0, "trigger")
	mustCode(t, cli(t, a, "", "report-version", "v2", "--host", "h1"), 0, "h1")
	mustCode(t, cli(t, a, "", "report-version", "v1", "--host", "h2"), 0, "h2")
	mustCode(t, cli(t, a, "", "update-status", "validation", "failed", "--host", "h2", "--detail", "check_api failed"), 0, "h2 failed")
	mustCode(t, cli(t, a, "", "update-status", "puppet", "success", "--host", "h1"), 0, "h1 ok")

	r := cli(t, a, "", "status")
	mustCode(t, r, 0, "status")
	for _, want := range []string{"failed: h2 validation", "check_api failed",
		"hosts on desired version 1/3, failed 1, not reporting 1"} {
		if !strings.Contains(r.stdout, want) {
			t.Errorf("status output lacks %q:\n%s", want, r.stdout)
		}
	}
	r = cli(t, a, "", "status", "--json")
	mustCode(t, r, 0, "status --json")
	var rep statusReport
	if err := json.Unmarshal([]byte(r.stdout), &rep); err != nil {
		t.Fatalf("status --json: %v\n%s", err, r.stdout)
	}
	if rep.CurrentVersion != "v2" || rep.Summary.Hosts != 3 || rep.Summary.OnDesired != 1 || rep.Summary.Failed != 1 || rep.Summary.NotReporting != 1 {
		t.Fatalf("status --json summary = %+v", rep)
	}
	if len(rep.Hosts) != 3 || rep.Hosts[0].Host != "agent-node" || rep.Hosts[1].Host != "h1" {
		t.Fatalf("status --json hosts = %+v", rep.Hosts)
	}
	r = cli(t, a, "", "status", "--no-catalog", "--json")
	if strings.Contains(r.stdout, "agent-node") {
		t.Errorf("--no-catalog still lists the catalog node:\n%s", r.stdout)
	}

	r = cli(t, a, "", "running-versions")
	mustCode(t, r, 0, "running-versions")
	if r.stdout != "v1\t1\nv2\t1\n" {
		t.Errorf("running-versions = %q", r.stdout)
	}
	r = cli(t, a, "", "hosts-at-version", "v1", "--json")
	mustCode(t, r, 0, "hosts-at-version")
	if strings.Join(strings.Fields(r.stdout), "") != `["h2"]` {
		t.Errorf("hosts-at-version v1 --json = %q", r.stdout)
	}
	r = cli(t, a, "", "get-failures", "puppet")
	mustCode(t, r, 0, "get-failures puppet (only validation failed)")
	r = cli(t, a, "", "get-failures", "--json", "validation")
	mustCode(t, r, 1, "get-failures validation")
	var fs []map[string]any
	if err := json.Unmarshal([]byte(r.stdout), &fs); err != nil || len(fs) != 1 || fs[0]["host"] != "h2" || fs[0]["detail"] != "check_api failed" {
		t.Errorf("get-failures --json = %q (%v)", r.stdout, err)
	}
}

func TestVerifyHostsFromFile(t *testing.T) {
	a := consultest.Start(t, consultest.Options{})
	for _, h := range []string{"a1", "a2", "a3"} {
		mustCode(t, cli(t, a, "", "report-version", "v5", "--host", h), 0, "report "+h)
	}
	f := filepath.Join(t.TempDir(), "hosts")
	if err := os.WriteFile(f, []byte("# the db role\na1\n\na2  # primary\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	mustCode(t, cli(t, a, "", "verify-hosts", "v5", "--from-file", f), 0, "from file")
	mustCode(t, cli(t, a, "a3\nb9\n", "verify-hosts", "v5", "--from-file", "-"), 1, "from stdin with b9")
	r := cli(t, a, "", "verify-hosts", "v5", "--json", "a1", "zz")
	mustCode(t, r, 1, "json")
	if !strings.Contains(r.stdout, `"host": "zz"`) {
		t.Errorf("verify-hosts --json = %s", r.stdout)
	}
	mustCode(t, cli(t, a, "", "verify-hosts", "v5", "--from-file", filepath.Join(t.TempDir(), "missing")), 2, "missing file")
	if err := os.WriteFile(f, []byte("a1\nbad/host\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	r = cli(t, a, "", "verify-hosts", "v5", "--from-file", f)
	mustCode(t, r, 2, "bad host in file")
	if !strings.Contains(r.stderr, "line 2") {
		t.Errorf("error does not name the line: %s", r.stderr)
	}
}

func TestPendingUpdateWithoutCurrentVersion(t *testing.T) {
	a := consultest.Start(t, consultest.Options{})
	r := cli(t, a, "", "pending-update", "--host", "h1")
	mustCode(t, r, 1, "no current_version")
	if !strings.Contains(r.stderr, "no current_version") {
		t.Errorf("stderr %q does not say current_version is unset", r.stderr)
	}
	mustCode(t, cli(t, a, "", "current-version"), 1, "current-version unset")
	// A host that never reported has an update pending.
	mustCode(t, cli(t, a, "", "trigger-update", "v1"), 0, "trigger")
	mustCode(t, cli(t, a, "", "pending-update", "--host", "new-host"), 0, "never reported")
}

func TestDefaultHostIsAgentNodeName(t *testing.T) {
	a := consultest.Start(t, consultest.Options{NodeName: "compute-7"})
	mustCode(t, cli(t, a, "", "report-version", "v3"), 0, "report without --host")
	ks, _, err := a.Client.KV().Keys("orchestrate/hosts/", "", nil)
	if err != nil {
		t.Fatal(err)
	}
	if len(ks) != 1 || ks[0] != "orchestrate/hosts/compute-7/version" {
		t.Fatalf("keys = %v, want the agent's node name", ks)
	}
}

func TestPrefixFlagAndEnv(t *testing.T) {
	a := consultest.Start(t, consultest.Options{})
	mustCode(t, cli(t, a, "", "trigger-update", "v9", "--prefix", "/cloud1/orch/"), 0, "flag")
	t.Setenv("ORCHESTRATE_PREFIX", "cloud2")
	mustCode(t, cli(t, a, "", "scale", "db", "3"), 0, "env")
	got := strings.Join(allKeys(t, a.Client), " ")
	if got != "cloud1/orch/current_version cloud2/roles/db/desired cloud2/roles/db/override" {
		t.Fatalf("keys = %q", got)
	}
}

// TestBadInput checks every kind of bad input exits 2 with a message and
// writes nothing.
func TestBadInput(t *testing.T) {
	a := consultest.Start(t, consultest.Options{})
	tests := []struct {
		name    string
		args    []string
		wantErr string
	}{
		{name: "no subcommand", args: nil, wantErr: "no subcommand"},
		{name: "unknown subcommand", args: []string{"trigger-updates", "v1"}, wantErr: "unknown subcommand"},
		{name: "unknown flag", args: []string{"trigger-update", "--bogus", "v1"}, wantErr: "unknown flag"},
		{name: "missing version", args: []string{"trigger-update"}, wantErr: "usage"},
		{name: "extra argument", args: []string{"trigger-update", "v1", "v2"}, wantErr: "usage"},
		{name: "empty version", args: []string{"trigger-update", ""}, wantErr: "version is empty"},
		{name: "slash version", args: []string{"report-version", "v1/x", "--host", "h1"}, wantErr: "slash"},
		{name: "slash host", args: []string{"report-version", "v1", "--host", "a/b"}, wantErr: "--host"},
		{name: "space host", args: []string{"update-status", "puppet", "success", "--host", "a b"}, wantErr: "white space"},
		{name: "slash category", args: []string{"update-status", "pup/pet", "success", "--host", "h1"}, wantErr: "slash"},
		{name: "unknown state", args: []string{"update-status", "puppet", "done", "--host", "h1"}, wantErr: "not one of"},
		{name: "bad version flag", args: []string{"update-status", "puppet", "failed", "--host", "h1", "--version", "a/b"}, wantErr: "--version"},
		{name: "negative scale", args: []string{"scale", "db", "-1"}, wantErr: "unknown shorthand"},
		{name: "non-numeric scale", args: []string{"scale", "db", "three"}, wantErr: "not a non-negative integer"},
		{name: "bad prefix", args: []string{"trigger-update", "v1", "--prefix", "a//b"}, wantErr: "--prefix"},
		{name: "verify no hosts", args: []string{"verify-hosts", "v1"}, wantErr: "no hosts"},
		{name: "bad log level", args: []string{"current-version", "--log-level", "loud"}, wantErr: "--log-level"},
		{name: "missing token file", args: []string{"current-version", "--token-file", "/nonexistent/token"}, wantErr: "token file /nonexistent/token"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			r := cli(t, a, "", tc.args...)
			mustCode(t, r, 2, strings.Join(tc.args, " "))
			if !strings.Contains(r.stderr, tc.wantErr) {
				t.Errorf("stderr %q lacks %q", r.stderr, tc.wantErr)
			}
		})
	}
	if ks := allKeys(t, a.Client); len(ks) != 0 {
		t.Fatalf("bad input wrote keys: %v", ks)
	}
}

func TestCorruptValuesAreReportedNotFatal(t *testing.T) {
	a := consultest.Start(t, consultest.Options{})
	mustCode(t, cli(t, a, "", "report-version", "v1", "--host", "h1"), 0, "report")
	if _, err := a.Client.KV().Put(&api.KVPair{Key: "orchestrate/status/puppet/failed/h9", Value: []byte("{oops")}, nil); err != nil {
		t.Fatal(err)
	}
	r := cli(t, a, "", "status")
	mustCode(t, r, 2, "status with a corrupt value")
	if !strings.Contains(r.stderr, "orchestrate/status/puppet/failed/h9") || !strings.Contains(r.stdout, "failed: h9 puppet") {
		t.Fatalf("status must name the corrupt key and still print the table:\nstdout %s\nstderr %s", r.stdout, r.stderr)
	}
	r = cli(t, a, "", "get-failures")
	mustCode(t, r, 1, "a corrupt failed entry is still a failure")
	if !strings.Contains(r.stdout, "h9") || !strings.Contains(r.stdout, "unreadable") {
		t.Fatalf("get-failures = %q", r.stdout)
	}
}

func TestConsulUnreachableIsExit3(t *testing.T) {
	t.Setenv("CONSUL_HTTP_ADDR", "127.0.0.1:1")
	var out, errb bytes.Buffer
	code := Run(context.Background(), []string{"trigger-update", "v1"}, IO{Stdin: strings.NewReader(""), Stdout: &out, Stderr: &errb})
	if code != 3 {
		t.Fatalf("exit %d, want 3; stderr %s", code, errb.String())
	}
	if !strings.Contains(errb.String(), "connection refused") {
		t.Errorf("stderr does not say why: %s", errb.String())
	}
}

// TestACLTokenFromFileNeverPrinted runs against an agent with ACLs enforced:
// the token file grants access, a wrong token is refused (exit 3), and
// neither token ever shows up in output.
func TestACLTokenFromFileNeverPrinted(t *testing.T) {
	const secret = "5e7c1b2a-0d4f-4a51-9a57-3c0f6c2f9e11"
	a := consultest.Start(t, consultest.Options{ACLToken: secret})
	dir := t.TempDir()
	good := filepath.Join(dir, "token")
	if err := os.WriteFile(good, []byte(secret+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	r := cli(t, a, "", "trigger-update", "v1", "--token-file", good, "--log-level", "debug")
	mustCode(t, r, 0, "with the token file")

	t.Setenv("CONSUL_HTTP_TOKEN_FILE", good)
	r = cli(t, a, "", "current-version", "--log-level", "debug")
	mustCode(t, r, 0, "with CONSUL_HTTP_TOKEN_FILE")
	if strings.Contains(r.stdout+r.stderr, secret) {
		t.Fatalf("token printed: %s %s", r.stdout, r.stderr)
	}
	t.Setenv("CONSUL_HTTP_TOKEN_FILE", "")

	const wrong = "00000000-1111-2222-3333-444444444444"
	bad := filepath.Join(dir, "wrong")
	if err := os.WriteFile(bad, []byte(wrong), 0o600); err != nil {
		t.Fatal(err)
	}
	r = cli(t, a, "", "trigger-update", "v2", "--token-file", bad, "--log-level", "debug")
	mustCode(t, r, 3, "with a wrong token")
	if strings.Contains(r.stdout+r.stderr, wrong) || strings.Contains(r.stdout+r.stderr, secret) {
		t.Fatalf("token printed: %s %s", r.stdout, r.stderr)
	}
	if !strings.Contains(r.stderr, "403") && !strings.Contains(strings.ToLower(r.stderr), "acl") {
		t.Errorf("refusal not explained: %s", r.stderr)
	}
	r = cli(t, a, "", "current-version", "--token", secret)
	mustCode(t, r, 0, "--token flag")
	if strings.TrimSpace(r.stdout) != "v1" {
		t.Fatalf("current-version = %q; the wrong token must not have written", r.stdout)
	}
	empty := filepath.Join(dir, "empty")
	if err := os.WriteFile(empty, []byte("\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	r = cli(t, a, "", "current-version", "--token-file", empty)
	mustCode(t, r, 2, "empty token file")
}

// TestHandlerMode: with --handler, pending-update and converge exit 0 when
// there is nothing to do, while a real failure (Consul unreachable, a failed
// build) stays non-zero; without it the documented codes hold.
func TestHandlerMode(t *testing.T) {
	e := newConvergeEnv(t)
	a := e.a
	mustCode(t, cli(t, a, "", "pending-update", "--host", "h1", "--handler"), 0, "handler, no current_version")
	mustCode(t, cli(t, a, "", "trigger-update", "v1"), 0, "trigger")
	mustCode(t, cli(t, a, "", "report-version", "--host", "h1", "v1"), 0, "report")
	mustCode(t, cli(t, a, "", "pending-update", "--host", "h1"), 1, "interactive, nothing pending")
	mustCode(t, cli(t, a, "", "pending-update", "--host", "h1", "--handler"), 0, "handler, nothing pending")
	mustCode(t, cli(t, a, "", "pending-update", "--host", "h1", "--handler", "--consul-addr", "127.0.0.1:1"), 3, "handler, Consul unreachable")

	// Pending on dependencies: 1 interactively, 0 as a handler; failed: 1 both ways.
	if err := os.WriteFile(e.hiera, []byte("\"orchestrate::dependencies_met\": false\n\"orchestrate::unmet_dependencies\": [\"db\"]\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	e.setExit(t, "puppet", "1")
	mustCode(t, e.converge(t), 1, "interactive converge pending on dependencies")
	mustCode(t, e.converge(t, "--handler"), 0, "handler converge pending on dependencies")
	if err := os.WriteFile(e.hiera, []byte("\"orchestrate::dependencies_met\": true\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	mustCode(t, e.converge(t, "--handler"), 1, "handler converge failed")
	e.setExit(t, "puppet", "0")
	mustCode(t, e.converge(t, "--handler"), 0, "handler converge succeeded")
	mustCode(t, e.converge(t, "--handler"), 0, "handler converge, nothing to do")
}

// A record a node wrote reaches an operator's terminal: control
// characters (an escape sequence that clears the screen, a carriage
// return that overwrites the line, a bidirectional override that reverses
// text) are shown escaped, never sent to the terminal.
func TestNodeWrittenTextIsEscaped(t *testing.T) {
	for _, tc := range []struct{ in, want string }{
		{"plain detail", "plain detail"},
		{"two\n  lines\ttabbed", "two lines tabbed"},
		{"\x1b[2Jcleared", `\x1b[2Jcleared`},
		{"ok\rFAKE", "ok FAKE"},
		{"a\u202egnp.exe", `a\u202egnp.exe`},
		{"bell\x07 nul\x00", `bell\a nul\x00`},
		{"bad \xff utf8", `bad \xff utf8`},
		{"ünïcödé ✓", "ünïcödé ✓"},
	} {
		if got := oneLine(tc.in); got != tc.want {
			t.Errorf("oneLine(%q) = %q, want %q", tc.in, got, tc.want)
		}
	}
	a := consultest.Start(t, consultest.Options{})
	hostile := "Exec[x] failed\x1b[2J\x1b[H all green\r\u202e"
	mustCode(t, cli(t, a, "", "update-status", "puppet", "failed", "--host", "web1", "--detail", hostile), 0, "update-status")
	for _, args := range [][]string{{"get-failures"}, {"status", "--no-catalog"}} {
		r := cli(t, a, "", args...)
		out := r.stdout + r.stderr
		if strings.ContainsAny(out, "\x1b\r\u202e") || !strings.Contains(out, `\x1b[2J`) {
			t.Errorf("orchestrate %s printed the node's control characters raw, or not at all:\n%q", args[0], out)
		}
	}
}
