package orchestrate

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/pflag"

	"github.com/jiocloud/orchestrate/internal/exitcode"
	"github.com/jiocloud/orchestrate/internal/paths"
	"github.com/jiocloud/orchestrate/internal/store"
	"github.com/jiocloud/orchestrate/internal/store/reaperkv"
	"github.com/jiocloud/orchestrate/internal/store/schema"
	"github.com/jiocloud/orchestrate/watch"
)

// The commands of autoscaling and scale-in: nodes report their own load,
// operators and the platform set or hand back a role's count, name hosts
// to remove, protect hosts, and answer the reaper's drain requests.

var cmdReportMetric = &command{
	name: "report-metric", minArgs: 2, maxArgs: 2, usage: "NAME VALUE", needsHost: true,
	summary: "Report this host's value of a metric (its utilization, say 0.73) for its role's autoscaler (<prefix>/hosts/HOST/metrics/NAME; the reaper counts it for the role it knows the server by), from a cron job, a check script or the workload itself.",
	setup: func(fs *pflag.FlagSet) runFunc {
		role := fs.String("role", os.Getenv("ORCHESTRATE_ROLE"), "this host's role (default $ORCHESTRATE_ROLE)")
		return func(ctx context.Context, e *env, args []string) error {
			if *role == "" {
				return exitcode.Usagef("report-metric: --role (or $ORCHESTRATE_ROLE) is required: the reaper reads a role's reports")
			}
			v, err := store.ParseMetricValue(args[1])
			if err != nil {
				return exitcode.Usagef("report-metric: %v", err)
			}
			if err := e.store.ReportMetric(ctx, *role, e.host, args[0], v); err != nil {
				return err
			}
			e.log.Debug("metric reported", "role", *role, "host", e.host, "metric", args[0], "value", v)
			return nil
		}
	},
}

var cmdScale = &command{
	name: "scale", minArgs: 1, maxArgs: 2, usage: "ROLE N | ROLE --auto", json: true,
	summary: "Set the desired count of ROLE (<prefix>/roles/ROLE/desired). For an autoscaled role the count stands as an override, the autoscaler holding, until `orchestrate scale ROLE --auto` gives it back.",
	setup: func(fs *pflag.FlagSet) runFunc {
		auto := fs.Bool("auto", false, "remove the count set by hand: an autoscaled role's count is its autoscaler's again")
		force := fs.Bool("force", false, "set a count outside an autoscaled role's min and max")
		var cf confirmFlags
		cf.register(fs, "the count (status shows it); a count below the current one asks first")
		return func(ctx context.Context, e *env, args []string) error {
			role := args[0]
			if err := checkReason("scale", cf.reason, false); err != nil {
				return err
			}
			switch {
			case *auto && len(args) == 2:
				return exitcode.Usagef("scale: --auto takes no count")
			case *auto:
				return scaleAuto(ctx, e, role)
			case len(args) == 1:
				return exitcode.Usagef("scale: give a count (scale ROLE N) or --auto")
			}
			n, err := strconv.Atoi(args[1])
			if err != nil || n < 0 {
				return exitcode.Usagef("scale: count %q is not a non-negative integer", args[1])
			}
			return scaleTo(ctx, e, role, n, *force, cf)
		}
	},
}

// scaleAuto removes role's count set by hand.
func scaleAuto(ctx context.Context, e *env, role string) error {
	old, err := e.store.ClearOverride(ctx, role)
	if err != nil {
		return err
	}
	c := Change{Changed: old != nil, Key: store.OverrideKey(e.store.Prefix(), role), Old: storedValue(old),
		subject: "desired count of role " + role, oldText: "set by hand", newText: "the autoscaler's (no count set by hand)"}
	var o schema.Override
	if old != nil && json.Unmarshal(old, &o) == nil {
		c.oldText = fmt.Sprintf("%d set by hand by %s", o.Count, o.By)
	}
	return e.printChange(c)
}

// roleReport is role's part of the reaper's last report (nil: no report,
// or the role is not in it).
func roleReport(rep *reaperkv.ReaperReport, role string) *reaperkv.RoleReport {
	if rep == nil {
		return nil
	}
	for i := range rep.Roles {
		if rep.Roles[i].Name == role {
			return &rep.Roles[i]
		}
	}
	return nil
}

// scaleTo sets role's count to n, asking first when n is below the count
// it replaces or the servers serving: the reaper then drains and deletes
// servers. The question is asked inside the store's check-and-set, about
// the count read there: when another writer moves it while the operator
// answers, the write is refused rather than made over a count nobody
// confirmed.
func scaleTo(ctx context.Context, e *env, role string, n int, force bool, cf confirmFlags) error {
	rep, err := e.store.ReaperReport(ctx)
	if err != nil {
		return err
	}
	rr := roleReport(rep, role)
	if !force {
		if err := withinAutoscale(rr, n); err != nil {
			return err
		}
	}
	var asked *store.ScaleBefore
	guard := func(b store.ScaleBefore) error {
		why := scaleDownWhy(b, rr, n)
		switch {
		case why == "":
			return nil
		case asked != nil && asked.Raw != b.Raw:
			return exitcode.Wrap(exitcode.No, fmt.Errorf("scale: the desired count of %s changed (to %s) while you were asked: nothing written; run the command again", role, oneLine(b.Raw)))
		case asked != nil:
			return nil
		}
		asked = &b
		return e.confirm("scale", cf.yes, fmt.Sprintf("This lowers the desired count of role %s %s: the reaper drains and deletes servers to match.", role, why), "")
	}
	o := schema.Override{Time: e.store.Now().UTC(), By: whoAmI(), Reason: cf.reason}
	b, err := e.store.SwapScale(ctx, role, n, o, guard)
	if err != nil {
		return err
	}
	return e.printChange(scaleChange(e, role, n, o, b, rr))
}

// scaleDownWhy says how a count of n lowers role (from its count, below
// its servers serving), or "" when it does not.
func scaleDownWhy(b store.ScaleBefore, rr *reaperkv.RoleReport, n int) string {
	cur, known := b.Desired, b.HasDesired
	if !known && b.Raw == "" && rr != nil {
		cur, known = rr.Desired, true // no count in Consul: the reaper's
	}
	switch {
	case !known && b.Raw != "":
		return fmt.Sprintf("to %d (its count in Consul, %s, is no count)", n, strconv.Quote(b.Raw))
	case known && n < cur:
		why := fmt.Sprintf("from %d to %d", cur, n)
		if rr != nil {
			why += fmt.Sprintf(" (%d serving now)", rr.Healthy)
		}
		return why
	case rr != nil && n < rr.Healthy:
		return fmt.Sprintf("to %d, below the %d servers serving now", n, rr.Healthy)
	}
	return ""
}

// scaleChange is what a scale changed.
func scaleChange(e *env, role string, n int, o schema.Override, b store.ScaleBefore, rr *reaperkv.RoleReport) Change {
	c := Change{Changed: !b.Unchanged(n), Key: store.DesiredKey(e.store.Prefix(), role), New: n, By: o.By, Reason: o.Reason,
		subject: "desired count of role " + role, oldText: "none", newText: strconv.Itoa(n), note: "set by hand"}
	switch {
	case b.HasDesired:
		c.Old, c.oldText = b.Desired, strconv.Itoa(b.Desired)
	case b.Raw != "":
		c.Old, c.oldText = b.Raw, strconv.Quote(b.Raw)+" (no count)"
	case rr != nil:
		c.oldText = fmt.Sprintf("none (the reaper's configured %d)", rr.Desired)
	}
	if c.Changed && b.Override == nil && rr != nil && rr.Autoscale != nil {
		c.note += "; was autoscaled"
	}
	if o.Reason != "" {
		c.note += "; reason: " + quoteReason(o.Reason)
	}
	return c
}

// withinAutoscale refuses a count outside an autoscaled role's min and
// max (as the reaper's last report gives them): a typo (40 for 4) would
// otherwise have the reaper build servers the operator never meant to pay
// for. A role the report does not show as autoscaled takes any count.
func withinAutoscale(rr *reaperkv.RoleReport, n int) error {
	if rr == nil || rr.Autoscale == nil {
		return nil
	}
	if a := rr.Autoscale; n < a.Min || n > a.Max {
		return exitcode.Usagef("scale: role %s is autoscaled between %d and %d: a count of %d is outside; give --force to set it anyway", rr.Name, a.Min, a.Max, n)
	}
	return nil
}

var cmdScaleIn = &command{
	name: "scale-in", minArgs: 2, maxArgs: -1, usage: "ROLE HOST...", json: true,
	summary: "Remove these hosts from ROLE: lower its desired count by their number and name them, in one transaction, so the reaper drains and deletes exactly them (through the drain handshake, under its safety rules). Every host must be a server of ROLE in the reaper's last report, not protected and not already leaving; otherwise nothing is written (exit 2).",
	run: func(ctx context.Context, e *env, args []string) error {
		role, hosts := args[0], args[1:]
		rep, err := e.store.ReaperReport(ctx)
		if err != nil {
			return err
		}
		drains := map[string]schema.DrainRecord{}
		for _, h := range hosts {
			if schema.ValidName("host", h) != nil {
				continue // store.ScaleIn names the bad name
			}
			d, _, err := e.store.Drain(ctx, h)
			if err != nil {
				return err
			}
			if d != nil {
				drains[h] = *d
			}
		}
		rr, err := scaleInCheck(rep, drains, role, hosts, e.store.Now())
		if err != nil {
			return err
		}
		// No count in Consul: the reaper's report says what it keeps the
		// role at (its configured count).
		base := func() (int, bool, error) { return rr.Desired, true, nil }
		n, err := e.store.ScaleIn(ctx, role, hosts, schema.ScaleInRequest{Time: e.store.Now().UTC(), By: whoAmI()}, base)
		if err != nil {
			return err
		}
		// ScaleIn lowered the count it read, check-and-set, by the hosts'
		// number.
		return e.printChange(Change{Changed: true, Key: store.DesiredKey(e.store.Prefix(), role), Old: n + len(hosts), New: n, By: whoAmI(),
			subject: "desired count of role " + role, oldText: strconv.Itoa(n + len(hosts)), newText: strconv.Itoa(n),
			note: "the reaper drains and deletes " + strings.Join(hosts, ", ")})
	},
}

// scaleInCheck checks, all hosts at once, that each is a server of role in
// the reaper's last report and is not already leaving it (in an operation
// of the reaper, or asked to drain): a mistyped or stale name must not
// lower the count, or the reaper would remove another server instead. It
// returns the role's part of the report.
func scaleInCheck(rep *reaperkv.ReaperReport, drains map[string]schema.DrainRecord, role string, hosts []string, now time.Time) (reaperkv.RoleReport, error) {
	if rep == nil {
		return reaperkv.RoleReport{}, &store.InputError{Err: fmt.Errorf("the reaper has written no report, so the servers of role %s are unknown: start the reaper (a dry run will do) before a scale-in", role)}
	}
	var rr *reaperkv.RoleReport
	var roles []string
	for i := range rep.Roles {
		roles = append(roles, rep.Roles[i].Name)
		if rep.Roles[i].Name == role {
			rr = &rep.Roles[i]
		}
	}
	if rr == nil {
		return reaperkv.RoleReport{}, &store.InputError{Err: fmt.Errorf("the reaper's report has no role %s (roles: %s)", role, strings.Join(roles, ", "))}
	}
	members := map[string]bool{}
	for _, m := range rr.Members {
		members[m] = true
	}
	leaving := map[string]string{}
	for _, j := range rep.Journal {
		if j.OldName != "" {
			leaving[j.OldName] = fmt.Sprintf("the reaper's operation %s (%s, %s) is removing it", j.ID, j.Kind, j.Phase)
		}
	}
	var bad []string
	for _, h := range hosts {
		d, draining := drains[h]
		switch {
		case !members[h]:
			bad = append(bad, fmt.Sprintf("%s is not a server of role %s", h, role))
		case leaving[h] != "":
			bad = append(bad, fmt.Sprintf("%s is already leaving: %s", h, leaving[h]))
		case draining:
			bad = append(bad, fmt.Sprintf("%s is already leaving: asked to drain at %s", h, d.Requested.UTC().Format(time.RFC3339)))
		}
	}
	if len(bad) > 0 {
		msg := strings.Join(bad, "; ")
		if age := now.Sub(rep.Time); rep.Interval > 0 && age > 3*rep.Interval {
			msg += fmt.Sprintf(" (the reaper's report is %s old: is it running?)", age.Round(time.Second))
		}
		return reaperkv.RoleReport{}, &store.InputError{Err: fmt.Errorf("scale-in of %s refused, nothing written: %s", role, msg)}
	}
	return *rr, nil
}

var cmdDrained = &command{
	name: "drained", minArgs: 0, maxArgs: 1, usage: "[HOST]", needsHost: true, hostArg: true,
	summary: "Answer the reaper's drain request for HOST (default this host): its work moved away, so the reaper deletes it now rather than at the drain timeout; or, with --failed, it could not be moved, so the reaper aborts a scale-in or max-age drain (the server stays) unless its role says on_drain_failure: delete. The answer goes into HOST's own record (<prefix>/hosts/HOST/drain), naming the request it answers: a node's token answers only for its own host (another's: exit 3), an operator's token for any. Exit 1 when HOST has no drain request (none was made, or it ended).",
	setup: func(fs *pflag.FlagSet) runFunc {
		failed := fs.Bool("failed", false, "moving the work away failed: as the request's on_failure says, the reaper aborts the drain (the server stays) or deletes at the drain timeout; status says why")
		detail := fs.String("detail", "", "what was done, or what failed")
		return func(ctx context.Context, e *env, args []string) error {
			host := e.host // HOST when given (hostArg)
			d, err := e.store.AnswerDrain(ctx, host, schema.DrainAnswer{Time: e.store.Now().UTC(), By: whoAmI(), Drained: !*failed, Detail: *detail})
			if errors.Is(err, store.ErrNoDrain) {
				fmt.Fprintf(e.Stderr, "orchestrate: no drain was requested for %s\n", host)
				return answerNo()
			}
			if err != nil {
				return err
			}
			e.log.Info("drain answered", "host", host, "drained", d.Answer.Drained, "by", d.Answer.By, "entry", d.Entry)
			return nil
		}
	},
}

var cmdProtect = &command{
	name: "protect", minArgs: 1, maxArgs: 1, usage: "HOST", json: true,
	summary: "Exempt HOST from scale-in (<prefix>/protect/HOST); it is still replaced when it fails its checks.",
	setup: func(fs *pflag.FlagSet) runFunc {
		reason := fs.String("reason", "", "why, recorded with the protection (one line, at most 500 bytes)")
		return func(ctx context.Context, e *env, args []string) error {
			if err := checkReason("protect", *reason, false); err != nil {
				return err
			}
			p := schema.Protection{Time: e.store.Now().UTC(), By: whoAmI(), Reason: *reason}
			old, err := e.store.Protect(ctx, args[0], p)
			if err != nil {
				return err
			}
			c := protectChange(e, args[0], old)
			c.Changed, c.New, c.By, c.Reason, c.newText = true, p, p.By, p.Reason, "protected by "+p.By
			if p.Reason != "" {
				c.newText += " (reason: " + quoteReason(p.Reason) + ")"
			}
			return e.printChange(c)
		}
	},
}

var cmdUnprotect = &command{
	name: "unprotect", minArgs: 1, maxArgs: 1, usage: "HOST", json: true,
	summary: "Lift HOST's scale-in protection.",
	run: func(ctx context.Context, e *env, args []string) error {
		old, err := e.store.Unprotect(ctx, args[0])
		if err != nil {
			return err
		}
		c := protectChange(e, args[0], old)
		c.Changed, c.newText = old != nil, "not protected"
		return e.printChange(c)
	},
}

// protectChange is a change of host's scale-in protection from old (the
// record replaced, nil: none); the caller fills in the new.
func protectChange(e *env, host string, old []byte) Change {
	c := Change{Key: store.ProtectKey(e.store.Prefix(), host), Old: storedValue(old),
		subject: "scale-in protection of " + host, oldText: "not protected"}
	var p schema.Protection
	switch {
	case old == nil:
	case json.Unmarshal(old, &p) == nil:
		c.oldText = "protected by " + p.By
	default:
		c.oldText = "a record orchestrate did not write"
	}
	return c
}

var cmdDrain = &command{
	name: "drain", minArgs: 0, maxArgs: 0, needsHost: true, handler: true,
	summary: "The node's drain handler (a key watch on <prefix>/drain/HOST runs it): when the reaper asked this host to drain and nobody answered yet, run --drain-cmd to move the work away, then answer (`orchestrate drained`, in <prefix>/hosts/HOST/drain). Exit 0 when there is nothing to do.",
	setup: func(fs *pflag.FlagSet) runFunc {
		cmd := fs.String("drain-cmd", "", "command (run with /bin/sh -c) that moves this host's work away; exit 0 means it did")
		lockFile := fs.String("lock-file", paths.DrainLock, "one drain at a time per host")
		passEnv := fs.StringArray("pass-env", nil, "pass this credential variable (CONSUL_HTTP_TOKEN, OS_*) to the command, which gets none of them otherwise (repeatable)")
		return func(ctx context.Context, e *env, _ []string) error {
			if *cmd == "" {
				return exitcode.Usagef("drain: --drain-cmd is required")
			}
			if err := watch.ValidPassEnv(*passEnv); err != nil {
				return exitcode.Usagef("drain: %v", err)
			}
			return runDrain(ctx, e, *cmd, *lockFile, *passEnv)
		}
	},
}

// maxDrainOutput bounds the command output kept in the answer's detail.
const maxDrainOutput = 2048

// runDrain runs the drain command once per request: a request already
// answered (by this handler, another run of it, or the platform) is left
// alone, which is what makes the watch firing again on its own answer
// harmless.
func runDrain(ctx context.Context, e *env, cmd, lockFile string, passEnv []string) error {
	d, _, err := e.store.Drain(ctx, e.host)
	if err != nil {
		return err
	}
	if d == nil || d.Answer != nil {
		e.log.Debug("drain: nothing to do", "host", e.host)
		return nil
	}
	unlock, err := watch.Lock(ctx, lockFile, true)
	if err != nil {
		return exitcode.Wrap(exitcode.Usage, fmt.Errorf("drain: --lock-file: %w", err))
	}
	defer unlock()
	// Another run may have answered while this one waited for the lock.
	if d, _, err = e.store.Drain(ctx, e.host); err != nil || d == nil || d.Answer != nil {
		return err
	}
	e.log.Info("drain requested: moving this host's work away", "host", e.host, "entry", d.Entry, "reason", d.Reason, "deadline", d.Deadline.UTC().Format(time.RFC3339))
	// At the deadline the reaper ends the drain, deleting the server or
	// aborting as the request says: the command gets until then.
	cctx, cancel := context.WithDeadline(ctx, d.Deadline)
	defer cancel()
	env := append(watch.ChildEnv(os.Environ(), passEnv), "ORCHESTRATE_HOST="+e.host, "ORCHESTRATE_ROLE="+d.Role, "ORCHESTRATE_DRAIN_REASON="+d.Reason)
	var out bytes.Buffer
	code, rerr := watch.RunCommand(cctx, cmd, &limitedWriter{w: &out, n: maxDrainOutput}, e.Stderr, env)
	e.Stdout.Write(out.Bytes())
	ans := schema.DrainAnswer{Time: e.store.Now().UTC(), By: "drain handler on " + e.host, Drained: rerr == nil && code == 0, Detail: strings.TrimSpace(out.String())}
	switch {
	case rerr != nil:
		ans.Detail = rerr.Error()
	case code != 0:
		ans.Detail = fmt.Sprintf("--drain-cmd exited %d: %s", code, ans.Detail)
	}
	_, err = e.store.AnswerDrain(context.WithoutCancel(ctx), e.host, ans)
	switch {
	case errors.Is(err, store.ErrNoDrain):
		// The reaper ended the drain first (its deadline passed): the
		// server stays or is going, as the request said; this answer
		// changes nothing.
		return exitcode.Wrap(exitcode.No, fmt.Errorf("drain: the reaper ended the drain of %s before this answer (drained: %t) could be recorded: `orchestrate reaper status` says how", e.host, ans.Drained))
	case err != nil:
		return err
	case !ans.Drained:
		return exitcode.Wrap(exitcode.No, fmt.Errorf("drain: moving the work away failed: %s", ans.Detail))
	}
	e.log.Info("drained: the work moved away; the reaper deletes this server now", "host", e.host)
	return nil
}

// limitedWriter keeps the first n bytes written to it.
type limitedWriter struct {
	w interface{ Write([]byte) (int, error) }
	n int
}

func (l *limitedWriter) Write(p []byte) (int, error) {
	if l.n > 0 {
		k := min(len(p), l.n)
		l.w.Write(p[:k])
		l.n -= k
	}
	return len(p), nil
}
