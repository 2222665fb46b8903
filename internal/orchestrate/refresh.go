package orchestrate

import (
	"context"
	"fmt"
	"time"

	"github.com/spf13/pflag"

	"github.com/jiocloud/orchestrate/internal/exitcode"
	"github.com/jiocloud/orchestrate/internal/store/reaperkv"
	"github.com/jiocloud/orchestrate/internal/store/schema"
)

// Instance refresh: the operator's request under
// <prefix>/reaper/refresh/<role>, which the reaper carries out and writes
// its progress into (reaper/README.md, "Instance refresh"). This binary
// writes the request and reads the reaper's report; it never links the
// cloud client.

var cmdRefresh = &command{
	name: "refresh", minArgs: 1, maxArgs: 2, json: true,
	usage:   "ROLE [--min-healthy-percent P] [--checkpoints 25,50] [--cancel | --rollback] | continue ROLE | status [ROLE]",
	summary: "Ask the reaper to replace a role's servers not built from its boot spec, create-first, in batches that keep --min-healthy-percent of it serving (default: the role's refresh_min_healthy_percent), waiting at each checkpoint (a share of the role on the spec) for `refresh continue`; a replacement that does not serve stops it until `refresh continue`. --rollback rolls the role back to the spec before the current one and pins it there; --cancel stops starting replacements (refresh: auto too) until a new request. status prints where each role's refresh stands.",
	setup: func(fs *pflag.FlagSet) runFunc {
		o := refreshOpts{}
		fs.IntVar(&o.minHealthy, "min-healthy-percent", 0, "share of the role kept serving, 1-100 (default: the role's refresh_min_healthy_percent)")
		fs.IntSliceVar(&o.checkpoints, "checkpoints", nil, "shares of the role on the spec (percent, ascending) at which the refresh waits for `refresh continue`")
		fs.BoolVar(&o.cancel, "cancel", false, "cancel the role's refresh: replacements in flight finish, no new one starts")
		fs.BoolVar(&o.rollback, "rollback", false, "roll the role back to the boot spec before its current one")
		o.confirm.register(fs, "the request (refresh status shows it); a refresh or rollback asks first")
		return func(ctx context.Context, e *env, args []string) error { return runRefresh(ctx, e, args, o) }
	},
}

type refreshOpts struct {
	minHealthy       int
	checkpoints      []int
	cancel, rollback bool
	confirm          confirmFlags
}

func runRefresh(ctx context.Context, e *env, args []string, o refreshOpts) error {
	verb := args[0]
	if err := checkReason("refresh", o.confirm.reason, false); err != nil {
		return err
	}
	switch {
	case verb == "status":
		role := ""
		if len(args) == 2 {
			role = args[1]
		}
		return refreshStatus(ctx, e, role)
	case verb == "continue":
		if len(args) != 2 {
			return exitcode.Usagef("refresh continue: name the role")
		}
		return refreshContinue(ctx, e, args[1])
	case len(args) != 1:
		return exitcode.Usagef("refresh: unknown action %q (want ROLE, continue ROLE or status [ROLE])", verb)
	case o.cancel && (o.rollback || o.minHealthy != 0 || len(o.checkpoints) > 0):
		return exitcode.Usagef("refresh: --cancel takes no other option")
	case o.cancel:
		return refreshCancel(ctx, e, verb, o.confirm.reason)
	}
	return refreshStart(ctx, e, verb, o)
}

// refreshRole checks that the reaper reports role, and returns its report.
func refreshRole(ctx context.Context, e *env, role string) (*reaperkv.RoleReport, error) {
	if err := schema.ValidName("role", role); err != nil {
		return nil, exitcode.Usagef("refresh: %v", err)
	}
	st, err := e.store.ReaperReport(ctx)
	if err != nil {
		return nil, err
	}
	if rr := roleReport(st, role); rr != nil {
		return rr, nil
	}
	return nil, exitcode.Usagef("refresh: the reaper reports no role %q (is it in the reaper's configuration, and a reaper leading?)", role)
}

func refreshStart(ctx context.Context, e *env, role string, o refreshOpts) error {
	rr, err := refreshRole(ctx, e, role)
	if err != nil {
		return err
	}
	what := "refresh"
	if o.rollback {
		what = "rollback"
		_, specs, err := e.store.Refreshes(ctx)
		if err != nil {
			return err
		}
		if specs[role].Previous == nil {
			return exitcode.Usagef("refresh --rollback: the reaper recorded no boot spec of %s before its current one: nothing to roll back to", role)
		}
	}
	if o.minHealthy < 0 || o.minHealthy > 100 {
		return exitcode.Usagef("refresh: --min-healthy-percent %d is not between 1 and 100", o.minHealthy)
	}
	reason := o.confirm.reason
	if reason == "" {
		reason = what + " requested with orchestrate refresh"
	}
	rec := reaperkv.RefreshRecord{Time: e.store.Now().UTC(), By: whoAmI(), Reason: reason, MinHealthyPercent: o.minHealthy, Checkpoints: o.checkpoints, Rollback: o.rollback}
	if err := rec.Check(); err != nil {
		return exitcode.Usagef("refresh: %v", err)
	}
	prompt := fmt.Sprintf("This has the reaper replace the servers of role %s not on its boot spec %s (%d now), create-first, in batches.", role, shortSpec(rr.Spec), rr.Drifted+rr.SpecUnknown)
	if o.rollback {
		prompt = fmt.Sprintf("This has the reaper roll every server of role %s back to its previous boot spec, create-first, in batches.", role)
	}
	if err := e.confirm("refresh", o.confirm.yes, prompt, ""); err != nil {
		return err
	}
	old, err := e.store.RequestRefresh(ctx, role, rec)
	if err != nil {
		return err
	}
	return e.printChange(refreshChange(e, role, old, rec, what+" requested by "+rec.By+" (reason: "+quoteReason(rec.Reason)+")"))
}

// refreshChange is a change of role's refresh request from old (its value
// as stored, nil: none) to rec, which newText describes.
func refreshChange(e *env, role string, old []byte, rec reaperkv.RefreshRecord, newText string) Change {
	key := reaperkv.RefreshKey(e.store.Prefix(), role)
	c := Change{Changed: true, Key: key, Old: storedValue(old), New: rec, By: rec.By, Reason: rec.Reason,
		subject: "refresh of role " + role, oldText: "no request", newText: newText}
	if old != nil {
		c.oldText = "a request the reaper cannot read"
		if _, prev, err := reaperkv.ParseRefresh(schema.RelKey(e.store.Prefix(), key), old, 0); err == nil {
			c.oldText = fmt.Sprintf("requested by %s at %s, %s", prev.By, prev.Time.UTC().Format(time.RFC3339), stateOr(prev.State, "not seen by the reaper yet"))
		}
	}
	return c
}

func refreshCancel(ctx context.Context, e *env, role, reason string) error {
	if _, err := refreshRole(ctx, e, role); err != nil {
		return err
	}
	recs, _, err := e.store.Refreshes(ctx)
	if err != nil {
		return err
	}
	now := e.store.Now().UTC()
	rec, ok := recs[role]
	if !ok {
		// No request: the role's own refresh (refresh: auto) is held.
		rec = reaperkv.RefreshRecord{Time: now, By: whoAmI(), Reason: "cancelled with orchestrate refresh --cancel"}
	}
	if !rec.Cancelled.IsZero() {
		return exitcode.Usagef("refresh --cancel: the refresh of %s was cancelled at %s already", role, rec.Cancelled.Format(time.RFC3339))
	}
	old := rec
	rec.Cancelled = now
	if reason != "" {
		rec.Reason = reason
	}
	if err := e.store.PutRefresh(ctx, role, rec, rec.Index); err != nil {
		return err
	}
	c := refreshChange(e, role, oldValue(ok, old), rec, fmt.Sprintf("cancelled by %s (reason: %s)", whoAmI(), quoteReason(rec.Reason)))
	c.By, c.note = whoAmI(), "replacements in flight finish, no new one starts until a new request"
	return e.printChange(c)
}

// oldValue is a refresh request as it was read (nil when there was none).
func oldValue(had bool, rec reaperkv.RefreshRecord) []byte {
	if !had {
		return nil
	}
	return rec.Value()
}

func refreshContinue(ctx context.Context, e *env, role string) error {
	if _, err := refreshRole(ctx, e, role); err != nil {
		return err
	}
	recs, _, err := e.store.Refreshes(ctx)
	if err != nil {
		return err
	}
	rec, ok := recs[role]
	old := rec
	switch {
	case !ok:
		return exitcode.Usagef("refresh continue: role %s has no refresh request", role)
	case rec.State == reaperkv.RefreshFailed && rec.Failures > rec.Retries:
		rec.Retries = rec.Failures
	case rec.State == reaperkv.RefreshCheckpoint && rec.Continued < len(rec.Checkpoints):
		rec.Continued++
	default:
		return exitcode.Usagef("refresh continue: the refresh of %s is %s, not waiting at a checkpoint nor failed: nothing to continue", role, stateOr(rec.State, "not seen by the reaper yet"))
	}
	if err := e.store.PutRefresh(ctx, role, rec, rec.Index); err != nil {
		return err
	}
	c := refreshChange(e, role, old.Value(), rec, fmt.Sprintf("continued (checkpoints passed: %d, failures retried: %d)", rec.Continued, rec.Retries))
	c.By, c.Reason = whoAmI(), ""
	return e.printChange(c)
}

// refreshLine is one role's refresh in `refresh status`.
type refreshLine struct {
	Role    string                  `json:"role"`
	Request *reaperkv.RefreshRecord `json:"request,omitempty"`
	Report  *reaperkv.RefreshReport `json:"report,omitempty"`
	// Spec is the role's spec as the reaper builds it; Drifted its
	// servers built from another one or none recorded.
	Spec    string `json:"spec,omitempty"`
	Drifted int    `json:"drifted"`
}

func refreshStatus(ctx context.Context, e *env, role string) error {
	if role != "" {
		if err := schema.ValidName("role", role); err != nil {
			return exitcode.Usagef("refresh status: %v", err)
		}
	}
	recs, _, err := e.store.Refreshes(ctx)
	if err != nil {
		return err
	}
	st, err := e.store.ReaperReport(ctx)
	if err != nil {
		return err
	}
	lines := map[string]*refreshLine{}
	if st != nil {
		for _, r := range st.Roles {
			if r.Refresh != nil || r.Drifted+r.SpecUnknown > 0 {
				lines[r.Name] = &refreshLine{Role: r.Name, Report: r.Refresh, Spec: r.Spec, Drifted: r.Drifted + r.SpecUnknown}
			}
		}
	}
	for name, rec := range recs {
		if lines[name] == nil {
			lines[name] = &refreshLine{Role: name}
		}
		lines[name].Request = &rec
	}
	out := []refreshLine{}
	for _, name := range sortedKeys(lines) {
		if role == "" || name == role {
			out = append(out, *lines[name])
		}
	}
	if e.json {
		return e.printJSON(out)
	}
	if len(out) == 0 {
		fmt.Fprintln(e.Stdout, "no refresh: every role's servers are on its boot spec, and no request stands")
	}
	for _, l := range out {
		writeRefresh(e, l)
	}
	return nil
}

func writeRefresh(e *env, l refreshLine) {
	fmt.Fprintf(e.Stdout, "role %s: spec %s, %d server(s) drifted\n", l.Role, shortSpec(l.Spec), l.Drifted)
	if l.Report != nil {
		fmt.Fprintf(e.Stdout, "  %s\n", oneLine(l.Report.String()))
	}
	if r := l.Request; r != nil {
		fmt.Fprintf(e.Stdout, "  requested by %s at %s (%s): %s", oneLine(r.By), r.Time.UTC().Format(time.RFC3339), oneLine(r.Reason), stateOr(r.State, "not seen by the reaper yet"))
		if r.Detail != "" {
			fmt.Fprintf(e.Stdout, " (%s)", oneLine(r.Detail))
		}
		fmt.Fprintln(e.Stdout)
	}
}

func stateOr(s, none string) string {
	if s == "" {
		return none
	}
	return s
}

func shortSpec(s string) string { return s[:min(12, len(s))] }
