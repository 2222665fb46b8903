package orchestrate

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/jiocloud/orchestrate/internal/logship"
	"github.com/jiocloud/orchestrate/internal/swifttest"
)

// swiftNode is a converge node with a log grant for a real Swift
// container, and the operator's key file.
type swiftNode struct {
	*convergeEnv
	s                     *swifttest.Swift
	c                     swifttest.Container
	grant, spool, keyFile string
	signature             string
}

func newSwiftNode(t *testing.T) *swiftNode {
	t.Helper()
	n := &swiftNode{convergeEnv: newConvergeEnv(t), s: swifttest.Start(t)}
	n.c = n.s.NewContainer(t)
	dir := t.TempDir()
	n.grant, n.spool, n.keyFile = filepath.Join(dir, "log-grant.json"), filepath.Join(dir, "spool"), filepath.Join(dir, "swift.key")
	n.writeGrant(t, "node1", time.Now().Add(time.Hour))
	// Dependencies met: a failing Puppet run is a failure, not pending.
	n.writeHiera(t, true)
	if err := os.WriteFile(n.keyFile, []byte(n.c.Key+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	return n
}

// failingSwiftNode is a swiftNode on which version v2 is desired and
// Puppet fails.
func failingSwiftNode(t *testing.T) *swiftNode {
	t.Helper()
	n := newSwiftNode(t)
	mustCode(t, cli(t, n.a, "", "trigger-update", "v2"), 0, "trigger")
	n.setExit(t, "puppet", "1")
	return n
}

func (n *swiftNode) writeGrant(t *testing.T, host string, exp time.Time) {
	t.Helper()
	g, err := logship.SignGrant([]byte(n.c.Key), n.c.URL, host, exp)
	if err != nil {
		t.Fatal(err)
	}
	if err := logship.WriteGrant(n.grant, g); err != nil {
		t.Fatal(err)
	}
	n.signature = g.Signature
}

func (n *swiftNode) convergeSwift(t *testing.T, extra ...string) result {
	t.Helper()
	return n.converge(t, append([]string{"--log-grant", n.grant, "--log-spool", n.spool, "--upload-timeout", "5s"}, extra...)...)
}

func (n *swiftNode) logs(t *testing.T, args ...string) result {
	t.Helper()
	return cli(t, n.a, "", append(append([]string{"logs"}, args...), "--container-url", n.c.URL, "--temp-url-key-file", n.keyFile)...)
}

// noSecret fails t when any output carries the container's key or the
// grant's signature.
func (n *swiftNode) noSecret(t *testing.T, what string, outs ...string) {
	t.Helper()
	for _, o := range outs {
		if strings.Contains(o, n.c.Key) || strings.Contains(o, n.signature) || strings.Contains(o, "temp_url_sig") {
			t.Fatalf("%s shows a secret:\n%s", what, o)
		}
	}
}

func (n *swiftNode) puppetStatus(t *testing.T) (state, logURL string) {
	t.Helper()
	st, err := mustStore(t, n.a).HostStatus(context.Background(), "node1")
	if err != nil {
		t.Fatal(err)
	}
	return st["puppet"].State, st["puppet"].LogURL
}

// A failing step on a real Consul uploads the run's log to a real Swift
// under the host's prefix; the record's log_url is the object's URL;
// get-failures and status print it; `orchestrate logs` reads it back with
// the operator's key. Nothing prints the key or the grant's signature,
// nor stores it in KV.
func TestConvergeSwiftLogOnFailure(t *testing.T) {
	n := failingSwiftNode(t)
	r := n.convergeSwift(t)
	mustCode(t, r, 1, "converge with Puppet failing")
	n.noSecret(t, "converge", r.stdout, r.stderr)
	state, url := n.puppetStatus(t)
	prefix := n.c.URL + "/node1/v2/puppet/"
	if state != "failed" || !strings.HasPrefix(url, prefix) || !strings.HasSuffix(url, ".log") {
		t.Fatalf("puppet record %s, log_url %s, want failed and a URL under %s", state, url, prefix)
	}
	objs := n.s.List(t, n.c.Name, "node1/")
	if len(objs) != 1 || n.c.URL+"/"+objs[0] != url {
		t.Fatalf("objects %q, want the one the record links (%s)", objs, url)
	}
	if body := string(n.s.Get(t, n.c.Name, objs[0])); !strings.Contains(body, "puppet: output for the run log") {
		t.Fatalf("uploaded log: %q", body)
	}
	r = cli(t, n.a, "", "get-failures")
	mustCode(t, r, 1, "get-failures")
	if !strings.Contains(r.stdout, "\tlog "+url) {
		t.Fatalf("get-failures does not print the log's URL:\n%s", r.stdout)
	}
	t.Setenv("COLUMNS", "300") // the whole URL on one line
	r = cli(t, n.a, "", "status", "--no-catalog", "--host", "node1")
	if !strings.Contains(r.stdout, "    log "+url) {
		t.Fatalf("status does not print the log's URL:\n%s", r.stdout)
	}
	r = n.logs(t, "node1", "--step", "puppet", "--version", "v2")
	mustCode(t, r, 0, "logs node1")
	if !strings.Contains(r.stdout, "puppet: output for the run log") || !strings.Contains(r.stderr, url) {
		t.Fatalf("logs node1: stdout %q stderr %q", r.stdout, r.stderr)
	}
	n.noSecret(t, "logs", r.stdout, r.stderr)
	// The key through the environment.
	t.Setenv(EnvSwiftKeyFile, n.keyFile)
	t.Setenv(EnvSwiftContainer, n.c.URL)
	mustCode(t, cli(t, n.a, "", "logs", "node1"), 0, "logs node1 with the key file from the environment")
	mustCode(t, n.logs(t, "node1", "--step", "validation"), 1, "logs of a step with no log")
	mustCode(t, n.logs(t, "node1", "--version", "v1"), 1, "logs of a version with no log")
	// Every KV value, and the run log on the node, are free of secrets.
	pairs, _, err := n.a.Client.KV().List("", nil)
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range pairs {
		n.noSecret(t, "KV "+p.Key, string(p.Value))
	}
	files, _ := filepath.Glob(filepath.Join(n.logDir, "*"))
	for _, f := range files {
		b, _ := os.ReadFile(f)
		n.noSecret(t, f, string(b))
	}
}

// The operator's reads fail clearly: no key (2), a wrong key (3), a record
// a host pointed at another host's log or another container (2, refused:
// the host writes its own records).
func TestLogsReadRefusals(t *testing.T) {
	n := failingSwiftNode(t)
	mustCode(t, n.convergeSwift(t), 1, "converge with Puppet failing")
	r := cli(t, n.a, "", "logs", "node1", "--container-url", n.c.URL)
	mustCode(t, r, 2, "logs without a key")
	if !strings.Contains(r.stderr, "--temp-url-key-file") {
		t.Fatalf("stderr %q", r.stderr)
	}
	mustCode(t, cli(t, n.a, "", "logs", "node1", "--temp-url-key-file", n.keyFile), 2, "logs without a container")
	wrong := filepath.Join(t.TempDir(), "wrong.key")
	os.WriteFile(wrong, []byte("not-the-key"), 0o600)
	r = cli(t, n.a, "", "logs", "node1", "--container-url", n.c.URL, "--temp-url-key-file", wrong)
	mustCode(t, r, 3, "logs with a wrong key")
	n.noSecret(t, "logs with a wrong key", r.stdout, r.stderr)
	empty := filepath.Join(t.TempDir(), "empty.key")
	os.WriteFile(empty, []byte(" \n"), 0o600)
	mustCode(t, cli(t, n.a, "", "logs", "node1", "--container-url", n.c.URL, "--temp-url-key-file", empty), 2, "logs with an empty key file")
	mustCode(t, n.logs(t, "no/de"), 2, "logs of a host name with a slash")
	mustCode(t, cli(t, n.a, "", "logs", "node1", "--container-url", "ftp://x/v1/a/c", "--temp-url-key-file", n.keyFile), 2, "logs with an ftp container")

	for _, tc := range []struct{ name, url string }{
		{"another host's log", n.c.URL + "/node2/v2/puppet/20260101T000000.000Z.log"},
		{"another container", n.s.StorageURL + "/secrets/node1/v2/puppet/20260101T000000.000Z.log"},
	} {
		mustCode(t, cli(t, n.a, "", "update-status", "puppet", "failed", "--host", "node1", "--log-url", tc.url), 0, "forge "+tc.name)
		r := n.logs(t, "node1")
		mustCode(t, r, 2, "logs with a record linking "+tc.name)
		if !strings.Contains(r.stderr, "refused") {
			t.Fatalf("%s: stderr %q", tc.name, r.stderr)
		}
	}
}

// Swift down: the build failure is recorded and reported at once (the
// record links the log's object before it exists), the log waits in the
// spool; `orchestrate logs` says it is not there yet; once Swift is back
// `orchestrate logs flush` uploads it and the operator reads it.
func TestConvergeSwiftDownSpools(t *testing.T) {
	n := failingSwiftNode(t)
	n.s.StopProxy(t)
	start := time.Now()
	r := n.convergeSwift(t)
	took := time.Since(start)
	mustCode(t, r, 1, "converge with Puppet failing and Swift down")
	if !strings.Contains(r.stdout, "failed") {
		t.Fatalf("converge hides the failure: %q", r.stdout)
	}
	if took > 20*time.Second {
		t.Fatalf("converge took %s with Swift down (upload timeout 5s)", took)
	}
	n.noSecret(t, "converge with Swift down", r.stdout, r.stderr)
	if !strings.Contains(r.stderr, "log upload failed; the log waits in the spool") {
		t.Fatalf("converge does not say the upload failed: %q", r.stderr)
	}
	state, url := n.puppetStatus(t)
	if state != "failed" || !strings.HasPrefix(url, n.c.URL+"/node1/v2/puppet/") {
		t.Fatalf("puppet %s, log_url %s", state, url)
	}
	if e, _, _ := (logship.Spool{Dir: n.spool}).Entries(); len(e) != 1 {
		t.Fatalf("spool holds %d entries, want 1", len(e))
	}
	mustCode(t, n.logs(t, "node1"), 3, "logs with Swift down")
	flush := []string{"logs", "flush", "--host", "node1", "--log-grant", n.grant, "--log-spool", n.spool, "--timeout", "5s"}
	r = cli(t, n.a, "", flush...)
	mustCode(t, r, 3, "logs flush with Swift down")
	n.noSecret(t, "flush with Swift down", r.stdout, r.stderr)
	n.s.StartProxy(t)
	r = n.logs(t, "node1")
	mustCode(t, r, 1, "logs before the flush")
	if !strings.Contains(r.stderr, "not in Swift (yet)") {
		t.Fatalf("stderr %q", r.stderr)
	}
	r = cli(t, n.a, "", flush...)
	mustCode(t, r, 0, "logs flush with Swift back")
	if !strings.Contains(r.stdout, "uploaded 1, left 0") {
		t.Fatalf("flush: %q", r.stdout)
	}
	r = n.logs(t, "node1")
	mustCode(t, r, 0, "logs after the flush")
	if !strings.Contains(r.stdout, "puppet: output for the run log") {
		t.Fatalf("log read back: %q", r.stdout)
	}
	// The next converge run flushes too: spool one more with Swift down,
	// then a run with Swift back (a success, uploading nothing of its own)
	// takes it.
	n.s.StopProxy(t)
	mustCode(t, n.convergeSwift(t), 1, "converge failing again, Swift down")
	n.s.StartProxy(t)
	n.setExit(t, "puppet", "0")
	mustCode(t, n.convergeSwift(t), 0, "converge succeeding, Swift back")
	if e, _, _ := (logship.Spool{Dir: n.spool}).Entries(); len(e) != 0 {
		t.Fatalf("spool holds %d entries after a converge with Swift back", len(e))
	}
	if objs := n.s.List(t, n.c.Name, "node1/"); len(objs) != 2 {
		t.Fatalf("objects %q, want the two failures' logs", objs)
	}
}

// `orchestrate logs push`, for the first boot's failure path: prints the
// URL and uploads; an expired grant spools (exit 3); bad input is 2 and
// writes nothing; --upload-logs always uploads a successful run's log.
func TestLogsPush(t *testing.T) {
	n := newSwiftNode(t)
	file := filepath.Join(t.TempDir(), "cloud-init-output.log")
	os.WriteFile(file, []byte("cloud-init: runcmd failed\n"), 0o644)
	push := func(extra ...string) result {
		return cli(t, n.a, "", append([]string{"logs", "push", "--host", "node1", "--log-grant", n.grant, "--log-spool", n.spool, "--timeout", "5s"}, extra...)...)
	}
	r := push("--step", "provision", file)
	mustCode(t, r, 0, "push")
	url := strings.TrimSpace(r.stdout)
	if !strings.HasPrefix(url, n.c.URL+"/node1/"+unversioned+"/provision/") {
		t.Fatalf("push printed %q", url)
	}
	objs := n.s.List(t, n.c.Name, "node1/")
	if len(objs) != 1 || string(n.s.Get(t, n.c.Name, objs[0])) != "cloud-init: runcmd failed\n" {
		t.Fatalf("objects %q", objs)
	}
	for _, tc := range []struct {
		name string
		args []string
		want string
	}{
		{"no step", []string{file}, "--step is required"},
		{"a step with a slash", []string{"--step", "a/b", file}, "slash"},
		{"no such file", []string{"--step", "provision", file + ".none"}, "no such file"},
		{"a directory", []string{"--step", "provision", t.TempDir()}, "not a regular file"},
		{"another host", []string{"--host", "node2", "--step", "provision", file}, "for host node1, not node2"},
		{"an absurd cap", []string{"--step", "provision", "--max-log-bytes", "10", file}, "--max-log-bytes"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := push(tc.args...)
			mustCode(t, r, 2, tc.name)
			if !strings.Contains(r.stderr, tc.want) {
				t.Fatalf("stderr %q, want %q", r.stderr, tc.want)
			}
		})
	}
	os.WriteFile(n.grant, []byte(`{"container_url":"`+n.c.URL+`","prefix":"node1/","expires":"2030-01-01T00:00:00Z","signature":"`+strings.Repeat("x", 64)+`"}`), 0o600)
	r = push("--step", "provision", file)
	mustCode(t, r, 2, "a grant file with a bad signature")
	n.writeGrant(t, "node1", time.Now().Add(-time.Minute))
	r = push("--step", "provision", file)
	mustCode(t, r, 3, "push with an expired grant")
	if !strings.Contains(r.stderr, "expired") {
		t.Fatalf("stderr %q", r.stderr)
	}
	n.noSecret(t, "push with an expired grant", r.stdout, r.stderr)
	if e, _, _ := (logship.Spool{Dir: n.spool}).Entries(); len(e) != 1 {
		t.Fatalf("spool holds %d, want the expired push's log", len(e))
	}
	// The reaper renews the grant in KV: flush finds it, keeps it in the
	// file and uploads what waited. A grant in KV for another host is
	// ignored.
	other, _ := logship.SignGrant([]byte(n.c.Key), n.c.URL, "node2", time.Now().Add(2*time.Hour))
	otherJSON, _ := json.Marshal(other)
	if err := mustStore(t, n.a).PutLogGrant(context.Background(), "node1", otherJSON); err != nil {
		t.Fatal(err)
	}
	mustCode(t, cli(t, n.a, "", "logs", "flush", "--host", "node1", "--log-grant", n.grant, "--log-spool", n.spool), 3, "flush with node2's grant in node1's key")
	renewed, _ := logship.SignGrant([]byte(n.c.Key), n.c.URL, "node1", time.Now().Add(time.Hour))
	renewedJSON, _ := json.Marshal(renewed)
	if err := mustStore(t, n.a).PutLogGrant(context.Background(), "node1", renewedJSON); err != nil {
		t.Fatal(err)
	}
	r = cli(t, n.a, "", "logs", "flush", "--host", "node1", "--log-grant", n.grant, "--log-spool", n.spool)
	mustCode(t, r, 0, "flush with a grant renewed in KV")
	n.noSecret(t, "flush", r.stdout, r.stderr)
	if g, err := logship.LoadGrant(n.grant); err != nil || !g.Expires.Equal(renewed.Expires) {
		t.Fatalf("grant file after the renewal: %v %v, want the renewed grant", g, err)
	}
	n.signature = renewed.Signature

	mustCode(t, cli(t, n.a, "", "trigger-update", "v3"), 0, "trigger")
	mustCode(t, n.convergeSwift(t, "--upload-logs", "always"), 0, "converge, always uploading")
	if objs := n.s.List(t, n.c.Name, "node1/v3/converge/"); len(objs) != 1 {
		t.Fatalf("objects of the successful run: %q", objs)
	}
	mustCode(t, n.convergeSwift(t, "--upload-logs", "sometimes"), 2, "converge --upload-logs sometimes")
}

// A hung Swift (it accepts the connection and never answers) delays
// nothing but the upload, bounded by --upload-timeout: the failure is
// recorded and reported, the log spooled.
func TestConvergeSwiftHung(t *testing.T) {
	n := failingSwiftNode(t)
	n.s.FreezeProxy(t)
	start := time.Now()
	r := n.converge(t, "--log-grant", n.grant, "--log-spool", n.spool, "--upload-timeout", "2s")
	took := time.Since(start)
	mustCode(t, r, 1, "converge with Puppet failing and Swift hung")
	if state, url := n.puppetStatus(t); state != "failed" || !strings.HasPrefix(url, n.c.URL+"/node1/v2/puppet/") {
		t.Fatalf("puppet %s, log_url %s", state, url)
	}
	if took > 15*time.Second || !strings.Contains(r.stderr, "timed out") {
		t.Fatalf("converge took %s with Swift hung (upload timeout 2s); stderr %s", took, r.stderr)
	}
	n.noSecret(t, "converge with Swift hung", r.stdout, r.stderr)
	if e, _, _ := (logship.Spool{Dir: n.spool}).Entries(); len(e) != 1 {
		t.Fatalf("spool holds %d entries, want 1", len(e))
	}
	n.s.ThawProxy(t)
}
