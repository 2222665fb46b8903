package hiera

import (
	"bytes"
	"context"
	"net"
	"os"
	"path/filepath"
	"reflect"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/consul/api"

	"github.com/jiocloud/orchestrate/internal/consultest"
	"github.com/jiocloud/orchestrate/internal/testutil"
	"github.com/jiocloud/orchestrate/watch"
)

// deadAddr is a loopback address where nothing listens.
func deadAddr(t *testing.T) string {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close()
	return addr
}

// TestUnreachableLeavesFile: with no Consul at the address, once mode exits
// 3 and the existing file keeps its content and mtime; no file is created
// when there was none.
func TestUnreachableLeavesFile(t *testing.T) {
	out := outPath(t)
	os.MkdirAll(filepath.Dir(out), 0o755)
	old := []byte("\"services::mysql::address\": [\"10.0.0.5\"]\n")
	os.WriteFile(out, old, 0o644)
	then := time.Now().Add(-time.Hour).Truncate(time.Second)
	os.Chtimes(out, then, then)
	for _, tc := range []struct {
		name string
		out  string
	}{{"existing file", out}, {"no file", outPath(t)}} {
		t.Run(tc.name, func(t *testing.T) {
			var stderr bytes.Buffer
			start := time.Now()
			code := Run(context.Background(), []string{"--consul-addr", deadAddr(t), "--out", tc.out},
				IO{Stdin: strings.NewReader(""), Stdout: &bytes.Buffer{}, Stderr: &stderr})
			if code != 3 {
				t.Fatalf("exit %d, want 3: %s", code, stderr.String())
			}
			if d := time.Since(start); d > 10*time.Second {
				t.Errorf("took %v to give up on a dead address", d)
			}
			if !strings.Contains(stderr.String(), "connection refused") {
				t.Errorf("stderr does not say why: %s", stderr.String())
			}
		})
	}
	data, _ := os.ReadFile(out)
	fi, _ := os.Stat(out)
	if !bytes.Equal(data, old) || !fi.ModTime().Equal(then) {
		t.Errorf("file changed: %q mtime %v", data, fi.ModTime())
	}
	if _, err := os.Stat(filepath.Join(filepath.Dir(out), "..", "..")); err != nil {
		t.Fatal(err)
	}
}

// TestOverlappingRunsTakeTurns: while another run holds the lock, a once
// run waits and writes nothing; when the lock is released it completes.
func TestOverlappingRunsTakeTurns(t *testing.T) {
	a := consultest.Start(t, consultest.Options{})
	out := outPath(t)
	lock := filepath.Join(t.TempDir(), "hs.lock")
	unlock, err := watch.Lock(context.Background(), lock, false)
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan int, 1)
	go func() {
		code, _ := runHS(t, a, "--out", out, "--lock-file", lock)
		done <- code
	}()
	select {
	case code := <-done:
		t.Fatalf("run finished (exit %d) while another held the lock", code)
	case <-time.After(700 * time.Millisecond):
	}
	if _, err := os.Stat(out); err == nil {
		t.Fatal("file written while another run held the lock")
	}
	unlock()
	select {
	case code := <-done:
		if code != 0 {
			t.Fatalf("exit %d", code)
		}
	case <-time.After(20 * time.Second):
		t.Fatal("run did not finish after the lock was released")
	}
	if _, err := os.Stat(out); err != nil {
		t.Fatal(err)
	}
}

// TestTokenNeverLogged: against an agent with ACLs, a run with
// --token-file and debug logging works and never prints the token.
func TestTokenNeverLogged(t *testing.T) {
	const token = "7b0e6b43-0c54-4d55-a1f8-secret-token"
	a := consultest.Start(t, consultest.Options{ACLToken: token})
	register(t, a.Client, inst{node: "db1", nodeAddr: "10.0.0.5", svc: "mysql", port: 3306})
	tf := filepath.Join(t.TempDir(), "token")
	os.WriteFile(tf, []byte(token+"\n"), 0o600)
	out := outPath(t)
	code, stderr := runHS(t, a, "--out", out, "--token-file", tf, "--exec", "true")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, stderr)
	}
	if strings.Contains(stderr, token) || strings.Contains(stderr, "secret-token") {
		t.Fatalf("token in the log:\n%s", stderr)
	}
	if got := readKeys(t, out)["services::mysql::address"]; !reflect.DeepEqual(got, strs("10.0.0.5")) {
		t.Errorf("services::mysql::address = %v", got)
	}
	// Without the token the agent refuses the catalog: exit 3, and the
	// message names no token.
	code, stderr = runHS(t, a, "--out", out)
	if code != 3 {
		t.Errorf("without token: exit %d, want 3: %s", code, stderr)
	}
}

// TestWatchExecOncePerChange: in --watch mode the --exec command runs once
// per real change of the file, not for renders that change nothing, and a
// failing command does not stop the watch.
func TestWatchExecOncePerChange(t *testing.T) {
	a := consultest.Start(t, consultest.Options{})
	register(t, a.Client, inst{node: "db1", nodeAddr: "10.0.0.5", svc: "mysql", port: 3306, status: "passing"})
	out := outPath(t)
	// The file is already current: starting the watch changes nothing.
	if code, stderr := runHS(t, a, "--out", out); code != 0 {
		t.Fatalf("exit %d: %s", code, stderr)
	}
	counter := filepath.Join(t.TempDir(), "count")
	runs := func() int {
		data, _ := os.ReadFile(counter)
		return strings.Count(string(data), "x")
	}
	ctx, cancel := context.WithCancel(context.Background())
	stderr := &testutil.SyncBuffer{}
	done := make(chan int, 1)
	go func() {
		done <- Run(ctx, []string{"--consul-addr", a.HTTPAddr, "--log-level", "debug", "--out", out, "--watch",
			"--wait", "50ms:300ms", "--exec", "printf x >> " + counter + "; exit 7"},
			IO{Stdout: stderr, Stderr: stderr})
	}()
	defer func() {
		cancel()
		select {
		case code := <-done:
			if code != 0 {
				t.Errorf("watch exited %d after cancel", code)
			}
		case <-time.After(15 * time.Second):
			t.Error("watch did not stop after cancel")
		}
		if t.Failed() {
			t.Logf("log:\n%s", stderr.String())
		}
	}()
	unchanged := func() int { return strings.Count(stderr.String(), "content unchanged") }
	testutil.Eventually(t, 15*time.Second, "the first render", func() bool { return unchanged() >= 1 })
	if n := runs(); n != 0 {
		t.Fatalf("--exec ran %d times with no change", n)
	}

	for change := 1; change <= 2; change++ {
		register(t, a.Client, inst{node: "db" + strconv.Itoa(change+1), nodeAddr: "10.0.0." + strconv.Itoa(5+change), svc: "mysql", port: 3306, status: "passing"})
		testutil.Eventually(t, 15*time.Second, "--exec after change "+strconv.Itoa(change), func() bool { return runs() >= change })
		// A catalog update that does not change the output (service meta)
		// renders but does not run the command.
		before := unchanged()
		_, err := a.Client.Catalog().Register(&api.CatalogRegistration{Node: "db1", Address: "10.0.0.5",
			Service: &api.AgentService{ID: "mysql", Service: "mysql", Port: 3306, Meta: map[string]string{"n": strconv.Itoa(change)}}}, nil)
		if err != nil {
			t.Fatal(err)
		}
		testutil.Eventually(t, 15*time.Second, "a render that changes nothing", func() bool { return unchanged() > before })
		time.Sleep(300 * time.Millisecond) // a wrongly due --exec would have run by now
		if n := runs(); n != change {
			t.Fatalf("after %d changes --exec ran %d times", change, n)
		}
	}
	if !strings.Contains(stderr.String(), "exit_code=7") {
		t.Error("the command's exit code is not reported")
	}
	want := strs("10.0.0.5", "10.0.0.6", "10.0.0.7")
	if got := readKeys(t, out)["services::mysql::address"]; !reflect.DeepEqual(got, want) {
		t.Errorf("services::mysql::address = %v, want %v", got, want)
	}
}

// TestWatchSurvivesConsulLoss: when the agent goes away, --watch keeps the
// last good file, keeps running, and logs the loss once, not per retry.
func TestWatchSurvivesConsulLoss(t *testing.T) {
	a := consultest.Start(t, consultest.Options{})
	register(t, a.Client, inst{node: "db1", nodeAddr: "10.0.0.5", svc: "mysql", port: 3306, status: "passing"})
	out := outPath(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	stderr := &testutil.SyncBuffer{}
	done := make(chan int, 1)
	go func() {
		done <- Run(ctx, []string{"--consul-addr", a.HTTPAddr, "--out", out, "--watch"}, IO{Stdout: stderr, Stderr: stderr})
	}()
	testutil.Eventually(t, 15*time.Second, "the first render", func() bool {
		data, _ := os.ReadFile(out)
		return strings.Contains(string(data), "10.0.0.5")
	})
	good, _ := os.ReadFile(out)
	a.Stop()
	testutil.Eventually(t, 15*time.Second, "the loss to be logged", func() bool { return strings.Contains(stderr.String(), "consul unreachable") })
	time.Sleep(5 * time.Second) // several retries and health polls
	select {
	case code := <-done:
		t.Fatalf("watch exited %d when Consul went away:\n%s", code, stderr.String())
	default:
	}
	if n := strings.Count(stderr.String(), "consul unreachable"); n != 1 {
		t.Errorf("%d lines about the loss, want 1:\n%s", n, stderr.String())
	}
	if now, _ := os.ReadFile(out); !bytes.Equal(now, good) {
		t.Errorf("file changed while Consul was away:\n%s", now)
	}
	cancel()
	select {
	case code := <-done:
		if code != 0 {
			t.Errorf("exit %d after cancel", code)
		}
	case <-time.After(15 * time.Second):
		t.Fatal("watch did not stop")
	}
}

// TestOnceExec: in once mode --exec runs only when the file changed; its
// failure is exit 1 with its exit code in the log. --datacenter names the
// datacenter in the queries and the header.
func TestOnceExec(t *testing.T) {
	a := consultest.Start(t, consultest.Options{})
	register(t, a.Client, inst{node: "db1", nodeAddr: "10.0.0.5", svc: "mysql", port: 3306})
	out := outPath(t)
	counter := filepath.Join(t.TempDir(), "count")
	execCmd := "printf x >> " + counter + "; exit 5"
	code, stderr := runHS(t, a, "--out", out, "--exec", execCmd, "--datacenter", a.Datacenter)
	if code != 1 {
		t.Fatalf("failing --exec after a change: exit %d, want 1: %s", code, stderr)
	}
	if !strings.Contains(stderr, "exit_code=5") {
		t.Errorf("exit code of the command not reported:\n%s", stderr)
	}
	code, stderr = runHS(t, a, "--out", out, "--exec", execCmd, "--datacenter", a.Datacenter)
	if code != 0 {
		t.Fatalf("no change: exit %d: %s", code, stderr)
	}
	if data, _ := os.ReadFile(counter); string(data) != "x" {
		t.Errorf("--exec ran %q times, want once", data)
	}
	data, _ := os.ReadFile(out)
	if !strings.HasPrefix(string(data), "# Generated by hiera-services from the Consul catalog of datacenter "+a.Datacenter+".") {
		t.Errorf("header:\n%s", data)
	}
	if got := readKeys(t, out)["services::mysql::address"]; !reflect.DeepEqual(got, strs("10.0.0.5")) {
		t.Errorf("services::mysql::address = %v", got)
	}
	if code, stderr := runHS(t, a, "--out", out, "--datacenter", "nowhere"); code != 3 {
		t.Errorf("unknown datacenter: exit %d, want 3: %s", code, stderr)
	}
}

// TestServiceSelection: --service and --service-regex select what is
// output; either one selects a service.
func TestServiceSelection(t *testing.T) {
	a := consultest.Start(t, consultest.Options{})
	for _, s := range []string{"mysql", "mysql-backup", "keystone", "glance"} {
		register(t, a.Client, inst{node: "n-" + s, nodeAddr: "10.0.0.1", svc: s, port: 1})
	}
	for _, tc := range []struct {
		name string
		args []string
		want []string
	}{
		{"regex", []string{"--service-regex", "^mysql"}, []string{"mysql", "mysql-backup"}},
		{"names", []string{"--service", "glance", "--service", "keystone"}, []string{"glance", "keystone"}},
		{"both", []string{"--service", "glance", "--service-regex", "^mysql$"}, []string{"glance", "mysql"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			out := outPath(t)
			if code, stderr := runHS(t, a, append([]string{"--out", out}, tc.args...)...); code != 0 {
				t.Fatalf("exit %d: %s", code, stderr)
			}
			var got []string
			for k := range readKeys(t, out) {
				if svc, ok := strings.CutPrefix(k, "services::"); ok && strings.HasSuffix(svc, "::address") {
					got = append(got, strings.TrimSuffix(svc, "::address"))
				}
			}
			sort.Strings(got)
			if !reflect.DeepEqual(got, tc.want) {
				t.Errorf("services %v, want %v", got, tc.want)
			}
		})
	}
}

// TestCustomTemplate: --template replaces the built-in template; yamlQuote
// and hieraData are available to it.
func TestCustomTemplate(t *testing.T) {
	a := consultest.Start(t, consultest.Options{})
	register(t, a.Client, inst{node: "db1", nodeAddr: "10.0.0.5", svc: "my-sql", port: 3306, tagged: map[string]string{"eth0": "a: b"}})
	dir := t.TempDir()
	tmpl := filepath.Join(dir, "custom.ctmpl")
	os.WriteFile(tmpl, []byte(`# custom
{{ range services }}{{ range service .Name "any" }}{{ printf "mine::%s::node" .Name | yamlQuote }}: {{ yamlQuote .Node }}
{{ end }}{{ end -}}
{{ $other := hieraData }}{{ $other.YAML -}}
{{ $h := hieraData }}{{ range services }}{{ if $h.Wants .Name }}{{ $h.Add .Name (service .Name "any") }}{{ end }}{{ end -}}
{{ $h.YAML -}}
`), 0o644)
	out := outPath(t)
	if code, stderr := runHS(t, a, "--out", out, "--template", tmpl); code != 0 {
		t.Fatalf("exit %d: %s", code, stderr)
	}
	got := readKeys(t, out)
	if got["mine::my-sql::node"] != "db1" || !reflect.DeepEqual(got["services::my-sql::eth0"], strs("a: b")) {
		data, _ := os.ReadFile(out)
		t.Errorf("custom template output:\n%s", data)
	}
}

// TestExecWithholdsCredentials: --exec runs without the Consul token or
// OpenStack credentials of hiera-services' environment, unless --pass-env
// names one.
func TestExecWithholdsCredentials(t *testing.T) {
	a := consultest.Start(t, consultest.Options{})
	t.Setenv("CONSUL_HTTP_TOKEN", "env-token-value")
	t.Setenv("OS_PASSWORD", "os-password-value")
	t.Setenv("OS_AUTH_URL", "https://keystone.example:5000/v3")
	t.Setenv("KEEP_ME", "kept")
	dir := t.TempDir()
	out := outPath(t)
	for i, tc := range []struct {
		pass          []string
		want, notWant []string
	}{
		{nil, []string{"KEEP_ME=kept"}, []string{"CONSUL_HTTP_TOKEN", "env-token-value", "OS_PASSWORD", "os-password-value", "OS_AUTH_URL"}},
		{[]string{"OS_AUTH_URL"}, []string{"KEEP_ME=kept", "OS_AUTH_URL=https://keystone.example:5000/v3"}, []string{"env-token-value", "os-password-value"}},
	} {
		// A new service each time, so the file changes and --exec runs.
		register(t, a.Client, inst{node: "n" + strconv.Itoa(i), nodeAddr: "10.0.0.5", svc: "svc" + strconv.Itoa(i), port: 80})
		envFile := filepath.Join(dir, "env"+strconv.Itoa(i))
		args := []string{"--out", out, "--exec", "env > " + envFile}
		for _, p := range tc.pass {
			args = append(args, "--pass-env", p)
		}
		if code, stderr := runHS(t, a, args...); code != 0 {
			t.Fatalf("exit %d: %s", code, stderr)
		}
		data, err := os.ReadFile(envFile)
		if err != nil {
			t.Fatal(err)
		}
		env := "\n" + string(data)
		for _, w := range tc.want {
			if !strings.Contains(env, "\n"+w+"\n") {
				t.Errorf("pass %q: %q missing from --exec's environment", tc.pass, w)
			}
		}
		for _, n := range tc.notWant {
			if strings.Contains(env, n) {
				t.Errorf("pass %q: --exec inherited %q", tc.pass, n)
			}
		}
	}
	if code, stderr := runHS(t, a, "--out", out, "--pass-env", "OS_CLOUD"); code != 2 || !strings.Contains(stderr, "--pass-env") {
		t.Errorf("--pass-env without --exec: exit %d, want 2 naming the flag: %s", code, stderr)
	}
}
