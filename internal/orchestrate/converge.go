package orchestrate

import (
	"context"
	"fmt"

	"github.com/spf13/pflag"

	"github.com/jiocloud/orchestrate/internal/converge"
	"github.com/jiocloud/orchestrate/internal/exitcode"
)

var cmdConverge = &command{
	name: "converge", minArgs: 0, maxArgs: 0, needsHost: true, json: true, handler: true,
	summary: "This node's update loop: when an update is pending or the last build or validation did not succeed, run the update step, the consistent Puppet run, the eventual one (if any) and validation, record each outcome, and report the version when all succeeded; a failed eventual run re-runs alone. With --role, the consistent step first takes one of the role's update slots (`orchestrate rollout`). With --repair (the repair watch's handler), re-run converge while a check of the node's own services is critical, a bounded number of times. Exit 0 converged, repaired or nothing to do, 1 failed, pending or waiting for a slot (with --handler, pending and waiting exit 0).",
	setup: func(fs *pflag.FlagSet) runFunc {
		cfg := converge.Defaults()
		c := &cfg
		fs.StringVar(&c.UpdateCmd, "update-cmd", "", "update step, run by /bin/sh -c with $ORCHESTRATE_VERSION set (e.g. an apt upgrade to the pinned snapshot)")
		fs.StringVar(&c.ConsistentCmd, "consistent-cmd", "", "the consistent (static, expensive) Puppet run: on a pending version or after it did not succeed; any failure is a failure. Use --detailed-exitcodes (0 and 2 succeed; 1, 4 and 6 fail)")
		fs.StringVar(&c.EventualCmd, "eventual-cmd", "", "the eventual Puppet run (classes that use other hosts' data): after every consistent run and, with --eventual-only, whenever the hiera data changed; failing while dependencies are unmet it is pending")
		fs.BoolVar(&c.EventualOnly, "eventual-only", false, "run the eventual step and validation only (hiera-services --exec after the data changed); nothing until the consistent step succeeded for the desired version")
		fs.StringVar(&c.PuppetCmd, "puppet-cmd", "", "the older single Puppet run, instead of --consistent-cmd: everything is consistent, and a failure while dependencies are unmet is pending")
		fs.StringVar(&c.ValidateCmd, "validate-cmd", "", "validation command")
		fs.StringVar(&c.ValidateDir, "validate-dir", "", "run every executable in this directory as a validation check, run-parts style")
		fs.DurationVar(&c.StepTimeout, "step-timeout", c.StepTimeout, "timeout of the update step and of Puppet")
		fs.DurationVar(&c.ValidateTimeout, "validate-timeout", c.ValidateTimeout, "timeout of each validation check")
		fs.StringVar(&c.HieraData, "hiera-data", c.HieraData, "services.yaml rendered by hiera-services; a Puppet failure while its orchestrate::dependencies_met is false, or before it exists, is recorded as pending")
		fs.StringVar(&c.LogDir, "log-dir", c.LogDir, "directory for one log file per run (absolute)")
		fs.IntVar(&c.KeepLogs, "keep-logs", c.KeepLogs, "how many run logs to keep")
		fs.StringVar(&c.LogURLBase, "log-url-base", "", "URL under which --log-dir is served; status log_url points there instead of file://")
		fs.StringVar(&c.UploadLogs, "upload-logs", c.UploadLogs, "when the run's log goes to Swift through the host's grant (--log-grant): failure (a step failed), always, or never")
		fs.StringVar(&c.LogGrant, "log-grant", c.LogGrant, "the host's write-only upload grant for Swift (written at first boot from the reaper's user data); without the file logs stay local")
		fs.StringVar(&c.LogSpool, "log-spool", c.LogSpool, "directory of the logs not uploaded yet; each converge run and `orchestrate logs flush` retry them")
		fs.Int64Var(&c.MaxLogBytes, "max-log-bytes", c.MaxLogBytes, "cap on an uploaded log: a larger one keeps its head and its tail, with a marker between")
		fs.DurationVar(&c.UploadTimeout, "upload-timeout", c.UploadTimeout, "bound on the uploads of one run (the spool keeps what did not go)")
		fs.StringVar(&c.LockFile, "lock-file", c.LockFile, "lock serialising converge runs on this host")
		fs.BoolVar(&c.WaitLock, "wait", c.WaitLock, "when another converge runs, wait for it and then decide afresh (--wait=false: exit 0 at once)")
		fs.BoolVar(&c.Force, "force", false, "run even when nothing is pending or failed (e.g. hiera-services --exec after the data changed)")
		fs.DurationVar(&c.RetryInterval, "retry-interval", 0, "after a failed or pending run, try again after this long (0: run once)")
		fs.IntVar(&c.MaxAttempts, "max-attempts", 0, "with --retry-interval, give up after this many runs (0: until it succeeds)")
		fs.DurationVar(&c.CheckTTL, "check-ttl", c.CheckTTL, "TTL of the orchestrate:puppet and orchestrate:validation checks on the local agent")
		fs.BoolVar(&c.NoChecks, "no-checks", false, "do not mirror statuses as checks on the local agent")
		fs.StringVar(&c.Role, "role", "", "this host's role: the consistent step first takes one of the role's update slots (see `orchestrate rollout`), and the host's progress is recorded in the role's rollout")
		fs.BoolVar(&c.SlotWake, "slot-wake", false, "act only when this host waits for one of its role's update slots (the handler of the role's rollout watch: a failed host is not rebuilt on every change of the rollout)")
		fs.DurationVar(&c.SlotTTL, "slot-ttl", c.SlotTTL, "TTL of the session holding the update slot: a converge that dies holding one frees it within one to two TTLs")
		fs.BoolVar(&c.Repair, "repair", false, "the node's own repair (the handler of its repair watch, `watch-config --repair-service`): while a check of a --repair-service on the local agent is critical, re-run converge for the version the host runs, at most --repair-attempts times, --repair-backoff apart (doubling); no rollout slot; recorded in the host's repair status")
		fs.StringArrayVar(&c.RepairServices, "repair-service", nil, "with --repair, a service of this node whose critical checks it repairs (repeatable)")
		fs.IntVar(&c.RepairAttempts, "repair-attempts", c.RepairAttempts, "with --repair, the converge runs per episode of critical checks")
		fs.DurationVar(&c.RepairBackoff, "repair-backoff", c.RepairBackoff, "with --repair, the wait after the first attempt before the checks are looked at again (doubling after each)")
		fs.StringArrayVar(&c.PassEnv, "pass-env", nil, "let the steps inherit this credential variable (CONSUL_HTTP_TOKEN, CONSUL_HTTP_TOKEN_FILE or an OS_* one), withheld by default (repeatable)")
		return func(ctx context.Context, e *env, _ []string) error { return runConverge(ctx, e, cfg) }
	},
}

func runConverge(ctx context.Context, e *env, cfg converge.Config) error {
	cfg.Host = e.host
	if err := cfg.Validate(); err != nil {
		return exitcode.Wrap(exitcode.Usage, fmt.Errorf("converge: %w", err))
	}
	cv := converge.New(cfg, e.store, e.client, e.log)
	run := cv.Run
	if cfg.Repair {
		run = cv.Repair
	}
	res, err := run(ctx)
	if err != nil {
		return err
	}
	if e.json {
		if err := e.printJSON(map[string]string{"outcome": string(res.Outcome), "reason": res.Reason, "version": res.Version, "detail": res.Detail, "log": res.LogPath, "log_url": res.LogURL}); err != nil {
			return err
		}
	} else {
		fmt.Fprintf(e.Stdout, "%s: %s", e.host, res.Outcome)
		if res.Version != "" {
			fmt.Fprintf(e.Stdout, " (%s)", res.Version)
		}
		if res.Detail != "" {
			fmt.Fprintf(e.Stdout, ": %s", res.Detail)
		}
		fmt.Fprintln(e.Stdout)
	}
	// Pending waits on other hosts, and Waiting on a rollout slot, which
	// is no failure of this one: a watch handler exits 0 for them, so the
	// agent's log holds no error.
	if res.Outcome == converge.Failed || (res.Outcome == converge.Pending || res.Outcome == converge.Waiting) && !e.handler {
		return answerNo()
	}
	return nil
}
