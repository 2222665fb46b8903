// Package converge is a node's own update loop, run by a Consul watch: decide
// whether this host has work (a pending version, a failed or pending build),
// then run the update step, Puppet and validation, record each outcome in
// Consul KV and as a TTL check on the local agent, and report the desired
// version only when Puppet and validation both succeeded.
package converge

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/jiocloud/orchestrate/internal/hieradata"
	"github.com/jiocloud/orchestrate/internal/logship"
	"github.com/jiocloud/orchestrate/internal/paths"
	"github.com/jiocloud/orchestrate/internal/rollout"
	"github.com/jiocloud/orchestrate/internal/store/schema"
	"github.com/jiocloud/orchestrate/watch"
)

// Config is everything one converge run needs.
type Config struct {
	// Host is this host's name in KV.
	Host string
	// UpdateCmd, ConsistentCmd, EventualCmd, PuppetCmd and ValidateCmd are
	// shell command lines (run by /bin/sh -c).
	//
	// ConsistentCmd is the static, expensive Puppet run: it runs when a
	// version is pending or its last run did not succeed, and must succeed
	// whatever other hosts published (any failure is a failure).
	// EventualCmd, optional, applies the classes that depend on other
	// hosts' data: it runs after every consistent run and, with
	// EventualOnly, whenever the hiera data changed; failing while
	// dependencies are unmet it is pending, and it never re-runs the
	// consistent step. PuppetCmd is the older single run, "everything is
	// consistent" except that a failure while dependencies are unmet is
	// pending; it excludes ConsistentCmd. UpdateCmd and ValidateCmd may be
	// empty.
	UpdateCmd, ConsistentCmd, EventualCmd, PuppetCmd, ValidateCmd string
	// EventualOnly runs the eventual step (then validation) and nothing
	// else, as hiera-services --exec does after the data changed; it does
	// nothing until the consistent step succeeded for the desired version.
	EventualOnly bool
	// ValidateDir holds validation checks, run run-parts style.
	ValidateDir string
	// StepTimeout bounds the update step and Puppet; ValidateTimeout bounds
	// each validation check.
	StepTimeout, ValidateTimeout time.Duration
	// HieraData is the services.yaml hiera-services renders; converge reads
	// orchestrate::dependencies_met and orchestrate::unmet_dependencies there.
	HieraData string
	// LogDir receives one log file per run; KeepLogs bounds how many stay.
	LogDir   string
	KeepLogs int
	// LogURLBase, when set, makes log_url <LogURLBase>/<file> instead of a
	// file:// URL.
	LogURLBase string
	// LogGrant is the host's write-only upload grant for Swift
	// (internal/logship); with none (no file), logs stay local and
	// log_url is LogURLBase's or a file:// URL. UploadLogs says when the
	// run's log goes to Swift: UploadOnFailure (a step failed),
	// UploadAlways, or UploadNever. LogSpool keeps what is not uploaded
	// yet; MaxLogBytes caps each log (head and tail kept); UploadTimeout
	// bounds one upload.
	LogGrant, LogSpool, UploadLogs string
	MaxLogBytes                    int64
	UploadTimeout                  time.Duration
	// LockFile serialises converge runs on this host; WaitLock makes a second
	// run wait for the first instead of exiting.
	LockFile string
	WaitLock bool
	// Force runs the whole loop even when nothing is pending or failed.
	Force bool
	// RetryInterval, when positive, makes an unsuccessful run try again after
	// this long, up to MaxAttempts runs in all (0: until it succeeds).
	RetryInterval time.Duration
	MaxAttempts   int
	// CheckTTL is the TTL of the orchestrate:puppet and orchestrate:validation
	// checks. They mirror the last build's outcome, not liveness, so the TTL
	// is long: an expired TTL check turns critical and would pull every
	// service of the node out of DNS.
	CheckTTL time.Duration
	// NoChecks disables the TTL checks (no local agent to register them on).
	NoChecks bool
	// Role, when set, makes the consistent step take one of the role's
	// rollout slots first (internal/rollout) and records the host's
	// progress in the role's rollout; SlotTTL is the TTL of the session
	// that holds the slot.
	Role    string
	SlotTTL time.Duration
	// SlotWake runs only when the host waits for a rollout slot: the
	// handler of the role's rollout watch, which fires on every change of
	// the role's rollout and must not re-run a failed host's build.
	SlotWake bool
	// Repair runs the node's own repair (repair.go) instead of a
	// converge: while a check of one of RepairServices on the local agent
	// is critical, re-run converge at most RepairAttempts times,
	// RepairBackoff apart (doubling). RetryInterval, MaxAttempts and
	// Force do not apply to it.
	Repair         bool
	RepairServices []string
	RepairAttempts int
	RepairBackoff  time.Duration
	// PassEnv names credentials (CONSUL_HTTP_TOKEN, CONSUL_HTTP_TOKEN_FILE,
	// OS_*) that the steps may inherit; every other one is withheld (see
	// watch.ChildEnv).
	PassEnv []string
}

// When the run's log goes to Swift (Config.UploadLogs).
const (
	UploadOnFailure = "failure"
	UploadAlways    = "always"
	UploadNever     = "never"
)

// Defaults returns the configuration before flags.
func Defaults() Config {
	return Config{
		StepTimeout:     time.Hour,
		ValidateTimeout: 5 * time.Minute,
		HieraData:       hieradata.DefaultOut,
		LogDir:          paths.LogDir,
		LogGrant:        paths.LogGrant,
		LogSpool:        paths.LogSpool,
		UploadLogs:      UploadOnFailure,
		MaxLogBytes:     logship.DefaultMaxBytes,
		UploadTimeout:   logship.DefaultTimeout,
		KeepLogs:        50,
		LockFile:        paths.ConvergeLock,
		WaitLock:        true,
		// Only converge refreshes the checks, and it runs only when
		// something changes; a TTL that expired would turn the check
		// critical and take the node's services out of DNS. Ten years
		// outlives any node (30 days used to expire a month after the last
		// rollout, on every node within the same hour).
		CheckTTL: 10 * 365 * 24 * time.Hour,
		SlotTTL:  rollout.DefaultSessionTTL,
		// Three Puppet runs a minute, two and four apart: a crashed
		// service is usually back after the first; the reaper's repair
		// ladder (repair_grace) should give the node about this long.
		RepairAttempts: 3,
		RepairBackoff:  time.Minute,
	}
}

// Validate names the first bad field.
func (c Config) Validate() error {
	for _, check := range []func() error{c.validateSteps, c.validateTimings, c.validateLogs} {
		if err := check(); err != nil {
			return err
		}
	}
	if err := watch.ValidPassEnv(c.PassEnv); err != nil {
		return err
	}
	if c.LockFile == "" {
		return errors.New("--lock-file is empty")
	}
	return nil
}

// validateSteps checks which steps run and in which mode: the commands,
// the modes that exclude each other, the role and the repaired services.
func (c Config) validateSteps() error {
	switch {
	case c.PuppetCmd == "" && c.ConsistentCmd == "":
		return errors.New("--consistent-cmd (or the older single --puppet-cmd) is required")
	case c.PuppetCmd != "" && c.ConsistentCmd != "":
		return errors.New("--puppet-cmd and --consistent-cmd exclude each other (--puppet-cmd is the older single Puppet run)")
	case c.EventualOnly && c.EventualCmd == "":
		return errors.New("--eventual-only needs --eventual-cmd")
	case c.EventualOnly && c.Force:
		return errors.New("--eventual-only and --force exclude each other (--force runs every step)")
	case c.SlotWake && c.Role == "":
		return errors.New("--slot-wake needs --role")
	case c.SlotWake && (c.Force || c.EventualOnly):
		return errors.New("--slot-wake excludes --force and --eventual-only")
	case c.Repair && len(c.RepairServices) == 0:
		return errors.New("--repair needs --repair-service: the services whose critical checks it repairs")
	case !c.Repair && len(c.RepairServices) > 0:
		return errors.New("--repair-service needs --repair")
	case c.Repair && (c.EventualOnly || c.SlotWake):
		return errors.New("--repair excludes --eventual-only and --slot-wake")
	case c.ValidateCmd != "" && c.ValidateDir != "":
		return errors.New("--validate-cmd and --validate-dir exclude each other")
	case c.HieraData == "":
		return errors.New("--hiera-data is empty")
	case !filepath.IsAbs(c.HieraData):
		// A watch handler runs in Consul's working directory: a relative
		// path would name a file nothing writes, and every failure would
		// look like waiting for the data.
		return fmt.Errorf("--hiera-data %s must be an absolute path", c.HieraData)
	}
	if c.Role != "" {
		if err := schema.ValidName("--role", c.Role); err != nil {
			return err
		}
	}
	for _, svc := range c.RepairServices {
		if err := hieradata.ValidServiceName(svc); err != nil {
			return fmt.Errorf("--repair-service: %w", err)
		}
	}
	if c.ValidateDir != "" {
		st, err := os.Stat(c.ValidateDir)
		if err != nil {
			return fmt.Errorf("--validate-dir: %w", err)
		}
		if !st.IsDir() {
			return fmt.Errorf("--validate-dir %s is not a directory", c.ValidateDir)
		}
	}
	return nil
}

// validateTimings checks the timeouts, retries, repair attempts and TTLs.
func (c Config) validateTimings() error {
	switch {
	case c.RepairAttempts < 1 || c.RepairAttempts > 20:
		return fmt.Errorf("--repair-attempts %d must be between 1 and 20", c.RepairAttempts)
	case c.RepairBackoff < time.Second:
		return fmt.Errorf("--repair-backoff %s must be at least 1s", c.RepairBackoff)
	case c.StepTimeout <= 0:
		return fmt.Errorf("--step-timeout %s must be positive", c.StepTimeout)
	case c.ValidateTimeout <= 0:
		return fmt.Errorf("--validate-timeout %s must be positive", c.ValidateTimeout)
	case c.RetryInterval < 0:
		return fmt.Errorf("--retry-interval %s is negative", c.RetryInterval)
	case c.MaxAttempts < 0:
		return fmt.Errorf("--max-attempts %d is negative", c.MaxAttempts)
	case c.SlotTTL < 10*time.Second || c.SlotTTL > 24*time.Hour:
		// Consul's bounds for a session TTL.
		return fmt.Errorf("--slot-ttl %s is outside Consul's session TTL range, 10s to 24h", c.SlotTTL)
	case !c.NoChecks && c.CheckTTL < time.Minute:
		return fmt.Errorf("--check-ttl %s is shorter than a minute", c.CheckTTL)
	}
	return nil
}

// validateLogs checks where the run logs go: the local directory and how
// many it keeps, and the upload to Swift (when, the grant, the spool, the
// cap and the timeout).
func (c Config) validateLogs() error {
	switch {
	case c.LogDir == "":
		return errors.New("--log-dir is empty")
	case !filepath.IsAbs(c.LogDir):
		return fmt.Errorf("--log-dir %s must be an absolute path (it is named in status log URLs)", c.LogDir)
	case c.KeepLogs < 1:
		return fmt.Errorf("--keep-logs %d must be at least 1", c.KeepLogs)
	case c.UploadLogs != UploadOnFailure && c.UploadLogs != UploadAlways && c.UploadLogs != UploadNever:
		return fmt.Errorf("--upload-logs %q: want %s, %s or %s", c.UploadLogs, UploadOnFailure, UploadAlways, UploadNever)
	case c.UploadLogs != UploadNever && (!filepath.IsAbs(c.LogGrant) || !filepath.IsAbs(c.LogSpool)):
		return fmt.Errorf("--log-grant %q and --log-spool %q must be absolute paths", c.LogGrant, c.LogSpool)
	case c.MaxLogBytes < logship.MinMaxBytes || c.MaxLogBytes > 1<<30:
		return fmt.Errorf("--max-log-bytes %d must be between %d and 1 GiB", c.MaxLogBytes, logship.MinMaxBytes)
	case c.UploadTimeout < time.Second || c.UploadTimeout > 10*time.Minute:
		return fmt.Errorf("--upload-timeout %s must be between 1s and 10m", c.UploadTimeout)
	}
	return nil
}

// consistentCmd is the command of the consistent step: ConsistentCmd, or
// the older PuppetCmd.
func (c Config) consistentCmd() string {
	if c.ConsistentCmd != "" {
		return c.ConsistentCmd
	}
	return c.PuppetCmd
}
