// Package swiftlab runs the lab's Swift: the failure-log store of the
// lab's cloud (docs/logs.md), scripts/swift with its proxy on the bridge's
// host address, so that the containers' converge runs upload to it and the
// reapers sign their grants for it, and one container for the logs with a
// temp URL key of its own.
package swiftlab

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/netip"
	"os"
	"path/filepath"
	"strconv"
	"time"

	"github.com/jiocloud/orchestrate/lab/internal/labenv"
)

// PortBase is the lab Swift's SWIFT_E2E_PORT_BASE: beside the lab Nova's
// 24800 block, apart from the tests' free ports and scripts/swift's
// default 24720.
const PortBase = 24860

// Container is the lab's log container.
const Container = "lab-logs"

// Options name an instance.
type Options struct {
	// Dir is its SWIFT_E2E_DIR (absolute).
	Dir string
	// Host is its SWIFT_E2E_HOST: the proxy's address (the lab: the
	// bridge's 198.18.0.1).
	Host netip.Addr
	// Scripts is the scripts/swift directory of the repository.
	Scripts string
	// Log gets one line per change; nil discards.
	Log *slog.Logger
}

// Store is a running instance with the lab's log container.
type Store struct {
	// ContainerURL is the log container's URL, what reaper.yaml's
	// logs.container_url and `orchestrate logs --container-url` take.
	ContainerURL string
	// KeyFile holds the container's temp URL key (mode 0600): what
	// logs.temp_url_key_file and `orchestrate logs --temp-url-key-file`
	// read.
	KeyFile string

	opts Options
}

// Up starts the instance (scripts/swift/up.sh, idempotent), then makes
// the log container with a temp URL key, new at every Up, kept in
// Dir/temp-url.key.
func Up(ctx context.Context, o Options) (*Store, error) {
	if o.Log == nil {
		o.Log = slog.New(slog.DiscardHandler)
	}
	if !filepath.IsAbs(o.Dir) || !o.Host.Is4() {
		return nil, fmt.Errorf("swiftlab: want an absolute dir (got %q) and an IPv4 host (got %s)", o.Dir, o.Host)
	}
	if err := o.script(ctx, "up.sh"); err != nil {
		return nil, err
	}
	env, err := labenv.ReadEnvFile(filepath.Join(o.Dir, "env"), "SWIFT_E2E_AUTH_URL", "SWIFT_E2E_STORAGE_URL", "SWIFT_E2E_USER", "SWIFT_E2E_KEY")
	if err != nil {
		return nil, fmt.Errorf("swiftlab: %w", err)
	}
	raw := make([]byte, 16)
	if _, err := rand.Read(raw); err != nil {
		return nil, err
	}
	key := hex.EncodeToString(raw)
	s := &Store{ContainerURL: env["SWIFT_E2E_STORAGE_URL"] + "/" + Container, KeyFile: filepath.Join(o.Dir, "temp-url.key"), opts: o}
	if err := os.WriteFile(s.KeyFile, []byte(key+"\n"), 0o600); err != nil {
		return nil, fmt.Errorf("swiftlab: %w", err)
	}
	tok, err := token(ctx, env)
	if err != nil {
		return nil, err
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPut, s.ContainerURL, nil)
	if err != nil {
		return nil, err
	}
	req.Header.Set("X-Auth-Token", tok)
	req.Header.Set("X-Container-Meta-Temp-Url-Key", key)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return nil, fmt.Errorf("swiftlab: create %s: %w", Container, err)
	}
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	if resp.StatusCode/100 != 2 {
		return nil, fmt.Errorf("swiftlab: create %s: %s", Container, resp.Status)
	}
	o.Log.Info("lab swift up", "dir", o.Dir, "container", s.ContainerURL)
	return s, nil
}

// token logs in to tempauth as the env file's user.
func token(ctx context.Context, env map[string]string) (string, error) {
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, env["SWIFT_E2E_AUTH_URL"], nil)
	if err != nil {
		return "", fmt.Errorf("swiftlab: tempauth: %w", err)
	}
	req.Header.Set("X-Auth-User", env["SWIFT_E2E_USER"])
	req.Header.Set("X-Auth-Key", env["SWIFT_E2E_KEY"])
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return "", fmt.Errorf("swiftlab: tempauth: %w", err)
	}
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	tok := resp.Header.Get("X-Auth-Token")
	if resp.StatusCode != http.StatusOK || tok == "" {
		return "", fmt.Errorf("swiftlab: tempauth: %s", resp.Status)
	}
	return tok, nil
}

// Down stops the instance's daemons by PID, keeping its data.
func (s *Store) Down(ctx context.Context) error { return Stop(ctx, s.opts) }

// Stop stops the instance of o.Dir by the PIDs recorded there, whoever
// started it. Nothing running is no error.
func Stop(ctx context.Context, o Options) error {
	if !filepath.IsAbs(o.Dir) {
		return fmt.Errorf("swiftlab: want an absolute dir, got %q", o.Dir)
	}
	if _, err := os.Stat(o.Dir); errors.Is(err, os.ErrNotExist) {
		return nil
	}
	return o.script(ctx, "stop.sh")
}

// script runs one of scripts/swift with the instance's environment (no
// SWIFT_E2E_* variable of the caller's), output appended to Dir/up.log.
func (o Options) script(ctx context.Context, name string) error {
	if err := os.MkdirAll(o.Dir, 0o700); err != nil {
		return fmt.Errorf("swiftlab: %w", err)
	}
	env := []string{"SWIFT_E2E_DIR=" + o.Dir, "SWIFT_E2E_PORT_BASE=" + strconv.Itoa(PortBase)}
	if o.Host.IsValid() {
		env = append(env, "SWIFT_E2E_HOST="+o.Host.String())
	}
	if err := labenv.Script(ctx, filepath.Join(o.Scripts, name), filepath.Join(o.Dir, "up.log"), []string{"SWIFT_E2E_"}, env...); err != nil {
		return fmt.Errorf("swiftlab: %w", err)
	}
	return nil
}
