package orchestrate

import (
	"context"
	"fmt"
	"io"
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
