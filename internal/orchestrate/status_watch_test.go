package orchestrate

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/consul/api"

	"github.com/jiocloud/orchestrate/internal/testutil"
)

// tmuxPane is one detached tmux session on a private socket, 80 x 30.
type tmuxPane struct {
	t    *testing.T
	tmux string
	sock string
}

// startTmux runs command in a new detached 80 x 30 session on a socket
// of the test's own; the server is killed at the end.
func startTmux(t *testing.T, command string) *tmuxPane {
	t.Helper()
	p := &tmuxPane{t: t, tmux: testutil.RequireTool(t, "tmux", "tmux"), sock: filepath.Join(t.TempDir(), "tmux.sock")}
	t.Cleanup(func() { p.run("kill-server") })
	if out, err := p.run("new-session", "-d", "-x", "80", "-y", "30", "-s", "status", command); err != nil {
		t.Fatalf("tmux new-session: %v\n%s", err, out)
	}
	if out, err := p.run("set-option", "-t", "status", "remain-on-exit", "on"); err != nil {
		t.Fatalf("tmux set-option: %v\n%s", err, out)
	}
	return p
}

func (p *tmuxPane) run(args ...string) (string, error) {
	cmd := exec.Command(p.tmux, append([]string{"-S", p.sock}, args...)...)
	cmd.Env = append(os.Environ(), "TMUX=")
	out, err := cmd.CombinedOutput()
	return string(out), err
}

// screen is what the pane shows now.
func (p *tmuxPane) screen() string {
	out, err := p.run("capture-pane", "-p", "-t", "status")
	if err != nil {
		p.t.Fatalf("tmux capture-pane: %v\n%s", err, out)
	}
	return out
}

// waitFor waits until the pane shows want, within limit, and says how
// long it took.
func (p *tmuxPane) waitFor(want string, limit time.Duration) time.Duration {
	p.t.Helper()
	var last string
	return testutil.Eventually(p.t, limit, "the pane shows "+want, func() bool {
		last = p.screen()
		return strings.Contains(last, want)
	}, func() string { return "the pane:\n" + last })
}

// status --watch in a real terminal (tmux, 80 columns): the screen
// follows a check going critical and a change of a desired count within
// seconds, says so while Consul is away and redraws when it is back, and
// ends with exit 0 on ^C.
func TestStatusWatchInTmux(t *testing.T) {
	c := healthyCloud(t)
	c.publish()
	bin := builtBinary(t, "orchestrate")
	p := startTmux(t, fmt.Sprintf("env CONSUL_HTTP_ADDR=%s %s status --watch", c.a.HTTPAddr, bin))
	p.waitFor("healthy: db 3/3, lb 2/2, web 3/3", 20*time.Second)

	c.check("web2", "web", api.HealthCritical)
	if took := p.waitFor("critical checks on 1 host", 5*time.Second); took > 3*time.Second {
		t.Errorf("the screen took %s to show a critical check", took)
	}
	if s := p.screen(); !strings.Contains(s, "checks: web2 web answers critical") || strings.Count(s, "dc1 · desired version v42") != 1 {
		t.Fatalf("not one screen, redrawn over the last:\n%s", s)
	}
	mustCode(t, cli(t, c.a, "", "scale", "db", "4"), 0, "scale db 4")
	p.waitFor("db: serving 3/4", 5*time.Second)
	for i, line := range strings.Split(p.screen(), "\n") {
		if n := len([]rune(line)); n > 80 {
			t.Errorf("line %d is %d columns: %q", i+1, n, line)
		}
	}

	// Consul goes away for a while: a line says so over the last screen;
	// when it is back (a dev agent comes back empty), the screen is
	// drawn again from what it holds, without the line.
	restarted := make(chan error, 1)
	go func() { restarted <- c.a.Restart(context.Background(), 4*time.Second) }()
	p.waitFor("Consul is not answering", 4*time.Second)
	if s := p.screen(); !strings.Contains(s, "db: serving 3/4") {
		t.Errorf("the last screen is gone while Consul is down:\n%s", s)
	}
	if err := <-restarted; err != nil {
		t.Fatal(err)
	}
	var last string
	testutil.Eventually(t, 20*time.Second, "the screen back from Consul, without the line", func() bool {
		last = p.screen()
		return strings.Contains(last, "desired version (none set)") && !strings.Contains(last, "not answering")
	}, func() string { return last })
	if out, err := p.run("send-keys", "-t", "status", "C-c"); err != nil {
		t.Fatalf("tmux send-keys: %v\n%s", err, out)
	}
	// The pane's state and screen are printed if it does not end so:
	// whether it still runs, or ended by a signal or with another code.
	var state string
	testutil.Eventually(t, 20*time.Second, "status --watch ends on ^C with exit 0", func() bool {
		state, _ = p.run("display-message", "-p", "-t", "status", "#{pane_dead} #{pane_dead_status} #{pane_dead_signal}")
		f := strings.Fields(state + " - -")
		return f[0] == "1" && f[1] == "0"
	}, func() string { return "pane dead, status, signal: " + state + "\n" + p.screen() })
}

// Not on a terminal, each new screen follows a separator line; a burst
// of changes redraws at most once a second; the end of ctx ends the
// watch with exit 0.
func TestStatusWatchNotATerminal(t *testing.T) {
	c := healthyCloud(t)
	c.publish()
	t.Setenv("COLUMNS", "80")
	t.Setenv("CONSUL_HTTP_ADDR", c.a.HTTPAddr)
	ctx, cancel := context.WithCancel(withClock(context.Background(), func() time.Time { return statusNow }))
	defer cancel()
	var out testutil.SyncBuffer
	done := make(chan int)
	go func() {
		done <- Run(ctx, []string{"status", "--watch"}, IO{Stdin: strings.NewReader(""), Stdout: &out, Stderr: &out})
	}()
	testutil.Eventually(t, 10*time.Second, "the first screen", func() bool { return strings.Contains(out.String(), "healthy:") })
	start := time.Now()
	for i := range 30 {
		if err := c.st.SetDesired(context.Background(), "lb", 2+i%2); err != nil {
			t.Fatal(err)
		}
	}
	burst := time.Since(start)
	time.Sleep(1500 * time.Millisecond)
	screens := strings.Count(out.String(), "dc1 · desired version")
	if max := 2 + int((burst+1500*time.Millisecond)/time.Second); screens < 2 || screens > max {
		t.Errorf("%d screens for 30 changes in %s, want 2 to %d:\n%s", screens, burst, max, out.String())
	}
	if got := strings.Count(out.String(), "\n--- "); got != screens-1 {
		t.Errorf("%d separator lines for %d screens:\n%s", got, screens, out.String())
	}
	if strings.Contains(out.String(), clearScreen) {
		t.Errorf("escape sequences written to a file:\n%q", out.String())
	}
	cancel()
	select {
	case code := <-done:
		if code != 0 {
			t.Fatalf("status --watch ended with exit %d", code)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("status --watch did not end with its context")
	}
}

// --watch --json is a stream of documents, one per change, nothing
// between them.
func TestStatusWatchJSON(t *testing.T) {
	c := healthyCloud(t)
	c.publish()
	t.Setenv("CONSUL_HTTP_ADDR", c.a.HTTPAddr)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var out, errb testutil.SyncBuffer
	done := make(chan int)
	go func() {
		done <- Run(ctx, []string{"status", "--watch", "--json"}, IO{Stdin: strings.NewReader(""), Stdout: &out, Stderr: &errb})
	}()
	testutil.Eventually(t, 10*time.Second, "the first document", func() bool { return strings.Contains(out.String(), `"schema": 1`) })
	if err := c.st.SetDesired(context.Background(), "db", 4); err != nil {
		t.Fatal(err)
	}
	testutil.Eventually(t, 10*time.Second, "a second document", func() bool { return strings.Count(out.String(), "\n}\n") == 2 })
	cancel()
	if code := <-done; code != 0 {
		t.Fatalf("exit %d: %s", code, errb.String())
	}
	dec := json.NewDecoder(strings.NewReader(out.String()))
	var docs []statusReport
	for dec.More() {
		var rep statusReport
		if err := dec.Decode(&rep); err != nil {
			t.Fatalf("document %d: %v\n%s", len(docs)+1, err, out.String())
		}
		docs = append(docs, rep)
	}
	if len(docs) != 2 || docs[0].Roles[0].Desired != 3 || docs[1].Roles[0].Name != "db" || docs[1].Roles[0].Desired != 4 {
		t.Fatalf("documents %+v", docs)
	}
}
