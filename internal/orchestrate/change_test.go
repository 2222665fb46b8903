package orchestrate

import (
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/consul/api"

	"github.com/jiocloud/orchestrate/internal/consultest"
	"github.com/jiocloud/orchestrate/internal/store/reaperkv"
	"github.com/jiocloud/orchestrate/internal/store/schema"
)

// terminalInput is a stdin that says it is a terminal, holding what the
// person types; before, when set, runs at the first read (while the
// prompt waits).
type terminalInput struct {
	r      io.Reader
	before func()
}

func (t *terminalInput) IsTerminal() bool { return true }

func (t *terminalInput) Read(p []byte) (int, error) {
	if t.before != nil {
		t.before()
		t.before = nil
	}
	return t.r.Read(p)
}

func typed(s string) *terminalInput { return &terminalInput{r: strings.NewReader(s)} }

// kvSnapshot is every key and value under the agent, to show that a
// refused command wrote nothing.
func kvSnapshot(t *testing.T, c *api.Client) string {
	t.Helper()
	pairs, _, err := c.KV().List("", nil)
	if err != nil {
		t.Fatal(err)
	}
	var b strings.Builder
	for _, p := range pairs {
		fmt.Fprintf(&b, "%s=%s@%d\n", p.Key, p.Value, p.ModifyIndex)
	}
	return b.String()
}

// putReaperReport writes the reaper's state report: role web wanting 4,
// 4 serving, with a warm pool, and an arm record.
func putReaperReport(t *testing.T, a *consultest.Agent) {
	t.Helper()
	rep := reaperkv.ReaperReport{Time: time.Now().UTC(), Leader: "boot1", Interval: 10 * time.Second, Armed: true,
		Roles: []reaperkv.RoleReport{{Name: "web", Desired: 4, Count: 4, Healthy: 4, Members: []string{"web1", "web2", "web3", "web4"},
			Spec: "9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08", Drifted: 2, Pool: &reaperkv.PoolReport{Size: 1}}}}
	data, _ := json.Marshal(rep)
	if _, err := a.Client.KV().Put(&api.KVPair{Key: reaperkv.ReaperKey(schema.DefaultPrefix, reaperkv.ReaperStateKey), Value: data}, nil); err != nil {
		t.Fatal(err)
	}
}

// Every operator write command says what it changed, old -> new, as a
// sentence, and "nothing changed" when it changed nothing.
func TestWriteCommandsSayWhatChanged(t *testing.T) {
	a := consultest.Start(t, consultest.Options{})
	me := whoAmI()
	for _, step := range []struct {
		args []string
		want string
	}{
		{[]string{"trigger-update", "41"}, "current version: none → 41"},
		{[]string{"trigger-update", "42"}, "current version: 41 → 42"},
		{[]string{"trigger-update", "42"}, "nothing changed: current version is already 42"},
		{[]string{"scale", "web", "3"}, "desired count of role web: none → 3 (set by hand)"},
		{[]string{"scale", "web", "5", "--reason", "launch day"}, `desired count of role web: 3 → 5 (set by hand; reason: "launch day")`},
		{[]string{"scale", "web", "5"}, "nothing changed: desired count of role web is already 5 (set by hand)"},
		{[]string{"scale", "web", "--auto"}, "desired count of role web: 5 set by hand by " + me + " → the autoscaler's (no count set by hand)"},
		{[]string{"scale", "web", "--auto"}, "nothing changed: desired count of role web is already the autoscaler's (no count set by hand)"},
		{[]string{"protect", "web1", "--reason", "canary"}, `scale-in protection of web1: not protected → protected by ` + me + ` (reason: "canary")`},
		{[]string{"unprotect", "web1"}, "scale-in protection of web1: protected by " + me + " → not protected"},
		{[]string{"unprotect", "web1"}, "nothing changed: scale-in protection of web1 is already not protected"},
		{[]string{"reaper", "arm", "--yes", "--reason", "after maintenance"},
			`reaper: not armed (no arm record) → armed by ` + me + ` (reason: "after maintenance") (it may now replace and delete servers)`},
		{[]string{"reaper", "disarm"}, `reaper: armed by ` + me + ` → disarmed by ` + me + ` (reason: "disarmed by hand with orchestrate reaper disarm") (it creates missing servers and destroys nothing until ` + "`orchestrate reaper arm`)"},
		{[]string{"rollout", "web", "--max-unavailable", "2"}, "rollout policy of web: none (max-unavailable all, max-failures none) → max-unavailable 2, max-failures none"},
	} {
		r := cli(t, a, "", step.args...)
		mustCode(t, r, 0, strings.Join(step.args, " "))
		if got, _, _ := strings.Cut(r.stdout, "\n"); got != step.want {
			t.Errorf("%s:\n got %s\nwant %s", strings.Join(step.args, " "), got, step.want)
		}
	}
}

// With --json a write command prints the change as data, one shape for
// all: changed, key, old, new, by, reason.
func TestWriteCommandsJSON(t *testing.T) {
	a := consultest.Start(t, consultest.Options{})
	run := func(args ...string) map[string]json.RawMessage {
		t.Helper()
		r := cli(t, a, "", append(args, "--json")...)
		mustCode(t, r, 0, strings.Join(args, " "))
		var m map[string]json.RawMessage
		if err := json.Unmarshal([]byte(r.stdout), &m); err != nil {
			t.Fatalf("%s --json: %v\n%s", strings.Join(args, " "), err, r.stdout)
		}
		return m
	}
	for _, tc := range []struct {
		name string
		args []string
		want map[string]string // field -> its JSON
	}{
		{"first version", []string{"trigger-update", "41"}, map[string]string{"changed": "true", "key": `"orchestrate/current_version"`, "old": "null", "new": `"41"`}},
		{"next version", []string{"trigger-update", "42"}, map[string]string{"changed": "true", "old": `"41"`, "new": `"42"`}},
		{"same version", []string{"trigger-update", "42"}, map[string]string{"changed": "false", "old": `"42"`, "new": `"42"`}},
		{"count", []string{"scale", "web", "3"}, map[string]string{"changed": "true", "key": `"orchestrate/roles/web/desired"`, "old": "null", "new": "3", "by": `"` + whoAmI() + `"`}},
		{"count up", []string{"scale", "web", "5", "--reason", "launch"}, map[string]string{"changed": "true", "old": "3", "new": "5", "reason": `"launch"`}},
		{"same count", []string{"scale", "web", "5"}, map[string]string{"changed": "false", "old": "5", "new": "5"}},
		{"unprotect none", []string{"unprotect", "web1"}, map[string]string{"changed": "false", "key": `"orchestrate/protect/web1"`, "old": "null", "new": "null"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			m := run(tc.args...)
			for _, f := range []string{"changed", "key", "old", "new"} {
				if _, ok := m[f]; !ok {
					t.Errorf("no %q in %v", f, m)
				}
			}
			for f, want := range tc.want {
				if string(m[f]) != want {
					t.Errorf("%s = %s, want %s", f, m[f], want)
				}
			}
		})
	}
	// A record is its stored JSON: the arm record replaced, as written.
	m := run("reaper", "arm", "--yes", "--reason", "first")
	m = run("reaper", "arm", "--yes", "--reason", "second")
	var old, nu reaperkv.ArmRecord
	if json.Unmarshal(m["old"], &old) != nil || json.Unmarshal(m["new"], &nu) != nil || old.Reason != "first" || nu.Reason != "second" || string(m["reason"]) != `"second"` {
		t.Fatalf("arm over arm: %v", m)
	}
}

// A destructive command asks on a terminal: the word typed exactly (or y
// for the smaller ones) goes on; anything else, or the end of input, is a
// no: exit 1, nothing written. Without a terminal it needs --yes (exit 2).
func TestConfirmation(t *testing.T) {
	a := consultest.Start(t, consultest.Options{})
	putReaperReport(t, a)
	mustCode(t, cli(t, a, "", "scale", "web", "4"), 0, "scale up to the reaper's count")
	for _, tc := range []struct {
		name       string
		args       []string
		stdin      io.Reader
		code       int
		prompt     string
		wantStderr string
	}{
		{"arm, wrong word", []string{"reaper", "arm", "--reason", "r"}, typed("yes\n"), 1,
			"This arms the reaper for datacenter dc1 (prefix orchestrate): it may delete and create servers. Type 'arm' to go on: ", "not confirmed: nothing written"},
		{"arm, end of input", []string{"reaper", "arm", "--reason", "r"}, typed(""), 1, "Type 'arm' to go on: ", "not confirmed"},
		{"arm, no terminal", []string{"reaper", "arm", "--reason", "r"}, strings.NewReader("arm\n"), 2, "", "add --yes to confirm without a terminal"},
		{"arm without a reason", []string{"reaper", "arm", "--yes"}, typed("arm\n"), 2, "", "--reason is required"},
		{"scale down, no", []string{"scale", "web", "2"}, typed("n\n"), 1,
			"This lowers the desired count of role web from 4 to 2 (4 serving now): the reaper drains and deletes servers to match. Go on? [y/N] ", "not confirmed"},
		{"scale down, end of input", []string{"scale", "web", "2"}, typed(""), 1, "Go on? [y/N] ", "not confirmed"},
		{"scale down, no terminal", []string{"scale", "web", "2"}, strings.NewReader("y\n"), 2, "", "add --yes"},
		{"pool flush, no", []string{"pool", "flush", "web"}, typed("no\n"), 1, "This has the reaper replace every standby of role web's warm pool, one at a time. Go on? [y/N] ", "not confirmed"},
		{"pool flush, no terminal", []string{"pool", "flush", "web"}, strings.NewReader(""), 2, "", "add --yes"},
		{"refresh, no", []string{"refresh", "web"}, typed("\n"), 1, "This has the reaper replace the servers of role web not on its boot spec 9f86d081884c (2 now), create-first, in batches. Go on? [y/N] ", "not confirmed"},
		{"refresh, no terminal", []string{"refresh", "web", "--reason", "new image"}, strings.NewReader(""), 2, "", "add --yes"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			before := kvSnapshot(t, a.Client)
			r := cliWith(t, a, tc.stdin, tc.args...)
			mustCode(t, r, tc.code, tc.name)
			if !strings.HasPrefix(r.stderr, tc.prompt) && !strings.Contains(r.stderr, tc.prompt) {
				t.Errorf("stderr %q, want the prompt %q", r.stderr, tc.prompt)
			}
			if !strings.Contains(r.stderr, tc.wantStderr) || r.stdout != "" {
				t.Errorf("stdout %q, stderr %q, want %q", r.stdout, r.stderr, tc.wantStderr)
			}
			if after := kvSnapshot(t, a.Client); after != before {
				t.Errorf("wrote:\n%s\nwas:\n%s", after, before)
			}
		})
	}
	// Confirmed: written, and said.
	r := cliWith(t, a, typed("arm\n"), "reaper", "arm", "--reason", "checked by hand")
	mustCode(t, r, 0, "arm, confirmed")
	if !strings.Contains(r.stdout, `armed by `+whoAmI()+` (reason: "checked by hand")`) {
		t.Errorf("stdout %q", r.stdout)
	}
	for _, yes := range []string{"y\n", "YES\n"} {
		r = cliWith(t, a, typed(yes), "scale", "web", "3")
		mustCode(t, r, 0, "scale down, confirmed with "+yes)
	}
	if n, _, _ := mustStore(t, a).Desired(t.Context(), "web"); n != 3 {
		t.Errorf("desired %d after the confirmed scale-downs", n)
	}
	// Above the count and the servers serving: nothing to ask.
	mustCode(t, cliWith(t, a, typed(""), "scale", "web", "6"), 0, "scale up asks nothing")
	r = cliWith(t, a, typed(""), "scale", "web", "5")
	mustCode(t, r, 1, "scale down from 6 to 5 asks")
}

// The count confirmed is the count replaced: another operator's write
// while the question waits refuses the scale (exit 1), and theirs stands.
func TestScaleConfirmedCountMoved(t *testing.T) {
	a := consultest.Start(t, consultest.Options{})
	putReaperReport(t, a)
	mustCode(t, cli(t, a, "", "scale", "web", "4"), 0, "scale")
	in := typed("y\n")
	in.before = func() {
		if _, err := a.Client.KV().Put(&api.KVPair{Key: "orchestrate/roles/web/desired", Value: []byte("7")}, nil); err != nil {
			t.Error(err)
		}
	}
	r := cliWith(t, a, in, "scale", "web", "2")
	mustCode(t, r, 1, "scale over a count moved while asked")
	if !strings.Contains(r.stderr, "changed (to 7) while you were asked: nothing written") {
		t.Errorf("stderr %q", r.stderr)
	}
	if n, _, _ := mustStore(t, a).Desired(t.Context(), "web"); n != 7 {
		t.Errorf("desired %d, want the other writer's 7", n)
	}
}

// A --reason is one line of plain text, at most 500 bytes: a newline, an
// escape sequence or 10,000 bytes is exit 2, nothing written.
func TestBadReason(t *testing.T) {
	a := consultest.Start(t, consultest.Options{})
	putReaperReport(t, a)
	for _, reason := range []string{"two\nlines", "red \x1b[31malert", "bidi \u202e txt", strings.Repeat("x", 10000), "bad \xff utf-8"} {
		for _, args := range [][]string{
			{"reaper", "arm", "--yes"}, {"reaper", "disarm"}, {"scale", "web", "2", "--yes"}, {"pool", "flush", "web", "--yes"},
			{"refresh", "web", "--yes"}, {"protect", "web1"}, {"hold", "web1"},
		} {
			before := kvSnapshot(t, a.Client)
			r := cli(t, a, "", append(args, "--reason", reason)...)
			what := fmt.Sprintf("%s --reason %.20q", strings.Join(args, " "), reason)
			mustCode(t, r, 2, what)
			if !strings.Contains(r.stderr, "--reason") || strings.Contains(r.stderr, "\x1b") || strings.Count(r.stderr, "\n") != 1 {
				t.Errorf("%s: stderr %q", what, r.stderr)
			}
			if after := kvSnapshot(t, a.Client); after != before {
				t.Errorf("%s wrote", what)
			}
		}
	}
}

// The reason is recorded where the action is, and shown: the arm record by
// reaper history, the flush request by pool status, the refresh request by
// refresh status, the override by status --json.
func TestReasonRecordedAndShown(t *testing.T) {
	a := consultest.Start(t, consultest.Options{})
	putReaperReport(t, a)
	for _, args := range [][]string{
		{"reaper", "arm", "--yes", "--reason", "after maintenance"},
		{"pool", "flush", "web", "--yes", "--reason", "new image 42"},
		{"refresh", "web", "--yes", "--reason", "kernel CVE"},
		{"scale", "web", "3", "--yes", "--reason", "quiet weekend"},
	} {
		mustCode(t, cli(t, a, "", args...), 0, strings.Join(args, " "))
	}
	for _, check := range []struct {
		args []string
		want string
	}{
		{[]string{"reaper", "history"}, "armed by " + whoAmI() + " (after maintenance)"},
		{[]string{"pool", "status"}, "flush requested by " + whoAmI()},
		{[]string{"pool", "status"}, "(new image 42)"},
		{[]string{"refresh", "status"}, "(kernel CVE)"},
		{[]string{"status", "--json"}, `"reason": "quiet weekend"`},
	} {
		r := cli(t, a, "", check.args...)
		if !strings.Contains(r.stdout, check.want) {
			t.Errorf("%s: no %q in\n%s", strings.Join(check.args, " "), check.want, r.stdout)
		}
	}
}

// The real binary on a real pseudo-terminal (script(1), from bsdutils):
// the prompt is asked, and the answer typed decides.
func TestConfirmationOnATerminal(t *testing.T) {
	scriptBin, err := exec.LookPath("script")
	if err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatalf("script (bsdutils) is missing: scripts/install-test-deps.sh installs it")
		}
		t.Skip("script (bsdutils) is not installed")
	}
	bin := builtBinary(t, "orchestrate")
	a := consultest.Start(t, consultest.Options{})
	for _, tc := range []struct {
		answer string
		code   int
		armed  bool
	}{
		{"nope", 1, false},
		{"arm", 0, true},
	} {
		cmd := exec.Command(scriptBin, "-qec", bin+" reaper arm --reason 'on a terminal' --consul-addr "+a.HTTPAddr, "/dev/null")
		cmd.Stdin = strings.NewReader(tc.answer + "\n")
		out, err := cmd.CombinedOutput()
		code := 0
		if ee, ok := err.(*exec.ExitError); ok {
			code = ee.ExitCode()
		} else if err != nil {
			t.Fatal(err)
		}
		if code != tc.code || !strings.Contains(string(out), "Type 'arm' to go on:") {
			t.Errorf("answer %q: exit %d, want %d:\n%s", tc.answer, code, tc.code, out)
		}
		p, _, err := a.Client.KV().Get("orchestrate/reaper/armed", nil)
		if err != nil || (p != nil) != tc.armed {
			t.Errorf("answer %q: armed key %v (%v), want armed %t", tc.answer, p, err, tc.armed)
		}
	}
}

// What a sentence shows from Consul (an author written by hand, say) is
// escaped: an escape sequence or a newline in a record cannot reach the
// terminal.
func TestChangeFromConsulIsEscaped(t *testing.T) {
	a := consultest.Start(t, consultest.Options{})
	data, _ := json.Marshal(reaperkv.ArmRecord{Time: time.Now(), By: "mallory\x1b[2J\nreaper: disarmed", Reason: "x"})
	if _, err := a.Client.KV().Put(&api.KVPair{Key: "orchestrate/reaper/armed", Value: data}, nil); err != nil {
		t.Fatal(err)
	}
	r := cli(t, a, "", "reaper", "arm", "--yes", "--reason", "ok")
	mustCode(t, r, 0, "arm over a record written by hand")
	if strings.Contains(r.stdout, "\x1b") || strings.Count(r.stdout, "\n") != 1 || !strings.Contains(r.stdout, `armed by mallory\x1b[2J reaper: disarmed →`) {
		t.Fatalf("stdout %q", r.stdout)
	}
}

// With Consul down a write command says nothing changed nowhere: exit 3,
// nothing on stdout.
func TestWriteCommandsConsulDown(t *testing.T) {
	t.Setenv("CONSUL_HTTP_ADDR", "127.0.0.1:1")
	for _, args := range [][]string{
		{"trigger-update", "42"}, {"scale", "web", "3", "--yes"}, {"scale", "web", "--auto"}, {"protect", "web1"}, {"unprotect", "web1"},
		{"reaper", "arm", "--yes", "--reason", "r"}, {"reaper", "disarm"}, {"pool", "flush", "web", "--yes"}, {"refresh", "web", "--yes"},
	} {
		var out, errb strings.Builder
		code := Run(t.Context(), args, IO{Stdin: strings.NewReader(""), Stdout: &out, Stderr: &errb})
		if code != 3 || out.Len() != 0 || !strings.Contains(errb.String(), "connection refused") {
			t.Errorf("%s: exit %d, stdout %q, stderr %q", strings.Join(args, " "), code, out.String(), errb.String())
		}
	}
}

// A count written by hand that is no count is shown quoted and escaped,
// and a scale over it asks first: it may lower the role.
func TestScaleOverAHandWrittenCount(t *testing.T) {
	a := consultest.Start(t, consultest.Options{})
	if _, err := a.Client.KV().Put(&api.KVPair{Key: "orchestrate/roles/web/desired", Value: []byte("lots\x1b[2J")}, nil); err != nil {
		t.Fatal(err)
	}
	mustCode(t, cli(t, a, "", "scale", "web", "3"), 2, "scale over a value that is no count, without --yes")
	r := cli(t, a, "", "scale", "web", "3", "--yes")
	mustCode(t, r, 0, "scale over a value that is no count")
	if r.stdout != `desired count of role web: "lots\x1b[2J" (no count) → 3 (set by hand)`+"\n" {
		t.Fatalf("stdout %q", r.stdout)
	}
}
