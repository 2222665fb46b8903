package hiera

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/hashicorp/consul/api"

	"github.com/jiocloud/orchestrate/internal/consultest"
	"github.com/jiocloud/orchestrate/internal/testutil"
	"github.com/jiocloud/orchestrate/watch"
)

// execWorld is a node's files for the --exec tests: its dependencies file
// (mysql), services.yaml, and the log --exec appends to.
type execWorld struct {
	a                *consultest.Agent
	dir, deps, out   string
	runs             string
	lockFile, statef string
}

func newExecWorld(t *testing.T, a *consultest.Agent) *execWorld {
	t.Helper()
	dir := t.TempDir()
	w := &execWorld{a: a, dir: dir, deps: filepath.Join(dir, "deps.yaml"), out: filepath.Join(dir, "hiera", "services.yaml"), runs: filepath.Join(dir, "runs")}
	w.lockFile = filepath.Join(dir, "hiera", ".services.yaml.lock")
	w.statef = filepath.Join(dir, "hiera", ".services.yaml.exec-state")
	if err := os.WriteFile(w.deps, []byte("mysql: {functional: 1}\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	return w
}

// execCmd appends one line per run to w.runs: the mysql addresses the run
// found in services.yaml.
func (w *execWorld) execCmd() string {
	return "grep '^\"services::mysql::address\"' " + w.out + " >> " + w.runs + " || echo none >> " + w.runs
}

func (w *execWorld) count() int { return lineCount(w.runs) }

func lineCount(path string) int {
	data, err := os.ReadFile(path)
	if err != nil {
		return 0
	}
	return strings.Count(string(data), "\n")
}

func (w *execWorld) lastRun() string {
	data, _ := os.ReadFile(w.runs)
	lines := strings.Split(strings.TrimSpace(string(data)), "\n")
	return lines[len(lines)-1]
}

// once runs hiera-services once mode in-process with args after the
// node's own.
func (w *execWorld) once(t *testing.T, args ...string) (int, string) {
	t.Helper()
	return runHS(t, w.a, append([]string{"--out", w.out, "--dependencies", w.deps, "--exec", w.execCmd()}, args...)...)
}

// TestExecRunsOnlyForWhatTheNodeReads: once mode, as a watch handler runs
// it. A node that declares what it reads (mysql, its dependency; memcached
// with --reads; keystone with --expect-service) runs --exec when one of
// those or the dependency state changes, and not when another service
// registers, changes health or leaves, though its file follows every
// change. A node that declares nothing runs it on any change of the file,
// as before.
func TestExecRunsOnlyForWhatTheNodeReads(t *testing.T) {
	a := consultest.Start(t, consultest.Options{})
	register(t, a.Client, inst{node: "db1", nodeAddr: "10.0.0.5", svc: "mysql", port: 3306, status: "passing"})
	register(t, a.Client, inst{node: "web1", nodeAddr: "10.0.1.5", svc: "web", port: 80, status: "passing"})
	declared, whole := newExecWorld(t, a), newExecWorld(t, a)
	for _, step := range []struct {
		what        string
		change      func()
		declared    int // runs in all, this far
		whole       int
		fileHolds   string
		fileLacks   string
		declaredArg []string
	}{
		{what: "the first render creates the file", change: func() {}, declared: 1, whole: 1},
		{what: "no change", change: func() {}, declared: 1, whole: 1},
		{what: "another service registers", change: func() {
			register(t, a.Client, inst{node: "g1", nodeAddr: "10.0.2.1", svc: "glance", port: 9292, status: "passing"})
		}, declared: 1, whole: 2, fileHolds: `"services::glance::address": ["10.0.2.1"]`},
		{what: "another service's check fails", change: func() {
			register(t, a.Client, inst{node: "web1", nodeAddr: "10.0.1.5", svc: "web", port: 80, status: "critical"})
		}, declared: 1, whole: 3, fileHolds: `"healthy_services::web::address": []`},
		{what: "a service read without depending on it registers", change: func() {
			register(t, a.Client, inst{node: "mc1", nodeAddr: "10.0.3.1", svc: "memcached", port: 11211, status: "passing"})
		}, declared: 2, whole: 4},
		{what: "an expected service registers", change: func() {
			register(t, a.Client, inst{node: "ks1", nodeAddr: "10.0.4.1", svc: "keystone", port: 5000, status: "passing"})
		}, declared: 3, whole: 5},
		{what: "the dependency gains an instance", change: func() {
			register(t, a.Client, inst{node: "db2", nodeAddr: "10.0.0.6", svc: "mysql", port: 3306, status: "passing"})
		}, declared: 4, whole: 6},
		{what: "the dependency's check fails (the dependency state changes)", change: func() {
			register(t, a.Client, inst{node: "db1", nodeAddr: "10.0.0.5", svc: "mysql", port: 3306, status: "critical"})
			register(t, a.Client, inst{node: "db2", nodeAddr: "10.0.0.6", svc: "mysql", port: 3306, status: "critical"})
		}, declared: 5, whole: 7, fileHolds: `"orchestrate::dependencies_met": false`},
		{what: "another service leaves", change: func() {
			if _, err := a.Client.Catalog().Deregister(&api.CatalogDeregistration{Node: "g1", ServiceID: "glance"}, nil); err != nil {
				t.Fatal(err)
			}
		}, declared: 5, whole: 8, fileLacks: "glance"},
		{what: "the node declares less (the declaration is part of what it ran on)", change: func() {}, declared: 6, whole: 8,
			declaredArg: []string{"--reads="}},
	} {
		step.change()
		args := step.declaredArg
		if args == nil {
			args = []string{"--reads", "memcached", "--expect-service", "keystone"}
		}
		if code, stderr := declared.once(t, append(args, "--splay", "0")...); code != 0 {
			t.Fatalf("%s: declared node: exit %d\n%s", step.what, code, stderr)
		}
		if code, stderr := whole.once(t, "--splay", "0"); code != 0 {
			t.Fatalf("%s: whole-file node: exit %d\n%s", step.what, code, stderr)
		}
		if got := declared.count(); got != step.declared {
			t.Errorf("%s: the declaring node's --exec ran %d times in all, want %d", step.what, got, step.declared)
		}
		if got := whole.count(); got != step.whole {
			t.Errorf("%s: the whole-file node's --exec ran %d times in all, want %d", step.what, got, step.whole)
		}
		data, _ := os.ReadFile(declared.out)
		if step.fileHolds != "" && !strings.Contains(string(data), step.fileHolds) {
			t.Errorf("%s: the declaring node's file does not hold %s:\n%s", step.what, step.fileHolds, data)
		}
		if step.fileLacks != "" && strings.Contains(string(data), step.fileLacks) {
			t.Errorf("%s: the declaring node's file still holds %s", step.what, step.fileLacks)
		}
	}
}

// TestExecStateUpgradeAndDamage: a node upgraded from a version without
// the record of the last --exec runs it only when its data changes, as
// before; a damaged record runs --exec once (a run too many, never one
// lost) and is rewritten; a record path that is no file is refused before
// anything is written.
func TestExecStateUpgradeAndDamage(t *testing.T) {
	a := consultest.Start(t, consultest.Options{})
	register(t, a.Client, inst{node: "db1", nodeAddr: "10.0.0.5", svc: "mysql", port: 3306, status: "passing"})
	w := newExecWorld(t, a)
	if code, stderr := runHS(t, a, "--out", w.out, "--dependencies", w.deps); code != 0 {
		t.Fatalf("render without --exec: exit %d\n%s", code, stderr)
	}
	if _, err := os.Stat(w.statef); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("a run without --exec wrote %s (%v)", w.statef, err)
	}
	if code, stderr := w.once(t, "--splay", "0", "--reads="); code != 0 || w.count() != 0 {
		t.Fatalf("first run with --exec on unchanged data: exit %d, %d runs, want 0\n%s", code, w.count(), stderr)
	}
	if _, err := os.Stat(w.statef); err != nil {
		t.Fatalf("no record after the first run with --exec: %v", err)
	}
	if err := os.WriteFile(w.statef, []byte("garbage"), 0o644); err != nil {
		t.Fatal(err)
	}
	code, stderr := w.once(t, "--splay", "0", "--reads=")
	if code != 0 || w.count() != 1 || !strings.Contains(stderr, "unreadable") {
		t.Fatalf("damaged record: exit %d, %d runs (want 1), a warning naming it:\n%s", code, w.count(), stderr)
	}
	if code, _ := w.once(t, "--splay", "0", "--reads="); code != 0 || w.count() != 1 {
		t.Fatalf("after the damaged record was rewritten: exit %d, %d runs, want 1", code, w.count())
	}
	if err := os.Remove(w.statef); err != nil {
		t.Fatal(err)
	}
	if err := os.Mkdir(w.statef, 0o755); err != nil {
		t.Fatal(err)
	}
	register(t, a.Client, inst{node: "db2", nodeAddr: "10.0.0.6", svc: "mysql", port: 3306, status: "passing"})
	before, _ := os.ReadFile(w.out)
	code, stderr = w.once(t, "--splay", "0")
	after, _ := os.ReadFile(w.out)
	if code != 2 || !strings.Contains(stderr, w.statef) || string(before) != string(after) || w.count() != 1 {
		t.Fatalf("record path is a directory: exit %d (want 2 naming it), file changed %v, %d runs\n%s", code, string(before) != string(after), w.count(), stderr)
	}
}

// mysqlNode starts an agent whose catalog holds one mysql instance and a
// node depending on it (--reads=) whose --exec ran once.
func mysqlNode(t *testing.T) (*consultest.Agent, *execWorld) {
	t.Helper()
	a := consultest.Start(t, consultest.Options{})
	register(t, a.Client, inst{node: "db1", nodeAddr: "10.0.0.5", svc: "mysql", port: 3306, status: "passing"})
	w := newExecWorld(t, a)
	if code, stderr := w.once(t, "--reads=", "--splay", "0"); code != 0 || w.count() != 1 {
		t.Fatalf("first run: exit %d, %d runs\n%s", code, w.count(), stderr)
	}
	return a, w
}

// pendingHeld reports whether a run holds the lock of the run waiting its
// splay.
func pendingHeld(t *testing.T, lockFile string) bool {
	t.Helper()
	unlock, err := watch.Lock(context.Background(), lockFile+".pending", false)
	if errors.Is(err, watch.ErrLocked) {
		return true
	}
	if err != nil {
		t.Fatal(err)
	}
	unlock()
	return false
}

// startOnce starts the hiera-services binary in once mode, as a watch
// handler would, and returns the process and a channel with its exit code.
func (w *execWorld) startOnce(t *testing.T, args ...string) (*exec.Cmd, *testutil.SyncBuffer, chan int) {
	t.Helper()
	cmd := exec.Command(hieraServicesBinary(t), append([]string{"--consul-addr", w.a.HTTPAddr, "--out", w.out, "--dependencies", w.deps,
		"--exec", w.execCmd(), "--log-level", "debug"}, args...)...)
	logs := &testutil.SyncBuffer{}
	cmd.Stdout, cmd.Stderr = logs, logs
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan int, 1)
	go func() {
		_ = cmd.Wait()
		done <- cmd.ProcessState.ExitCode()
	}()
	t.Cleanup(func() { _ = cmd.Process.Kill() })
	return cmd, logs, done
}

// waitSplaying waits until the started run holds the pending lock (it
// waits its splay); false when it exited first (its delay was short
// enough to run --exec already).
func waitSplaying(t *testing.T, w *execWorld, done chan int, logs *testutil.SyncBuffer) bool {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for !pendingHeld(t, w.lockFile) {
		select {
		case code := <-done:
			done <- code
			if code != 0 {
				t.Fatalf("the run exited %d:\n%s", code, logs.String())
			}
			return false
		default:
		}
		if time.Now().After(deadline) {
			t.Fatalf("the run never waited its splay:\n%s", logs.String())
		}
		time.Sleep(10 * time.Millisecond)
	}
	return true
}

// TestSplayCoalescesIntoOneRun: in once mode (the watch handlers), a run
// that made --exec due waits its splay holding the pending lock; runs for
// changes arriving meanwhile write the file and leave at once, and the
// waiting run renders again and runs --exec once, on the latest data. The
// test holds the file lock while it registers two more instances, with
// the first run still waiting (it holds the pending lock), so they come
// before that run's last render whatever its random delay.
func TestSplayCoalescesIntoOneRun(t *testing.T) {
	a, w := mysqlNode(t)
	for attempt, host := 1, 10; ; attempt, host = attempt+1, host+3 {
		register(t, a.Client, inst{node: fmt.Sprint("db", host), nodeAddr: fmt.Sprint("10.0.0.", host), svc: "mysql", port: 3306, status: "passing"})
		runsBefore := w.count()
		_, logs, done := w.startOnce(t, "--reads=", "--splay", "4s")
		if !waitSplaying(t, w, done, logs) {
			continue // it drew a delay too short to catch; draw again
		}
		unlock, err := watch.Lock(context.Background(), w.lockFile, true)
		if err != nil {
			t.Fatal(err)
		}
		if !pendingHeld(t, w.lockFile) {
			// It ran between the two looks: draw again.
			unlock()
			if attempt == 5 {
				t.Fatal("five runs in a row ran --exec within milliseconds of their start")
			}
			continue
		}
		register(t, a.Client, inst{node: fmt.Sprint("db", host+1), nodeAddr: fmt.Sprint("10.0.0.", host+1), svc: "mysql", port: 3306, status: "passing"})
		register(t, a.Client, inst{node: fmt.Sprint("db", host+2), nodeAddr: fmt.Sprint("10.0.0.", host+2), svc: "mysql", port: 3306, status: "passing"})
		unlock()
		// A handler for those changes: it writes them and leaves --exec
		// to the waiting run (or, if that run already ran it, finds
		// nothing due); it never waits a splay of its own.
		if code, stderr := w.once(t, "--reads=", "--splay", "4s"); code != 0 || strings.Contains(stderr, "waiting the splay") {
			t.Fatalf("a run during another's splay: exit %d (want 0, no splay of its own)\n%s", code, stderr)
		}
		select {
		case code := <-done:
			if code != 0 {
				t.Fatalf("the waiting run exited %d:\n%s", code, logs.String())
			}
		case <-time.After(30 * time.Second):
			t.Fatalf("the waiting run did not finish:\n%s", logs.String())
		}
		if n := w.count() - runsBefore; n != 1 {
			t.Fatalf("three changes ran --exec %d times, want 1:\n%s", n, logs.String())
		}
		for _, h := range []int{host, host + 1, host + 2} {
			if !strings.Contains(w.lastRun(), fmt.Sprintf(`"10.0.0.%d"`, h)) {
				t.Errorf("the run did not see 10.0.0.%d: %s", h, w.lastRun())
			}
		}
		return
	}
}

// TestSplayKilledRunLeavesExecDue: a node restarting (or a handler
// killed) while a run waits its splay loses no --exec: the next run,
// whatever woke it, finds it due and runs it.
func TestSplayKilledRunLeavesExecDue(t *testing.T) {
	a, w := mysqlNode(t)
	for host := 10; ; host++ {
		register(t, a.Client, inst{node: fmt.Sprint("db", host), nodeAddr: fmt.Sprint("10.0.0.", host), svc: "mysql", port: 3306, status: "passing"})
		before := w.count()
		cmd, logs, done := w.startOnce(t, "--reads=", "--splay", "10m")
		if !waitSplaying(t, w, done, logs) {
			continue
		}
		if err := cmd.Process.Signal(syscall.SIGKILL); err != nil {
			t.Fatal(err)
		}
		<-done
		done <- -1
		if w.count() != before {
			continue // it ran just before the kill: try again
		}
		if pendingHeld(t, w.lockFile) {
			t.Fatal("the killed run's pending lock is still held")
		}
		if code, stderr := w.once(t, "--reads=", "--splay", "0"); code != 0 {
			t.Fatalf("the next run: exit %d\n%s", code, stderr)
		}
		if w.count() != before+1 || !strings.Contains(w.lastRun(), fmt.Sprintf(`"10.0.0.%d"`, host)) {
			t.Fatalf("the next run ran --exec %d times (want 1), last on %s", w.count()-before, w.lastRun())
		}
		return
	}
}

// TestWatchExecReadsAndSplay: --watch with a declaration and a splay runs
// --exec once for a change of a dependency, never for another service,
// and, started again after the record of the last --exec was lost, runs
// it once on its first render though the file did not change.
func TestWatchExecReadsAndSplay(t *testing.T) {
	a := consultest.Start(t, consultest.Options{})
	register(t, a.Client, inst{node: "db1", nodeAddr: "10.0.0.5", svc: "mysql", port: 3306, status: "passing"})
	w := newExecWorld(t, a)
	start := func() *watching {
		ctx, cancel := context.WithCancel(context.Background())
		wt := &watching{logs: &testutil.SyncBuffer{}, cancel: cancel, done: make(chan int, 1)}
		go func() {
			wt.done <- Run(ctx, []string{"--consul-addr", a.HTTPAddr, "--out", w.out, "--dependencies", w.deps, "--watch",
				"--reads=", "--splay", "1s", "--exec", w.execCmd(), "--log-level", "debug"}, IO{Stdout: wt.logs, Stderr: wt.logs})
		}()
		return wt
	}
	wt := start()
	testutil.Eventually(t, 15*time.Second, "the first --exec", func() bool { return w.count() == 1 }, wt.logs.String)

	register(t, a.Client, inst{node: "g1", nodeAddr: "10.0.2.1", svc: "glance", port: 9292, status: "passing"})
	testutil.Eventually(t, 15*time.Second, "glance in the file", func() bool {
		data, _ := os.ReadFile(w.out)
		return strings.Contains(string(data), "glance")
	}, wt.logs.String)
	time.Sleep(1500 * time.Millisecond) // a whole splay
	if n := w.count(); n != 1 {
		t.Fatalf("another service registering ran --exec: %d runs in all, want 1\n%s", n, wt.logs.String())
	}

	register(t, a.Client, inst{node: "db2", nodeAddr: "10.0.0.6", svc: "mysql", port: 3306, status: "passing"})
	testutil.Eventually(t, 15*time.Second, "--exec after the dependency changed", func() bool { return w.count() == 2 }, wt.logs.String)
	time.Sleep(1500 * time.Millisecond) // a whole splay: a second run would have started
	if n := w.count(); n != 2 || !strings.Contains(w.lastRun(), `"10.0.0.6"`) {
		t.Fatalf("one change of the dependency: %d runs in all (want 2), last on %s", n, w.lastRun())
	}
	if code := wt.stop(t); code != 0 {
		t.Fatalf("--watch exited %d", code)
	}

	if err := os.WriteFile(w.statef, []byte("lost\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	wt = start()
	defer wt.stop(t)
	testutil.Eventually(t, 15*time.Second, "--exec after a restart that lost the record", func() bool { return w.count() == 3 }, wt.logs.String)
}

// TestSplayRenderStaysBounded: the run that waits its splay renders twice
// (before and after it), one render after the other: on a default agent
// with 600 services it never holds more connections than one render does.
func TestSplayRenderStaysBounded(t *testing.T) {
	a := consultest.Start(t, consultest.Options{})
	for i := range 600 {
		register(t, a.Client, inst{node: fmt.Sprintf("n%d", i%20), nodeAddr: fmt.Sprintf("10.0.1.%d", i%20+1), svc: fmt.Sprintf("svc%03d", i), port: 8000 + i, status: "passing"})
	}
	w := newExecWorld(t, a)
	cmd, logs, done := w.startOnce(t, "--reads=", "--splay", "1s")
	conns := countProcConns(cmd.Process.Pid, a.Ports.HTTP)
	var code int
	select {
	case code = <-done:
	case <-time.After(60 * time.Second):
		t.Fatalf("the run did not finish:\n%s", logs.String())
	}
	peak := conns.stop()
	if code != 0 || w.count() != 1 || !strings.Contains(logs.String(), "waiting the splay") {
		t.Fatalf("exit %d, %d runs of --exec (want 0, 1, after a splay):\n%s", code, w.count(), tail(logs.String(), 3000))
	}
	if peak > onceConns+1 || peak == 0 {
		t.Fatalf("two renders around a splay held %d connections at once, want 1 to %d", peak, onceConns+1)
	}
	t.Logf("once mode with a splay, 600 services, default agent: at most %d connections at once", peak)
}

// TestSplayRenderFailureStillRuns: the agent going away while a run waits
// its splay does not lose the change: the run's second render fails, and
// --exec runs on the data the first one wrote; the exit is 3 (Consul was
// unreachable), the warning says so. The test holds the file lock while it
// stops the agent, with the run still waiting, so the second render comes
// after whatever the delay drawn.
func TestSplayRenderFailureStillRuns(t *testing.T) {
	a, w := mysqlNode(t)
	for host := 10; ; host++ {
		register(t, a.Client, inst{node: fmt.Sprint("db", host), nodeAddr: fmt.Sprint("10.0.0.", host), svc: "mysql", port: 3306, status: "passing"})
		before := w.count()
		_, logs, done := w.startOnce(t, "--reads=", "--splay", "3s")
		if !waitSplaying(t, w, done, logs) {
			continue
		}
		unlock, err := watch.Lock(context.Background(), w.lockFile, true)
		if err != nil {
			t.Fatal(err)
		}
		if !pendingHeld(t, w.lockFile) {
			unlock()
			<-done
			continue
		}
		a.Stop()
		unlock()
		code := <-done
		if code != 3 || w.count() != before+1 || !strings.Contains(w.lastRun(), fmt.Sprintf(`"10.0.0.%d"`, host)) ||
			!strings.Contains(logs.String(), "render after the splay failed") {
			t.Fatalf("exit %d (want 3), %d runs of --exec (want 1), last on %s:\n%s", code, w.count()-before, w.lastRun(), logs.String())
		}
		return
	}
}
