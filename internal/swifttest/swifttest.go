// Package swifttest runs a real OpenStack Swift for tests: Debian's
// swift-proxy, swift-account, swift-container and swift-object (2.30) with
// memcached, started by scripts/swift/up.sh on free 127.0.0.1 ports under a
// temporary directory, with tempauth and tempurl in the proxy's pipeline and
// a one-replica ring. The first Start in a test process starts it (about 7
// s on an idle machine, 2 cores); every later Start in the process shares it.
// It stops, and its directory goes, within a second of the test process
// ending, however it ends (the script's watchdog watches the process).
//
// When the Swift packages are not installed, Start skips the test, except
// under CI=true, where it fails: CI must never count a skipped Swift test as
// passing. scripts/install-test-deps.sh installs them.
package swifttest

import (
	"bufio"
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	mathrand "math/rand/v2"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/jiocloud/orchestrate/internal/testutil"
)

// Swift is the running store: where it answers and the test account.
type Swift struct {
	// AuthURL is tempauth's v1.0 endpoint; StorageURL the test account's
	// URL (http://127.0.0.1:PORT/v1/AUTH_test); Account its name.
	AuthURL, StorageURL, Account string
	// User and Key log in to tempauth (X-Auth-User, X-Auth-Key). Key is a
	// test-only local secret: never log it.
	User, Key string
	// Dir holds everything the store writes (logs in Dir/log).
	Dir string
	// StartTime is how long starting it took.
	StartTime time.Duration

	root string
}

var (
	once    sync.Once
	shared  *Swift
	initErr error
	skipMsg string
)

// binaries are the commands scripts/swift/up.sh needs.
var binaries = []string{"swift-proxy-server", "swift-account-server", "swift-container-server",
	"swift-object-server", "swift-ring-builder", "memcached"}

// Start returns the process's Swift, starting it on the first call. It
// skips the test when Swift is not installed (fails under CI=true).
func Start(t testing.TB) *Swift {
	t.Helper()
	once.Do(func() { shared, skipMsg, initErr = start() })
	if skipMsg != "" {
		if os.Getenv("CI") == "true" {
			t.Fatalf("real Swift unavailable under CI=true: %s", skipMsg)
		}
		t.Skipf("real Swift unavailable (run scripts/install-test-deps.sh): %s", skipMsg)
	}
	if initErr != nil {
		t.Fatalf("swifttest: %v", initErr)
	}
	return shared
}

func start() (s *Swift, skip string, err error) {
	for _, b := range binaries {
		if _, err := exec.LookPath(b); err != nil {
			return nil, b + " is not installed", nil
		}
	}
	root, err := testutil.RepoRoot()
	if err != nil {
		return nil, "", err
	}
	// A port found free can be taken before a server binds it: try again
	// with fresh ports (and a fresh directory), as consultest does.
	var errs []error
	for attempt := 0; attempt < 3; attempt++ {
		s, err := startOnce(root)
		if err == nil {
			return s, "", nil
		}
		errs = append(errs, err)
	}
	return nil, "", errors.Join(errs...)
}

func startOnce(root string) (*Swift, error) {
	dir, err := os.MkdirTemp("", "orchestrate-swift-")
	if err != nil {
		return nil, err
	}
	ports, err := freePorts(5)
	if err != nil {
		return nil, err
	}
	begin := time.Now()
	cmd := exec.Command(filepath.Join(root, "scripts", "swift", "up.sh"))
	cmd.Env = append(os.Environ(), "SWIFT_E2E_DIR="+dir,
		"SWIFT_E2E_PROXY_PORT="+strconv.Itoa(ports[0]), "SWIFT_E2E_ACCOUNT_PORT="+strconv.Itoa(ports[1]),
		"SWIFT_E2E_CONTAINER_PORT="+strconv.Itoa(ports[2]), "SWIFT_E2E_OBJECT_PORT="+strconv.Itoa(ports[3]),
		"SWIFT_E2E_MEMCACHE_PORT="+strconv.Itoa(ports[4]), "SWIFT_E2E_PARENT_PID="+strconv.Itoa(os.Getpid()))
	if out, err := cmd.CombinedOutput(); err != nil {
		// Stop what did start; the watchdog removes nothing it did not see.
		stop := exec.Command(filepath.Join(root, "scripts", "swift", "stop.sh"), "--purge")
		stop.Env = append(os.Environ(), "SWIFT_E2E_DIR="+dir)
		stop.Run()
		return nil, fmt.Errorf("scripts/swift/up.sh (ports %v): %w\n%s", ports, err, out)
	}
	env, err := parseEnv(filepath.Join(dir, "env"))
	if err != nil {
		return nil, err
	}
	s := &Swift{AuthURL: env["SWIFT_E2E_AUTH_URL"], StorageURL: env["SWIFT_E2E_STORAGE_URL"],
		Account: env["SWIFT_E2E_ACCOUNT"], User: env["SWIFT_E2E_USER"], Key: env["SWIFT_E2E_KEY"],
		Dir: dir, StartTime: time.Since(begin), root: root}
	for k, v := range map[string]string{"SWIFT_E2E_AUTH_URL": s.AuthURL, "SWIFT_E2E_STORAGE_URL": s.StorageURL,
		"SWIFT_E2E_ACCOUNT": s.Account, "SWIFT_E2E_USER": s.User, "SWIFT_E2E_KEY": s.Key} {
		if v == "" {
			return nil, fmt.Errorf("%s/env: %s missing", dir, k)
		}
	}
	return s, nil
}

// parseEnv reads the KEY=value lines up.sh writes.
func parseEnv(path string) (map[string]string, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	env := map[string]string{}
	sc := bufio.NewScanner(bytes.NewReader(data))
	for sc.Scan() {
		if k, v, ok := strings.Cut(sc.Text(), "="); ok {
			env[k] = v
		}
	}
	return env, sc.Err()
}

// freePorts returns n distinct free TCP ports on 127.0.0.1, drawn at
// random from 20000-32767: below Linux's ephemeral range (32768-60999), so
// no outgoing connection (Consul's, the tests' own) takes one between now
// and the server's bind, and away from scripts/nova's and scripts/swift's
// fixed ports (24700-24809).
func freePorts(n int) ([]int, error) {
	var ports []int
	seen := map[int]bool{}
	for tries := 0; len(ports) < n; tries++ {
		if tries > 1000 {
			return nil, errors.New("find a free port: none free in 20000-32767")
		}
		p := 20000 + mathrand.IntN(12768)
		if seen[p] || (p >= 24700 && p < 24810) {
			continue
		}
		seen[p] = true
		l, err := net.Listen("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(p)))
		if err != nil {
			continue
		}
		l.Close()
		ports = append(ports, p)
	}
	return ports, nil
}

// Token logs in to tempauth and returns a token for the test account.
func (s *Swift) Token(ctx context.Context) (string, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, s.AuthURL, nil)
	if err != nil {
		return "", err
	}
	req.Header.Set("X-Auth-User", s.User)
	req.Header.Set("X-Auth-Key", s.Key)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return "", fmt.Errorf("tempauth: %w", err)
	}
	defer resp.Body.Close()
	io.Copy(io.Discard, resp.Body)
	tok := resp.Header.Get("X-Auth-Token")
	if resp.StatusCode != http.StatusOK || tok == "" {
		return "", fmt.Errorf("tempauth: %s", resp.Status)
	}
	return tok, nil
}

// Do sends an authenticated request for path under the account (""
// for the account itself) and returns the status and body.
func (s *Swift) Do(ctx context.Context, method, path string, hdr http.Header, body []byte) (int, []byte, error) {
	tok, err := s.Token(ctx)
	if err != nil {
		return 0, nil, err
	}
	u := s.StorageURL
	if path != "" {
		u += "/" + path
	}
	req, err := http.NewRequestWithContext(ctx, method, u, bytes.NewReader(body))
	if err != nil {
		return 0, nil, err
	}
	for k, v := range hdr {
		req.Header[k] = v
	}
	req.Header.Set("X-Auth-Token", tok)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return 0, nil, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	return resp.StatusCode, b, err
}

// Container is one test's container and its temp URL key.
type Container struct {
	// Name is the container's name; URL its full URL.
	Name, URL string
	// Key is the container's temp URL key (X-Container-Meta-Temp-URL-Key):
	// a test-only secret.
	Key string
}

// NewContainer creates a container of the test's own, with a random temp
// URL key, and deletes it (objects first) when the test ends.
func (s *Swift) NewContainer(t testing.TB) Container {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	c := Container{Name: "logs-" + randomHex(6), Key: randomHex(16)}
	c.URL = s.StorageURL + "/" + c.Name
	code, body, err := s.Do(ctx, http.MethodPut, c.Name, http.Header{"X-Container-Meta-Temp-Url-Key": {c.Key}}, nil)
	if err != nil || code/100 != 2 {
		t.Fatalf("swifttest: create container %s: %d %s %v", c.Name, code, body, err)
	}
	t.Cleanup(func() { s.removeContainer(t, c.Name) })
	return c
}

func (s *Swift) removeContainer(t testing.TB, name string) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for _, o := range s.List(t, name, "") {
		s.Do(ctx, http.MethodDelete, name+"/"+o, nil, nil)
	}
	if code, body, err := s.Do(ctx, http.MethodDelete, name, nil, nil); err != nil || (code/100 != 2 && code != http.StatusNotFound) {
		t.Logf("swifttest: delete container %s: %d %s %v", name, code, body, err)
	}
}

// List returns the names of the objects in container under prefix.
func (s *Swift) List(t testing.TB, container, prefix string) []string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	code, body, err := s.Do(ctx, http.MethodGet, container+"?format=plain&prefix="+prefix, nil, nil)
	if err != nil || (code/100 != 2) {
		t.Fatalf("swifttest: list %s: %d %s %v", container, code, body, err)
	}
	var out []string
	for _, l := range strings.Split(strings.TrimSpace(string(body)), "\n") {
		if l != "" {
			out = append(out, l)
		}
	}
	return out
}

// Get returns an object's body with the account's credentials (not a
// temp URL), failing the test on anything but 200.
func (s *Swift) Get(t testing.TB, container, object string) []byte {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	code, body, err := s.Do(ctx, http.MethodGet, container+"/"+object, nil, nil)
	if err != nil || code != http.StatusOK {
		t.Fatalf("swifttest: get %s/%s: %d %v", container, object, code, err)
	}
	return body
}

// FreezeProxy stops the proxy's process (SIGSTOP) without closing its
// socket: the kernel still accepts connections, nothing answers, as with
// a hung Swift. It thaws (SIGCONT) when the test ends, or by ThawProxy.
func (s *Swift) FreezeProxy(t testing.TB) {
	t.Helper()
	pid := s.proxyPid(t)
	if err := syscall.Kill(-pid, syscall.SIGSTOP); err != nil {
		t.Fatalf("swifttest: freeze the proxy: %v", err)
	}
	t.Cleanup(func() { syscall.Kill(-pid, syscall.SIGCONT) })
}

// ThawProxy resumes a frozen proxy.
func (s *Swift) ThawProxy(t testing.TB) {
	t.Helper()
	syscall.Kill(-s.proxyPid(t), syscall.SIGCONT)
}

func (s *Swift) proxyPid(t testing.TB) int {
	t.Helper()
	data, err := os.ReadFile(filepath.Join(s.Dir, "run", "proxy.pid"))
	if err != nil {
		t.Fatalf("swifttest: proxy pid: %v", err)
	}
	pid, err := strconv.Atoi(strings.TrimSpace(string(data)))
	if err != nil || pid <= 1 {
		t.Fatalf("swifttest: proxy pid %q", data)
	}
	return pid
}

// StopProxy stops the proxy server (the account, container and object
// servers keep running), so clients meet a Swift that is down; the proxy
// is started again when the test ends, or by StartProxy. Tests that use it
// must not run in parallel with other tests of the process's Swift.
func (s *Swift) StopProxy(t testing.TB) {
	t.Helper()
	pid := s.proxyPid(t)
	syscall.Kill(-pid, syscall.SIGTERM)
	deadline := time.Now().Add(15 * time.Second)
	for syscall.Kill(-pid, 0) == nil {
		if time.Now().After(deadline) {
			syscall.Kill(-pid, syscall.SIGKILL)
		}
		time.Sleep(50 * time.Millisecond)
	}
	t.Cleanup(func() { s.StartProxy(t) })
}

// StartProxy starts the proxy again after StopProxy (up.sh starts only
// what is not running) and waits until it answers.
func (s *Swift) StartProxy(t testing.TB) {
	t.Helper()
	u, _ := strings.CutSuffix(s.AuthURL, "/auth/v1.0")
	if resp, err := http.Get(u + "/healthcheck"); err == nil {
		resp.Body.Close()
		return
	}
	port := u[strings.LastIndex(u, ":")+1:]
	cmd := exec.Command(filepath.Join(s.root, "scripts", "swift", "up.sh"))
	cmd.Env = append(os.Environ(), "SWIFT_E2E_DIR="+s.Dir, "SWIFT_E2E_PROXY_PORT="+port)
	conf, err := os.ReadFile(filepath.Join(s.Dir, "configured"))
	if err != nil {
		t.Fatalf("swifttest: %v", err)
	}
	// The other ports and the proxy's address (up.sh: "PROXY ACCOUNT
	// CONTAINER OBJECT MEMCACHE HOST") are read back from the
	// configuration up.sh wrote.
	p := strings.Fields(string(conf))
	if len(p) != 6 {
		t.Fatalf("swifttest: %s/configured: %q", s.Dir, conf)
	}
	cmd.Env = append(cmd.Env, "SWIFT_E2E_ACCOUNT_PORT="+p[1], "SWIFT_E2E_CONTAINER_PORT="+p[2],
		"SWIFT_E2E_OBJECT_PORT="+p[3], "SWIFT_E2E_MEMCACHE_PORT="+p[4], "SWIFT_E2E_HOST="+p[5])
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("swifttest: restart the proxy: %v\n%s", err, out)
	}
}

func randomHex(n int) string {
	b := make([]byte, n)
	if _, err := rand.Read(b); err != nil {
		panic(err) // crypto/rand never fails on Linux
	}
	return hex.EncodeToString(b)
}
