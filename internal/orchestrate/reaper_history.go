package orchestrate

import (
	"context"
	"fmt"
	"io"
	"slices"
	"sort"
	"text/tabwriter"
	"time"

	"github.com/jiocloud/orchestrate/internal/exitcode"
	"github.com/jiocloud/orchestrate/internal/store/reaperkv"
)

// historyFilter is what `orchestrate reaper history` shows of the history.
type historyFilter struct {
	role  string
	since time.Duration
}

// runHistory prints the reaper's activity history, oldest first, or as
// JSON (a list, [] when empty).
func runHistory(ctx context.Context, e *env, f historyFilter) error {
	if f.since < 0 {
		return exitcode.Usagef("--since %s: want a positive duration", f.since)
	}
	h, err := e.store.ReaperHistory(ctx)
	if err != nil {
		return err
	}
	if rec, _, err := e.store.ArmRecord(ctx); err == nil && rec != nil {
		h = withArmRecord(h, *rec)
	}
	var shown []reaperkv.Activity
	for _, a := range h {
		if (f.role == "" || a.Role == f.role) && (f.since == 0 || !a.Time.Before(e.store.Now().Add(-f.since))) {
			shown = append(shown, a)
		}
	}
	if e.json {
		return e.printJSON(orEmpty(shown))
	}
	writeHistory(e.Stdout, shown)
	return nil
}

// withArmRecord adds the arm record to the history, in time order: an arm
// or disarm by hand is the operator's, not the reaper's, so its history
// does not hold it (only the latest, which the record keeps, is shown).
// The reaper's own first arm is in the history already.
func withArmRecord(h []reaperkv.Activity, rec reaperkv.ArmRecord) []reaperkv.Activity {
	for _, a := range h {
		if a.Kind == reaperkv.ActivityArm && a.Reason == rec.Reason && a.Time.Sub(rec.Time).Abs() < time.Minute {
			return h
		}
	}
	a := reaperkv.Activity{Time: rec.Time, Kind: reaperkv.ActivityArm, Action: armState(rec) + " by " + rec.By, Reason: rec.Reason, Result: "done"}
	i := sort.Search(len(h), func(i int) bool { return h[i].Time.After(rec.Time) })
	return slices.Insert(h, i, a)
}

// writeHistory prints activities as a table, one a line.
func writeHistory(w io.Writer, h []reaperkv.Activity) {
	if len(h) == 0 {
		fmt.Fprintln(w, "no reaper activity recorded")
		return
	}
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "TIME\tKIND\tROLE\tRESULT\tWHAT")
	for _, a := range h {
		what := a.Action
		if what == "" {
			what = a.Reason
		} else if a.Reason != "" {
			what += " (" + a.Reason + ")"
		}
		if a.Error != "" {
			what += ": " + a.Error
		}
		role := a.Role
		if role == "" {
			role = "-"
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\n", a.Time.UTC().Format(time.RFC3339), a.Kind, role, a.Result, oneLine(what))
	}
	tw.Flush()
}
