package converge

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"time"

	"gopkg.in/yaml.v3"

	"github.com/hashicorp/consul/api"

	"github.com/jiocloud/orchestrate/internal/exitcode"
	"github.com/jiocloud/orchestrate/internal/fileutil"
	"github.com/jiocloud/orchestrate/internal/hieradata"
	"github.com/jiocloud/orchestrate/internal/logship"
	"github.com/jiocloud/orchestrate/internal/store"
	"github.com/jiocloud/orchestrate/internal/yamlconf"
	"github.com/jiocloud/orchestrate/watch"
)

// act runs the steps for version want, recording each outcome, and
// reports the version when all succeeded: update, the consistent step, the
// eventual step (if any) and validation, or, for eventualSteps, the
// eventual step and validation only.
func (c *Converger) act(ctx context.Context, want string, run steps) (Result, error) {
	rl, err := openRunLog(c.cfg, c.now())
	if err != nil {
		// The run log is the operator's --log-dir, not Consul; nothing is
		// recorded yet.
		return Result{}, exitcode.Wrap(exitcode.Usage, fmt.Errorf("--log-dir: %w", err))
	}
	defer rl.Close()
	a := &action{c: c, rl: rl, want: want, res: Result{Version: want, LogPath: rl.path, LogURL: rl.url(c.cfg.LogURLBase)}, logURL: rl.url(c.cfg.LogURLBase),
		// Status writes use a context that survives a cancelled run, so an
		// interrupted converge still records that it was interrupted.
		recordCtx: context.WithoutCancel(ctx),
		env:       []string{"ORCHESTRATE_VERSION=" + want, "ORCHESTRATE_HOST=" + c.cfg.Host, "ORCHESTRATE_LOG=" + rl.path}}
	if run == allSteps {
		if done, err := a.consistent(ctx); done || err != nil {
			return a.res, err
		}
	}
	if c.cfg.EventualCmd != "" {
		if done, err := a.eventual(ctx); done || err != nil {
			return a.res, err
		}
	}
	failed, ran, err := c.validate(ctx, rl, a.env)
	if err != nil {
		return a.res, err
	}
	if len(failed) > 0 {
		return a.fail(Failed, store.CategoryValidation, store.StateFailed, "failed: "+strings.Join(failed, ", ")+"; log "+rl.path)
	}
	if c.cfg.UploadLogs == UploadAlways {
		a.planUpload(ctx, stepConverge)
	}
	if err := a.record(store.CategoryValidation, store.StateSuccess, fmt.Sprintf("%d checks passed", ran)); err != nil {
		return a.res, err
	}
	if err := c.store.ReportVersion(a.recordCtx, c.cfg.Host, want); err != nil {
		return a.res, fmt.Errorf("report version %s: %w", want, err)
	}
	a.res.Outcome = Converged
	c.log.Info("converged", "host", c.cfg.Host, "version", want, "log", rl.path)
	return a.res, nil
}

// action is one run of act: where it logs and what it records.
type action struct {
	c         *Converger
	rl        *runLog
	want      string
	res       Result
	logURL    string
	recordCtx context.Context
	env       []string
}

// record writes one category's outcome to KV and mirrors it on the agent.
func (a *action) record(cat, state, detail string) error {
	wctx, cancel := context.WithTimeout(a.recordCtx, 30*time.Second)
	defer cancel()
	if err := a.c.store.UpdateStatus(wctx, a.c.cfg.Host, cat, state, store.StatusValue{Version: a.want, Detail: detail, LogURL: a.logURL}); err != nil {
		return fmt.Errorf("record %s %s: %w", cat, state, err)
	}
	a.c.mirrorCheck(wctx, cat, state, detail)
	return nil
}

// stepConverge names the log of a whole run that succeeded (UploadAlways).
const stepConverge = "converge"

// planUpload names the run's log in Swift as step's, when the host has a
// grant: from now on the records' log_url is the object's URL, written
// before the upload (Converger.shipLog, once every record is written).
// Without a grant, or when it cannot be read, the log stays local and the
// run goes on.
func (a *action) planUpload(ctx context.Context, step string) {
	c := a.c
	if c.ship == nil || a.res.object != "" {
		return
	}
	object, url, err := c.ship.Plan(ctx, c.cfg.Host, a.want, step, a.rl.started)
	switch {
	case errors.Is(err, logship.ErrNoGrant):
		c.log.Debug("no log upload grant: the log stays local", "grant", c.cfg.LogGrant)
		return
	case err != nil:
		c.log.Warn("cannot name the log in Swift: it stays local", "err", err)
		return
	}
	a.logURL, a.res.LogURL, a.res.object = url, url, object
}

// fail ends the run with outcome, recording state for cat.
func (a *action) fail(outcome Outcome, cat, state, detail string) (Result, error) {
	if outcome == Failed && a.c.cfg.UploadLogs != UploadNever {
		a.planUpload(a.recordCtx, cat)
	}
	a.res.Outcome, a.res.Detail, a.res.Category = outcome, detail, cat
	a.c.log.Warn("converge did not succeed", "host", a.c.cfg.Host, "version", a.want, "step", cat, "state", state, "detail", detail, "log", a.rl.path)
	return a.res, a.record(cat, state, detail)
}

// consistent runs the update step and the consistent step; done says the
// run ended (a step failed, its outcome recorded).
func (a *action) consistent(ctx context.Context) (done bool, err error) {
	c, rl := a.c, a.rl
	if err := a.record(store.CategoryPuppet, store.StateRunning, "converging to "+a.want); err != nil {
		return true, err
	}
	if c.cfg.UpdateCmd != "" {
		r := rl.run(ctx, "update", c.cfg.UpdateCmd, c.cfg.StepTimeout, a.env)
		if !r.ok() {
			a.planUpload(a.recordCtx, store.CategoryUpdate)
			if err := a.record(store.CategoryUpdate, store.StateFailed, "update step "+r.String()+"; log "+rl.path); err != nil {
				return true, err
			}
			_, err := a.fail(Failed, store.CategoryPuppet, store.StateFailed, "not run: the update step "+r.String()+"; log "+rl.path)
			return true, err
		}
		if err := a.record(store.CategoryUpdate, store.StateSuccess, "update step "+r.String()); err != nil {
			return true, err
		}
	}
	step := "puppet"
	if c.cfg.ConsistentCmd != "" {
		step = "consistent"
	}
	r := rl.run(ctx, step, c.cfg.consistentCmd(), c.cfg.StepTimeout, a.env)
	if !puppetSucceeded(r) {
		// The consistent step must succeed whatever other hosts published;
		// only the older single run may wait on dependencies.
		if c.cfg.PuppetCmd != "" {
			return a.failOrPending(store.CategoryPuppet, "puppet "+r.String()+"; log "+rl.path)
		}
		_, err := a.fail(Failed, store.CategoryPuppet, store.StateFailed, "consistent step "+r.String()+"; log "+rl.path)
		return true, err
	}
	return false, a.record(store.CategoryPuppet, store.StateSuccess, step+" "+r.String())
}

// eventual runs the eventual step; done says the run ended.
func (a *action) eventual(ctx context.Context) (done bool, err error) {
	c, rl := a.c, a.rl
	if err := a.record(store.CategoryEventual, store.StateRunning, "converging to "+a.want); err != nil {
		return true, err
	}
	r := rl.run(ctx, "eventual", c.cfg.EventualCmd, c.cfg.StepTimeout, a.env)
	if !puppetSucceeded(r) {
		return a.failOrPending(store.CategoryEventual, "eventual step "+r.String()+"; log "+rl.path)
	}
	return false, a.record(store.CategoryEventual, store.StateSuccess, "eventual step "+r.String())
}

// failOrPending records a failed Puppet run of cat as pending when the
// hiera data says dependencies are unmet (it may work once other hosts
// publish), or when there is no hiera data yet (a first boot, before
// hiera-services rendered it: Puppet could not have had the other hosts'
// data), else as failed. Data that exists but cannot be read is a fault
// of this host: failed, saying why.
func (a *action) failOrPending(cat, detail string) (done bool, err error) {
	path := a.c.cfg.HieraData
	met, unmet, derr := readDependencies(path)
	switch {
	case errors.Is(derr, fs.ErrNotExist):
		a.c.log.Info("no hiera data yet; the step waits for it", "hiera_data", path)
		_, err := a.fail(Pending, cat, store.StatePending, "waiting for the hiera data: "+path+" does not exist yet (hiera-services has not rendered it); "+detail)
		return true, err
	case derr != nil:
		a.c.log.Warn("cannot tell whether dependencies are met; recording a failure", "hiera_data", path, "err", derr)
		detail += "; cannot tell whether dependencies are met: " + derr.Error()
	case !met:
		_, err := a.fail(Pending, cat, store.StatePending, "waiting on dependencies: "+strings.Join(unmet, ", ")+"; "+detail)
		return true, err
	}
	_, err = a.fail(Failed, cat, store.StateFailed, detail)
	return true, err
}

// puppetSucceeded reads Puppet's --detailed-exitcodes: 0 (no changes) and 2
// (changes applied) succeed; 1, 4 and 6 (and anything else) fail.
func puppetSucceeded(r stepResult) bool {
	return r.err == nil && (r.code == 0 || r.code == 2)
}

// validate runs ValidateCmd, or every check in ValidateDir, and returns the
// names of the failing ones and how many ran.
func (c *Converger) validate(ctx context.Context, rl *runLog, env []string) (failed []string, ran int, err error) {
	switch {
	case c.cfg.ValidateCmd != "":
		r := rl.run(ctx, "validate", c.cfg.ValidateCmd, c.cfg.ValidateTimeout, env)
		if !r.ok() {
			failed = append(failed, fmt.Sprintf("%s (%s)", c.cfg.ValidateCmd, r))
		}
		return failed, 1, nil
	case c.cfg.ValidateDir != "":
		checks, err := runParts(c.cfg.ValidateDir)
		if err != nil {
			return nil, 0, err
		}
		for _, path := range checks {
			name := filepath.Base(path)
			r := rl.run(ctx, "validate "+name, watch.ShellQuote(path), c.cfg.ValidateTimeout, env)
			if !r.ok() {
				failed = append(failed, fmt.Sprintf("%s (%s)", name, r))
			}
		}
		return failed, len(checks), nil
	}
	return nil, 0, nil
}

// runPartsName is run-parts' default rule: other names (editor backups,
// .dpkg-old files) are not checks.
var runPartsName = regexp.MustCompile(`^[A-Za-z0-9_-]+$`)

// runParts lists the executable checks of dir in lexical order.
func runParts(dir string) ([]string, error) {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return nil, fmt.Errorf("--validate-dir: %w", err)
	}
	var out []string
	for _, e := range entries {
		if !runPartsName.MatchString(e.Name()) {
			continue
		}
		path := filepath.Join(dir, e.Name())
		st, err := os.Stat(path)
		if err != nil || !st.Mode().IsRegular() || st.Mode().Perm()&0o111 == 0 {
			continue
		}
		out = append(out, path)
	}
	sort.Strings(out)
	return out, nil
}

// maxHieraData bounds the rendered hiera data converge reads: 1,000
// services of 5 instances render to about 700 KiB.
const maxHieraData = 64 << 20

// readDependencies reads orchestrate::dependencies_met and
// orchestrate::unmet_dependencies from the rendered hiera data. A file
// without them has no declared dependencies: met.
func readDependencies(path string) (met bool, unmet []string, err error) {
	// A FIFO would block the run until something writes to it, a device
	// be read to the limit: only a regular file is hiera data.
	if st, err := os.Stat(path); err == nil && !st.Mode().IsRegular() {
		return false, nil, fmt.Errorf("%s is not a regular file (%s)", path, st.Mode().Type())
	}
	data, err := fileutil.ReadLimited(path, maxHieraData)
	var pe *fs.PathError
	switch {
	case errors.As(err, &pe):
		return false, nil, err // names the path already
	case err != nil:
		return false, nil, fmt.Errorf("%s: %w", path, err)
	}
	var doc map[string]yaml.Node
	if err := yaml.Unmarshal(data, &doc); err != nil {
		return false, nil, yamlconf.SyntaxError(path, data, err)
	}
	v, ok := doc[hieradata.KeyDependenciesMet]
	if !ok {
		return true, nil, nil
	}
	if v.Decode(&met) != nil {
		return false, nil, fmt.Errorf("%s:%d: %s: want true or false, got %s", path, v.Line, hieradata.KeyDependenciesMet, yamlconf.Describe(&v))
	}
	var list []any
	if n, ok := doc[hieradata.KeyUnmetDependencies]; ok && n.Decode(&list) == nil {
		for _, x := range list {
			unmet = append(unmet, fmt.Sprint(x))
		}
	}
	return met, unmet, nil
}

// mirrorCheck sets the TTL check for cat on the local agent: passing on
// success, warning otherwise. Warning, never critical: a node-level critical
// check pulls all the node's services out of DNS, which would stall its
// peers' builds. The check mirrors KV, the record that counts, so a failure
// here is logged and the run goes on.
func (c *Converger) mirrorCheck(ctx context.Context, cat, state, detail string) {
	id := map[string]string{store.CategoryPuppet: CheckPuppet, store.CategoryEventual: CheckEventual, store.CategoryValidation: CheckValidation}[cat]
	if id == "" || c.cfg.NoChecks || c.agent == nil {
		return
	}
	status := api.HealthWarning
	if state == store.StateSuccess {
		status = api.HealthPassing
	}
	output := state + ": " + detail
	// The outcome goes in Notes as well as Output: re-registering syncs to
	// the catalog at once, while an output-only TTL update waits for the
	// agent's check_update_interval (5 minutes by default).
	reg := &api.AgentCheckRegistration{
		ID: id, Name: id,
		Notes:             "orchestrate converge, last " + cat + " outcome: " + output,
		AgentServiceCheck: api.AgentServiceCheck{TTL: c.cfg.CheckTTL.String(), Status: status},
	}
	q := (&api.QueryOptions{}).WithContext(ctx)
	if err := c.agent.CheckRegisterOpts(reg, q); err != nil {
		c.log.Warn("cannot register check on the local agent", "check", id, "err", err)
		return
	}
	if err := c.agent.UpdateTTLOpts(id, output, status, q); err != nil {
		c.log.Warn("cannot update check on the local agent", "check", id, "err", err)
	}
}

// runLog is one converge run's log file.
type runLog struct {
	f    *os.File
	path string
	// started is when the run began (in the log's name, and its object's
	// in Swift).
	started time.Time
	// passEnv names the credentials the steps may inherit.
	passEnv []string
	// groupFile records the process group of the step running, for the
	// next run to end should this one die (stepGroupFile).
	groupFile string
}

func openRunLog(cfg Config, now time.Time) (*runLog, error) {
	if err := os.MkdirAll(cfg.LogDir, 0o755); err != nil {
		return nil, fmt.Errorf("log dir: %w", err)
	}
	name := fmt.Sprintf("converge-%s-%s.log", cfg.Host, now.UTC().Format("20060102T150405.000Z"))
	path := filepath.Join(cfg.LogDir, name)
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o640)
	if err != nil {
		return nil, fmt.Errorf("log file: %w", err)
	}
	pruneLogs(cfg.LogDir, cfg.Host, cfg.KeepLogs)
	return &runLog{f: f, path: path, started: now, passEnv: cfg.PassEnv, groupFile: stepGroupFile(cfg.LockFile)}, nil
}

// runLogStamp is the part of a run log's name after "converge-<host>-".
var runLogStamp = regexp.MustCompile(`^[0-9]{8}T[0-9]{6}\.[0-9]{3}Z\.log$`)

// pruneLogs keeps the newest keep run logs of host. It matches names
// exactly, not by glob: a host name may hold glob characters, and another
// host's name may extend this one's ("web", "web-1") in a shared directory.
func pruneLogs(dir, host string, keep int) {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return
	}
	var old []string
	for _, e := range entries {
		stamp, ok := strings.CutPrefix(e.Name(), "converge-"+host+"-")
		if ok && runLogStamp.MatchString(stamp) {
			old = append(old, filepath.Join(dir, e.Name()))
		}
	}
	if len(old) <= keep {
		return
	}
	sort.Strings(old) // timestamps sort lexically
	for _, p := range old[:len(old)-keep] {
		_ = os.Remove(p)
	}
}

func (rl *runLog) url(base string) string { return logURL(base, rl.path) }

// logURL is the URL of run log path: under base when it is set (--log-url-base),
// else a file:// URL.
func logURL(base, path string) string {
	if base == "" {
		return "file://" + path
	}
	return strings.TrimSuffix(base, "/") + "/" + filepath.Base(path)
}

func (rl *runLog) Close() error { return rl.f.Close() }

// stepResult is how one command ended.
type stepResult struct {
	code     int
	err      error // could not start, or timed out
	timedOut bool
	elapsed  time.Duration
}

func (r stepResult) ok() bool { return r.err == nil && r.code == 0 }

func (r stepResult) String() string {
	switch {
	case r.timedOut:
		return fmt.Sprintf("timed out after %s", r.elapsed.Round(time.Millisecond))
	case r.err != nil:
		return "could not run: " + r.err.Error()
	default:
		return fmt.Sprintf("exit %d", r.code)
	}
}

// run runs cmdline with /bin/sh -c, its output appended to the log, killing
// its whole process group after timeout.
func (rl *runLog) run(ctx context.Context, step, cmdline string, timeout time.Duration, env []string) stepResult {
	start := time.Now()
	fmt.Fprintf(rl.f, "== %s: %s (started %s)\n", step, cmdline, start.UTC().Format(time.RFC3339))
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	// The step runs under groupGuard, in a process group of its own; the
	// guard gets SIGTERM when converge dies (Pdeathsig, which Linux sends
	// when the thread that started it ends: the thread is locked until
	// the step is over) and kills the whole group, so a killed converge
	// never leaves Puppet running.
	cmd := exec.CommandContext(ctx, "/bin/sh", "-c", groupGuard, cmdline)
	cmd.Stdout, cmd.Stderr = rl.f, rl.f
	cmd.Env = append(watch.ChildEnv(os.Environ(), rl.passEnv), env...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGTERM}
	cmd.Cancel = func() error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) }
	cmd.WaitDelay = 5 * time.Second
	runtime.LockOSThread()
	err := cmd.Start()
	if err == nil {
		rl.noteGroup(cmd.Process.Pid)
		err = cmd.Wait()
		rl.noteGroup(0)
	}
	runtime.UnlockOSThread()
	r := stepResult{elapsed: time.Since(start)}
	var ee *exec.ExitError
	switch {
	case ctx.Err() != nil:
		r.err, r.timedOut = ctx.Err(), errors.Is(ctx.Err(), context.DeadlineExceeded)
		if !r.timedOut {
			r.err = errors.New("interrupted")
		}
	case errors.As(err, &ee):
		r.code = ee.ExitCode()
	case err != nil:
		r.err = err
	}
	fmt.Fprintf(rl.f, "== %s: %s after %s\n\n", step, r, r.elapsed.Round(time.Millisecond))
	return r
}

// groupGuard runs a step ($0) in the background of a shell that leads the
// step's process group: when converge dies the shell gets SIGTERM and
// kills the whole group (Puppet, its children), then itself; otherwise it
// waits for the step and exits with its status.
const groupGuard = `trap 'kill -KILL 0' TERM HUP INT
/bin/sh -c "$0" </dev/null &
wait $!`

// stepGroupFile is where a run records the process group of its step,
// beside its lock: the next run, once it holds the lock, ends a group a
// dead run left (what Pdeathsig could not reach: a step's process that
// left the group is not killed, but a group is never left running).
func stepGroupFile(lock string) string { return lock + ".step" }

// noteGroup records the running step's process group (0: none).
func (rl *runLog) noteGroup(pgid int) {
	if rl.groupFile == "" {
		return
	}
	if pgid == 0 {
		os.Remove(rl.groupFile)
		return
	}
	if err := os.WriteFile(rl.groupFile, []byte(strconv.Itoa(pgid)+"\n"), 0o644); err != nil {
		fmt.Fprintf(rl.f, "== cannot record the step's process group in %s: %v\n", rl.groupFile, err)
	}
}

// endLeftGroup ends the step process group a dead run recorded, if any of
// it still lives, and waits (up to 5 s) for it to go: one run's steps
// never overlap another's. Called with the lock held.
func endLeftGroup(lock string, log func(msg string, args ...any)) {
	data, err := os.ReadFile(stepGroupFile(lock))
	if err != nil {
		return
	}
	pgid, err := strconv.Atoi(strings.TrimSpace(string(data)))
	if err != nil || pgid <= 1 {
		os.Remove(stepGroupFile(lock))
		return
	}
	if syscall.Kill(-pgid, 0) == nil {
		log("a converge that died left its step running: killing its process group", "pgid", pgid)
		syscall.Kill(-pgid, syscall.SIGKILL)
		for i := 0; i < 50 && syscall.Kill(-pgid, 0) == nil; i++ {
			time.Sleep(100 * time.Millisecond)
		}
	}
	os.Remove(stepGroupFile(lock))
}
