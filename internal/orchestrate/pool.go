package orchestrate

import (
	"context"
	"fmt"
	"io"
	"time"

	"github.com/hashicorp/consul/api"
	"github.com/spf13/pflag"

	"github.com/jiocloud/orchestrate/internal/exitcode"
	"github.com/jiocloud/orchestrate/internal/store"
	"github.com/jiocloud/orchestrate/internal/store/reaperkv"
	"github.com/jiocloud/orchestrate/internal/store/schema"
)

// The warm pool commands read and write Consul KV only: the reaper
// publishes each standby under <prefix>/reaper/pool/<role>/<host> and its
// pools' report in its state, and carries out a flush request written
// under <prefix>/reaper/pool-flush/<role>. This binary never links the
// cloud client.

var cmdPool = &command{
	name: "pool", minArgs: 1, maxArgs: 2, usage: "status [ROLE] | flush ROLE", json: true,
	summary: "Print the reaper's warm pools (status: per role the standbys ready, converging and failed, claims in the last hour, average claim time), or ask the reaper to replace every standby of a role, one at a time, never a serving server (flush).",
	setup: func(fs *pflag.FlagSet) runFunc {
		var cf confirmFlags
		cf.register(fs, "the flush request (pool status shows it)")
		return func(ctx context.Context, e *env, args []string) error { return runPool(ctx, e, args, cf) }
	},
}

// poolRole is one role's pool in `pool status`.
type poolRole struct {
	Role     string                    `json:"role"`
	Report   *reaperkv.PoolReport      `json:"report,omitempty"`
	Standbys []reaperkv.StandbyRecord  `json:"standbys"`
	Flush    *reaperkv.PoolFlushRecord `json:"flush,omitempty"`
	// ClaimsLastHour and AvgClaim summarise the report's claims.
	ClaimsLastHour int    `json:"claims_last_hour"`
	AvgClaim       string `json:"avg_claim,omitempty"`
}

func runPool(ctx context.Context, e *env, args []string, cf confirmFlags) error {
	switch args[0] {
	case "status":
		role := ""
		if len(args) == 2 {
			role = args[1]
		}
		return poolStatus(ctx, e, role)
	case "flush":
		if len(args) != 2 {
			return exitcode.Usagef("pool flush: name the role")
		}
		if err := checkReason("pool flush", cf.reason, false); err != nil {
			return err
		}
		return poolFlush(ctx, e, args[1], cf)
	}
	return exitcode.Usagef("pool: unknown action %q (want status or flush)", args[0])
}

// pools returns each role with a pool (or standbys, or a flush request),
// from the reaper's state and the pool records.
func pools(ctx context.Context, e *env) ([]poolRole, *reaperkv.ReaperReport, error) {
	st, err := e.store.ReaperReport(ctx)
	if err != nil {
		return nil, nil, err
	}
	ps, err := e.store.Pool(ctx)
	if err != nil {
		return nil, nil, err
	}
	seen := map[string]bool{}
	var out []poolRole
	add := func(role string, rep *reaperkv.PoolReport) {
		if seen[role] {
			return
		}
		seen[role] = true
		pr := poolRole{Role: role, Report: rep, Standbys: ps.Standbys[role]}
		if pr.Standbys == nil {
			pr.Standbys = []reaperkv.StandbyRecord{}
		}
		if f, ok := ps.Flushes[role]; ok {
			pr.Flush = &f
		}
		if rep != nil {
			var total time.Duration
			for _, c := range rep.Claims {
				if e.store.Now().Sub(c.Time) < time.Hour {
					pr.ClaimsLastHour++
					total += c.Serving
				}
			}
			if pr.ClaimsLastHour > 0 {
				pr.AvgClaim = (total / time.Duration(pr.ClaimsLastHour)).Round(time.Second).String()
			}
		}
		out = append(out, pr)
	}
	if st != nil {
		for _, r := range st.Roles {
			if r.Pool != nil {
				add(r.Name, r.Pool)
			}
		}
	}
	for _, role := range sortedKeys(ps.Standbys) {
		add(role, nil)
	}
	for _, role := range sortedKeys(ps.Flushes) {
		add(role, nil)
	}
	return out, st, nil
}

func poolStatus(ctx context.Context, e *env, role string) error {
	all, st, err := pools(ctx, e)
	if err != nil {
		return err
	}
	if role != "" {
		var one []poolRole
		for _, p := range all {
			if p.Role == role {
				one = append(one, p)
			}
		}
		if len(one) == 0 {
			return exitcode.Usagef("pool status: role %q has no warm pool (the reaper reports none, and no standby is recorded)", role)
		}
		all = one
	}
	if e.json {
		if all == nil {
			all = []poolRole{}
		}
		return e.printJSON(all)
	}
	if st == nil {
		fmt.Fprintln(e.Stdout, "reaper: no state yet (no reaper has led a cycle under this prefix)")
	}
	if len(all) == 0 {
		fmt.Fprintln(e.Stdout, "no warm pool")
	}
	for _, p := range all {
		writePool(e.Stdout, p, e.store.Now())
	}
	return nil
}

// writePool is the text form of one role's pool.
func writePool(w io.Writer, p poolRole, now time.Time) {
	summary := "no report from the reaper"
	if p.Report != nil {
		summary = p.Report.String()
	}
	fmt.Fprintf(w, "role %s: %s; claimed in the last hour: %d", p.Role, summary, p.ClaimsLastHour)
	if p.AvgClaim != "" {
		fmt.Fprintf(w, ", average claim time %s", p.AvgClaim)
	}
	fmt.Fprintln(w)
	if p.Report != nil && p.Report.Why != "" {
		fmt.Fprintf(w, "  not refilled: %s\n", p.Report.Why)
	}
	if f := p.Flush; f != nil {
		fmt.Fprintf(w, "  flush requested by %s at %s (%s): in progress\n", oneLine(f.By), f.Time.UTC().Format(time.RFC3339), oneLine(f.Reason))
	}
	for _, s := range p.Standbys {
		fmt.Fprintf(w, "  %s %s %s (made %s ago)\n", s.Host, s.ID, s.State, now.Sub(s.Created).Round(time.Second))
	}
}

func poolFlush(ctx context.Context, e *env, role string, cf confirmFlags) error {
	if err := schema.ValidName("role", role); err != nil {
		return exitcode.Usagef("pool flush: %v", err)
	}
	all, _, err := pools(ctx, e)
	if err != nil {
		return err
	}
	found := false
	for _, p := range all {
		found = found || (p.Role == role && p.Report != nil)
	}
	if !found {
		return exitcode.Usagef("pool flush: the reaper reports no warm pool for role %q (is warm_pool set for it, and a reaper leading?)", role)
	}
	prompt := fmt.Sprintf("This has the reaper replace every standby of role %s's warm pool, one at a time.", role)
	if err := e.confirm("pool flush", cf.yes, prompt, ""); err != nil {
		return err
	}
	reason := cf.reason
	if reason == "" {
		reason = "flushed by hand with orchestrate pool flush"
	}
	rec := reaperkv.PoolFlushRecord{Time: e.store.Now().UTC(), By: whoAmI(), Reason: reason}
	old, err := e.store.RequestPoolFlush(ctx, role, rec)
	if err != nil {
		return err
	}
	c := Change{Changed: true, Key: reaperkv.PoolFlushKey(e.store.Prefix(), role), Old: storedValue(old), New: rec, By: rec.By, Reason: rec.Reason,
		subject: "warm pool of role " + role, oldText: "no flush requested",
		newText: fmt.Sprintf("flush requested by %s (reason: %s)", rec.By, quoteReason(rec.Reason)),
		note:    "the reaper replaces every standby made before now, one at a time"}
	if old != nil {
		c.oldText = "a flush requested already"
		if prev, err := store.ParsePoolFlush(&api.KVPair{Key: c.Key, Value: old}); err == nil {
			c.oldText = fmt.Sprintf("a flush requested by %s at %s", prev.By, prev.Time.UTC().Format(time.RFC3339))
		}
	}
	return e.printChange(c)
}
