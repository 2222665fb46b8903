package orchestrate

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/pflag"

	"github.com/jiocloud/orchestrate/internal/exitcode"
	"github.com/jiocloud/orchestrate/internal/store"
	"github.com/jiocloud/orchestrate/internal/store/reaperkv"
	"github.com/jiocloud/orchestrate/internal/store/schema"
)

// Holds: the operator's request under <prefix>/reaper/hold/<host>, which
// the reaper honours (reaper/README.md, "Hold a failure for a human").
// This binary writes and releases the record and lists them; which role
// a host is of, the role's max_held and its serving count come from the
// reaper's report (this binary never links the cloud client).

var cmdHold = &command{
	name: "hold", minArgs: 1, maxArgs: 2, json: true,
	usage:   holdUsage,
	summary: "Keep a (failing) server for a human: the reaper puts it in maintenance (out of DNS and healthy_services), never deletes, repairs, drains, refreshes or scales it in, and builds its replacement, until the hold ends (--for, default 24h, at most 7d; or `hold release`). Holds count against the role's max_held. list prints every hold record.",
	setup: func(fs *pflag.FlagSet) runFunc {
		o := holdOpts{}
		fs.StringVar(&o.reason, "reason", "", "why the server is held (required; one line, at most 500 bytes)")
		fs.StringVar(&o.dur, "for", "24h", "how long the hold lasts (a Go duration, or whole days as 2d), at most 7d")
		return func(ctx context.Context, e *env, args []string) error { return runHold(ctx, e, args, o) }
	},
}

const holdUsage = "HOST --reason R [--for D] | release HOST | list"

type holdOpts struct {
	reason, dur string
}

func runHold(ctx context.Context, e *env, args []string, o holdOpts) error {
	switch {
	case args[0] == "list" && len(args) == 1:
		return holdList(ctx, e)
	case args[0] == "release" && len(args) == 2:
		return holdRelease(ctx, e, args[1])
	case args[0] == "list" || args[0] == "release":
		return exitcode.Usagef("hold: usage: orchestrate hold %s", holdUsage)
	case len(args) != 1:
		return exitcode.Usagef("hold: unknown action %q (want HOST, release HOST or list)", args[0])
	}
	return holdHost(ctx, e, args[0], o)
}

// parseHoldFor reads --for: a positive Go duration or whole days (2d),
// at most reaperkv.MaxHoldFor.
func parseHoldFor(s string) (time.Duration, error) {
	var d time.Duration
	if n, ok := strings.CutSuffix(s, "d"); ok {
		days, err := strconv.Atoi(n)
		if err != nil {
			return 0, fmt.Errorf("--for %q: not a duration (say 24h, 90m or 2d)", s)
		}
		d = time.Duration(days) * 24 * time.Hour
	} else {
		var err error
		if d, err = time.ParseDuration(s); err != nil {
			return 0, fmt.Errorf("--for %q: not a duration (say 24h, 90m or 2d)", s)
		}
	}
	switch {
	case d <= 0:
		return 0, fmt.Errorf("--for %s: a hold lasts a positive time", s)
	case d > reaperkv.MaxHoldFor:
		return 0, fmt.Errorf("--for %s: longer than a hold may last (%s); a server kept aside for longer is `orchestrate protect` or a scale-in", s, reaperkv.MaxHoldFor)
	}
	return d, nil
}

// holdHost checks the hold against the reaper's report and the records
// standing, then writes it (compare-and-set: a record written meanwhile
// stops it).
func holdHost(ctx context.Context, e *env, host string, o holdOpts) error {
	if err := schema.ValidName("host", host); err != nil {
		return exitcode.Usagef("hold: %v", err)
	}
	if err := checkReason("hold", o.reason, true); err != nil {
		return err
	}
	d, err := parseHoldFor(o.dur)
	if err != nil {
		return exitcode.Usagef("hold: %v", err)
	}
	st, err := e.store.ReaperReport(ctx)
	if err != nil {
		return err
	}
	if st == nil {
		return exitcode.Usagef("hold: the reaper has written no report: which role %s is of, and the role's max_held, are unknown", host)
	}
	rr := roleOfHost(st, host)
	if rr == nil {
		return exitcode.Usagef("hold: %s is no server of any role the reaper reports (a standby, or a server of no role, cannot be held)", host)
	}
	holds, _, err := e.store.Holds(ctx)
	if err != nil {
		return err
	}
	now := e.store.Now().UTC()
	if why := holdRefused(rr, holds, host, now); why != "" {
		return exitcode.Usagef("hold: %s", why)
	}
	rec := reaperkv.HoldRecord{Host: host, Role: rr.Name, Reason: o.reason, By: whoAmI(), Time: now, Until: now.Add(d)}
	old, had := holds[host]
	if had && old.ID != "" && old.Active(now) {
		rec.ID = old.ID // the same server's hold, made longer or given a new reason
	}
	if err := putHold(ctx, e, rec, old.Index); err != nil {
		return err
	}
	c := holdChange(e, old, had, rec)
	c.Reason, c.newText = rec.Reason, fmt.Sprintf("held until %s by %s (reason: %s)", rec.Until.Format(time.RFC3339), rec.By, quoteReason(rec.Reason))
	c.note = "the reaper takes it out of service and builds its replacement"
	return e.printChange(c)
}

// putHold writes rec at index; another writer first is exit 1.
func putHold(ctx context.Context, e *env, rec reaperkv.HoldRecord, index uint64) error {
	err := e.store.PutHold(ctx, rec, index)
	if errors.Is(err, store.ErrHoldMoved) {
		return exitcode.Wrap(exitcode.No, err)
	}
	return err
}

// holdChange is a change of a hold record from old (had: there was one)
// to rec; the caller says what rec is.
func holdChange(e *env, old reaperkv.HoldRecord, had bool, rec reaperkv.HoldRecord) Change {
	c := Change{Changed: true, Key: reaperkv.HoldKey(e.store.Prefix(), rec.Host), New: json.RawMessage(reaperkv.MarshalHold(rec)), By: whoAmI(),
		subject: "hold of " + rec.Host, oldText: "not held"}
	if had {
		c.Old = json.RawMessage(reaperkv.MarshalHold(old))
		c.oldText = fmt.Sprintf("%s until %s by %s", old.State(e.store.Now()), old.Until.UTC().Format(time.RFC3339), old.By)
	}
	return c
}

// roleOfHost is the role of the reaper's report whose members name host.
func roleOfHost(st *reaperkv.ReaperReport, host string) *reaperkv.RoleReport {
	for i := range st.Roles {
		if slices.Contains(st.Roles[i].Members, host) {
			return &st.Roles[i]
		}
	}
	return nil
}

// holdRefused says why host may not be held now, or "": the role's
// max_held is reached by other holds standing, or the host serves and is
// the role's last serving server (or holding it goes below min_healthy).
func holdRefused(rr *reaperkv.RoleReport, holds map[string]reaperkv.HoldRecord, host string, now time.Time) string {
	var others []string
	for h, rec := range holds {
		if h != host && rec.Role == rr.Name && rec.Active(now) {
			others = append(others, h)
		}
	}
	sort.Strings(others)
	switch {
	case rr.MaxHeld == 0:
		return fmt.Sprintf("role %s holds no server (its max_held is 0, or the reaper that reported predates holds)", rr.Name)
	case len(others) >= rr.MaxHeld:
		return fmt.Sprintf("role %s already holds %d of its max_held %d (%s): release one first (`orchestrate hold release HOST`)", rr.Name, len(others), rr.MaxHeld, strings.Join(others, ", "))
	}
	if !serving(rr, host) {
		return ""
	}
	left := rr.Healthy - 1
	switch {
	case left < 1:
		return fmt.Sprintf("%s is the last serving server of role %s: a hold takes it out of service", host, rr.Name)
	case left < rr.MinHealthy:
		return fmt.Sprintf("holding %s takes it out of service and leaves role %s %d serving, below its min_healthy %d", host, rr.Name, left, rr.MinHealthy)
	}
	return ""
}

// serving says whether the report has host serving: listed as a member
// and not among the servers needing attention, or there in a state that
// serves.
func serving(rr *reaperkv.RoleReport, host string) bool {
	for _, a := range rr.Attention {
		if a.Name == host {
			return a.State == reaperkv.ServerExpired || a.State == reaperkv.ServerErrorInGrace
		}
	}
	return true
}

// holdRelease ends host's hold: the record stays, marked released (so
// hold_failures does not take the server again), and the reaper judges
// the server as any other from its next cycle.
func holdRelease(ctx context.Context, e *env, host string) error {
	if err := schema.ValidName("host", host); err != nil {
		return exitcode.Usagef("hold release: %v", err)
	}
	holds, problems, err := e.store.Holds(ctx)
	if err != nil {
		return err
	}
	now := e.store.Now().UTC()
	rec, ok := holds[host]
	if !ok {
		for _, p := range problems {
			if p.Key == reaperkv.HoldKey(e.store.Prefix(), host) {
				return exitcode.Usagef("hold release: %s: %s; it holds nothing (`consul kv delete %s` removes it)", p.Key, p.Problem, p.Key)
			}
		}
		return exitcode.Usagef("hold release: %s is not held (no hold record)", host)
	}
	if !rec.Active(now) {
		return exitcode.Usagef("hold release: %s is not held: its hold is %s", host, rec.State(now))
	}
	old := rec
	rec.Released, rec.ReleasedBy = now, whoAmI()
	if err := putHold(ctx, e, rec, rec.Index); err != nil {
		return err
	}
	c := holdChange(e, old, true, rec)
	c.newText = "released by " + rec.ReleasedBy
	c.note = "the reaper judges the server as any other again, and replaces it if it still fails"
	return e.printChange(c)
}

// holdLine is one hold record in `hold list`.
type holdLine struct {
	reaperkv.HoldRecord
	// State is held, expired or released (by this machine's clock).
	State string `json:"state"`
}

// holdList prints every hold record, held ones first, then by host.
func holdList(ctx context.Context, e *env) error {
	holds, problems, err := e.store.Holds(ctx)
	if err != nil {
		return err
	}
	now := e.store.Now()
	out := []holdLine{}
	for _, rec := range holds {
		out = append(out, holdLine{HoldRecord: rec, State: rec.State(now)})
	}
	sort.Slice(out, func(i, j int) bool {
		if (out[i].State == reaperkv.ServerHeld) != (out[j].State == reaperkv.ServerHeld) {
			return out[i].State == reaperkv.ServerHeld
		}
		return out[i].Host < out[j].Host
	})
	for _, p := range problems {
		fmt.Fprintf(e.Stderr, "orchestrate: %s\n", p)
	}
	if e.json {
		return e.printJSON(out)
	}
	if len(out) == 0 {
		fmt.Fprintln(e.Stdout, "no hold")
	}
	for _, l := range out {
		by := l.By
		if l.Auto {
			by = "reaper (hold_failures)"
		}
		fmt.Fprintf(e.Stdout, "%s\t%s\t%s\tuntil %s\tby %s\t%s\n", l.Host, l.Role, l.State, l.Until.UTC().Format(time.RFC3339), oneLine(by), oneLine(l.Reason))
	}
	return nil
}
