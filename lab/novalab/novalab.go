// Package novalab runs the lab's Nova: a second instance of the real Zed
// cloud of scripts/nova (keystone, placement, glance, nova-api with the fake
// virt driver), its API services on the lab's bridge address so the
// containers reach them, under a directory and on ports of its own beside
// the `make e2e-nova` instance on 127.0.0.1:24700.
package novalab

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/netip"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/jiocloud/orchestrate/lab/internal/labenv"
)

// PortBase is the lab instance's first port (scripts/nova: keystone on it,
// nova-api on +3, ...); `make e2e-nova`'s is 24700.
const PortBase = 24800

// Options name the instance.
type Options struct {
	// Dir is its NOVA_E2E_DIR (the lab: $LAB_DIR/nova). Every user must be
	// able to traverse its parents: MariaDB runs as mysql.
	Dir string
	// PortBase is its NOVA_E2E_PORT_BASE (default PortBase).
	PortBase int
	// Host is its NOVA_E2E_HOST: the address of the API services and of
	// every catalog URL (the lab: the bridge's 198.18.0.1).
	Host netip.Addr
	// Scripts is the scripts/nova directory of the repository.
	Scripts string
	// Log gets one line per change; nil discards.
	Log *slog.Logger
}

// Cloud is a running instance.
type Cloud struct {
	// Dir is its NOVA_E2E_DIR.
	Dir string
	// EnvFile and CloudsYAML are the admin's credentials (mode 0600).
	EnvFile, CloudsYAML string
	// Env is EnvFile's KEY=value lines: OS_AUTH_URL and the other OS_*
	// variables of the cloud's admin, NOVA_E2E_FLAVOR, NOVA_E2E_IMAGE...
	Env map[string]string

	opts Options
}

// Up installs (the first time), configures and starts the instance with
// scripts/nova/up.sh, and reads its env file. It is idempotent: a running
// instance is left as it is. Its output goes to Dir/up.log.
func Up(ctx context.Context, o Options) (*Cloud, error) {
	if o.PortBase == 0 {
		o.PortBase = PortBase
	}
	if o.Log == nil {
		o.Log = slog.New(slog.DiscardHandler)
	}
	if !filepath.IsAbs(o.Dir) || !o.Host.Is4() || o.PortBase < 1024 || o.PortBase > 65535-10 {
		return nil, fmt.Errorf("novalab: want an absolute dir (got %q), an IPv4 host (got %s), a port base of 1024 to 65525 (got %d)", o.Dir, o.Host, o.PortBase)
	}
	if err := o.script(ctx, "up.sh"); err != nil {
		return nil, err
	}
	c := &Cloud{Dir: o.Dir, EnvFile: filepath.Join(o.Dir, "env"), CloudsYAML: filepath.Join(o.Dir, "clouds.yaml"), opts: o}
	env, err := readEnv(c.EnvFile)
	if err != nil {
		return nil, err
	}
	c.Env = env
	o.Log.Info("lab nova up", "dir", o.Dir, "auth_url", env["OS_AUTH_URL"])
	return c, nil
}

// Down stops every daemon of the instance by PID (scripts/nova/stop.sh),
// keeping its data for a fast next Up.
func (c *Cloud) Down(ctx context.Context) error {
	return Stop(ctx, c.opts)
}

// Stop stops the instance of o.Dir by the PIDs recorded there, whoever
// started it (a crashed run; make lab-down). Nothing running is no error.
func Stop(ctx context.Context, o Options) error {
	if !filepath.IsAbs(o.Dir) {
		return fmt.Errorf("novalab: want an absolute dir, got %q", o.Dir)
	}
	if _, err := os.Stat(o.Dir); errors.Is(err, os.ErrNotExist) {
		return nil
	}
	return o.script(ctx, "stop.sh")
}

// script runs one of scripts/nova with the instance's environment (no
// OS_* or NOVA_E2E_* variable of the caller's), output appended to
// Dir/up.log.
func (o Options) script(ctx context.Context, name string) error {
	if err := os.MkdirAll(o.Dir, 0o711); err != nil {
		return fmt.Errorf("novalab: %w", err)
	}
	err := labenv.Script(ctx, filepath.Join(o.Scripts, name), filepath.Join(o.Dir, "up.log"), []string{"OS_", "NOVA_E2E_"},
		"NOVA_E2E_DIR="+o.Dir, "NOVA_E2E_PORT_BASE="+strconv.Itoa(o.PortBase), "NOVA_E2E_HOST="+o.Host.String())
	if err != nil {
		return fmt.Errorf("novalab: %w", err)
	}
	return nil
}

// cleanEnv is the environment without OS_* and NOVA_E2E_* variables: the
// instance is named only by Options.
func cleanEnv() []string {
	var env []string
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "OS_") && !strings.HasPrefix(kv, "NOVA_E2E_") {
			env = append(env, kv)
		}
	}
	return env
}

// readEnv reads start.sh's env file: KEY=value lines.
func readEnv(path string) (map[string]string, error) {
	env, err := labenv.ReadEnvFile(path, "OS_AUTH_URL")
	if err != nil {
		return nil, fmt.Errorf("novalab: %w", err)
	}
	return env, nil
}
