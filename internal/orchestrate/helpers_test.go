package orchestrate

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hashicorp/consul/api"

	"github.com/jiocloud/orchestrate/internal/consultest"
	"github.com/jiocloud/orchestrate/internal/store"
	"github.com/jiocloud/orchestrate/internal/store/schema"
	"github.com/jiocloud/orchestrate/watch"
)

// result is one Run of the CLI.
type result struct {
	code           int
	stdout, stderr string
}

// cli runs orchestrate against agent a with args, as a user would, with the
// environment pointing at the agent.
func cli(t *testing.T, a *consultest.Agent, stdin string, args ...string) result {
	t.Helper()
	return cliWith(t, a, strings.NewReader(stdin), args...)
}

// cliWith is cli with stdin read from r.
func cliWith(t *testing.T, a *consultest.Agent, stdin io.Reader, args ...string) result {
	t.Helper()
	// t.Setenv is not safe from concurrent goroutines (TestConvergeTwoAtOnce
	// runs two converges at once, a data race under -race); set it only
	// when it changes.
	if os.Getenv("CONSUL_HTTP_ADDR") != a.HTTPAddr {
		t.Setenv("CONSUL_HTTP_ADDR", a.HTTPAddr)
	}
	var out, errb bytes.Buffer
	code := Run(context.Background(), args, IO{Stdin: stdin, Stdout: &out, Stderr: &errb})
	return result{code: code, stdout: out.String(), stderr: errb.String()}
}

// mustCode fails t unless r exited with want, showing r's output.
func mustCode(t *testing.T, r result, want int, what string) {
	t.Helper()
	if r.code != want {
		t.Fatalf("%s: exit %d, want %d\nstdout: %s\nstderr: %s", what, r.code, want, r.stdout, r.stderr)
	}
}

// allKeys lists every key in the agent's KV store.
func allKeys(t *testing.T, c *api.Client) []string {
	t.Helper()
	ks, _, err := c.KV().Keys("", "", nil)
	if err != nil {
		t.Fatal(err)
	}
	return ks
}

// mustStore is a store on agent a's KV under the default prefix.
// kvJSON reads key's JSON value into a T; false when there is no key.
func kvJSON[T any](t *testing.T, c *api.Client, key string) (T, bool) {
	t.Helper()
	var v T
	p, _, err := c.KV().Get(key, nil)
	if err != nil {
		t.Fatal(err)
	}
	if p == nil {
		return v, false
	}
	if err := json.Unmarshal(p.Value, &v); err != nil {
		t.Fatal(err)
	}
	return v, true
}

func mustStore(t *testing.T, a *consultest.Agent) *store.Store {
	t.Helper()
	s, err := store.New(a.Client, schema.DefaultPrefix)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// convergeEnv is one node: a real agent whose node name is the host, the
// stand-in step scripts, and the directories converge uses.
type convergeEnv struct {
	a        *consultest.Agent
	stepDir  string // exit codes, sleeps and the record of what ran
	logDir   string
	hiera    string
	checks   string
	lockFile string
}

// newConvergeEnv starts the agent (node1) and makes the directories;
// STEP_DIR tells the step scripts where to record.
func newConvergeEnv(t *testing.T) *convergeEnv {
	t.Helper()
	e := &convergeEnv{a: consultest.Start(t, consultest.Options{NodeName: "node1"})}
	dir := t.TempDir()
	e.stepDir = filepath.Join(dir, "steps")
	e.logDir = filepath.Join(dir, "log")
	e.hiera = filepath.Join(dir, "services.yaml")
	e.lockFile = filepath.Join(dir, "converge.lock")
	e.checks, _ = filepath.Abs("testdata/converge/checks")
	if err := os.MkdirAll(e.stepDir, 0o755); err != nil {
		t.Fatal(err)
	}
	t.Setenv("STEP_DIR", e.stepDir)
	return e
}

// setExit makes the stand-in step exit with code.
func (e *convergeEnv) setExit(t *testing.T, step, code string) {
	t.Helper()
	if err := os.WriteFile(filepath.Join(e.stepDir, step+".exit"), []byte(code), 0o644); err != nil {
		t.Fatal(err)
	}
}

// ran returns the steps run so far, one "step version" per entry.
func (e *convergeEnv) ran(t *testing.T) []string {
	t.Helper()
	data, err := os.ReadFile(filepath.Join(e.stepDir, "ran"))
	if os.IsNotExist(err) {
		return nil
	}
	if err != nil {
		t.Fatal(err)
	}
	return strings.Split(strings.TrimSpace(string(data)), "\n")
}

// converge runs `orchestrate converge` with the stand-in steps.
func (e *convergeEnv) converge(t *testing.T, extra ...string) result {
	t.Helper()
	step, _ := filepath.Abs("testdata/converge/step.sh")
	args := []string{"converge",
		"--update-cmd", step + " update",
		"--puppet-cmd", step + " puppet",
		"--validate-dir", e.checks,
		"--hiera-data", e.hiera,
		"--log-dir", e.logDir,
		"--lock-file", e.lockFile,
	}
	return cli(t, e.a, "", append(args, extra...)...)
}

// waitCheck waits until the agent's health API shows check id on node1 in
// status with notes containing note. The agent syncs checks to the catalog
// asynchronously (normally within milliseconds), hence the wait.
func (e *convergeEnv) waitCheck(t *testing.T, id, status, note string) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	var last *api.HealthCheck
	for time.Now().Before(deadline) {
		checks, _, err := e.a.Client.Health().Node("node1", nil)
		if err != nil {
			t.Fatal(err)
		}
		for _, c := range checks {
			if c.CheckID == id {
				last = c
			}
		}
		if last != nil && last.Status == status && strings.Contains(last.Notes, note) {
			return
		}
		time.Sleep(50 * time.Millisecond)
	}
	t.Fatalf("check %s on node1 = %+v, want %s with notes containing %q", id, last, status, note)
}

// puppetApply returns the command line of a real `puppet apply` of a
// manifest with detailed exit codes, every Puppet directory under dir (a
// test's own), and extra options.
func puppetApply(puppet, dir, extra string) func(manifest string) string {
	opts := " apply --detailed-exitcodes --color=false --vardir " + dir + "/var --confdir " + dir + "/conf --codedir " + dir +
		"/code --logdir " + dir + "/plog --rundir " + dir + "/run " + extra
	return func(manifest string) string { return puppet + opts + " " + manifest }
}

// rolloutEvent is one line of the stand-in consistent step's events file.
type rolloutEvent struct {
	kind, host, version string
	at                  time.Time
}

// readEvents parses the events file at path (none yet is no events).
func readEvents(t *testing.T, path string) []rolloutEvent {
	t.Helper()
	f, err := os.Open(path)
	if os.IsNotExist(err) {
		return nil
	}
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var out []rolloutEvent
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		fs := strings.Fields(sc.Text())
		if len(fs) != 4 {
			t.Fatalf("events line %q", sc.Text())
		}
		sec, err := strconv.ParseFloat(fs[3], 64)
		if err != nil {
			t.Fatalf("events line %q: %v", sc.Text(), err)
		}
		out = append(out, rolloutEvent{kind: fs[0], host: fs[1], version: fs[2], at: time.Unix(0, int64(sec*1e9))})
	}
	return out
}

// started lists the hosts whose consistent step started for version, with
// how many times.
func started(evs []rolloutEvent, version string) map[string]int {
	out := map[string]int{}
	for _, e := range evs {
		if e.kind == "start" && e.version == version {
			out[e.host]++
		}
	}
	return out
}

// tailString is the last n bytes of s.
func tailString(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[len(s)-n:]
}

// watchConfig runs `orchestrate watch-config` in-process with args.
func watchConfig(t *testing.T, args ...string) result {
	t.Helper()
	var out, errb bytes.Buffer
	code := Run(context.Background(), append([]string{"watch-config"}, args...), IO{Stdin: strings.NewReader(""), Stdout: &out, Stderr: &errb})
	return result{code: code, stdout: out.String(), stderr: errb.String()}
}

var (
	binOnce sync.Once
	binDir  string
	binErr  error
)

// builtBinary returns the path of a binary of this module built once per
// test process (cmd/NAME), as a watch handler runs it.
func builtBinary(t *testing.T, name string) string {
	t.Helper()
	binOnce.Do(func() {
		binDir, binErr = os.MkdirTemp("", "orchestrate-bin-")
		if binErr != nil {
			return
		}
		for _, n := range []string{"hiera-services", "orchestrate"} {
			out, err := exec.Command("go", "build", "-o", filepath.Join(binDir, n), "github.com/jiocloud/orchestrate/cmd/"+n).CombinedOutput()
			if err != nil {
				binErr = fmt.Errorf("go build %s: %v\n%s", n, err, out)
				return
			}
		}
	})
	if binErr != nil {
		t.Fatal(binErr)
	}
	return filepath.Join(binDir, name)
}

// countingWrapper writes a script that appends a line to count and then
// runs bin with its arguments: the watch runs the real binary, with the
// agent's environment, and the test can count the runs.
func countingWrapper(t *testing.T, dir, bin, count string) string {
	t.Helper()
	w := filepath.Join(dir, filepath.Base(bin)+"-counting")
	script := "#!/bin/sh\necho run >> " + count + "\nexec " + bin + " \"$@\"\n"
	if err := os.WriteFile(w, []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	return w
}

// lineCount is the number of lines in the file at path (0 when it does
// not exist).
func lineCount(path string) int {
	data, err := os.ReadFile(path)
	if err != nil {
		return 0
	}
	return strings.Count(string(data), "\n")
}

// generatedWatches runs watch-config with args and returns its watches.
func generatedWatches(t *testing.T, args ...string) []watch.Watch {
	t.Helper()
	r := watchConfig(t, args...)
	mustCode(t, r, 0, "watch-config")
	var cfg struct {
		Watches []watch.Watch `json:"watches"`
	}
	if err := json.Unmarshal([]byte(r.stdout), &cfg); err != nil {
		t.Fatalf("watch-config output: %v\n%s", err, r.stdout)
	}
	return cfg.Watches
}

// agentConfig is the agent configuration (JSON) holding watches ws.
func agentConfig(t *testing.T, ws []watch.Watch) string {
	t.Helper()
	out, err := watch.AgentConfig(ws)
	if err != nil {
		t.Fatal(err)
	}
	return string(out)
}

// fileHas reports whether the file holds every one of the lines.
func fileHas(path string, lines ...string) bool {
	data, err := os.ReadFile(path)
	if err != nil {
		return false
	}
	for _, l := range lines {
		if !strings.Contains(string(data), "\n"+l+"\n") {
			return false
		}
	}
	return true
}
