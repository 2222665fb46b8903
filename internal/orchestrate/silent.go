package orchestrate

import (
	"context"
	"fmt"
	"io"
	"sort"
	"time"

	"github.com/jiocloud/orchestrate/internal/store"
	"github.com/jiocloud/orchestrate/internal/store/reaperkv"
)

// CategorySilent is the category under which `get-failures` lists the
// reaper's silent hosts (no host writes a status record of it: it is
// the reaper's judgement, from its last report).
const CategorySilent = "silent"

// silentFailures are the silent hosts of the reaper's last report, as
// failures of category silent (since: when their records last moved, by
// the reaper's clock). Only Nova, which the reaper reads and orchestrate
// does not, says a host's server still exists, so a stale or unreadable
// report lists none, with a warning on stderr.
func silentFailures(ctx context.Context, e *env) []store.Failure {
	rr := loadReaperReport(ctx, e)
	switch {
	case rr.Error != "":
		fmt.Fprintf(e.Stderr, "orchestrate: warning: silent hosts unknown: %s\n", rr.Error)
		return nil
	case !rr.Report:
		return nil
	case rr.Stale:
		fmt.Fprintf(e.Stderr, "orchestrate: warning: silent hosts unknown: the reaper's report is %s old (no leader is running cycles)\n", rr.Age)
		return nil
	}
	var out []store.Failure
	now := e.store.Now()
	for _, r := range rr.State.Roles {
		for _, h := range r.Silent {
			out = append(out, store.Failure{Host: h.Host, Category: CategorySilent, Since: h.Since,
				Detail: fmt.Sprintf("its records have not moved for %s (no heartbeat nor status); Nova lists its server (role %s)", age(now, h.Since), r.Name)})
		}
	}
	return out
}

// withSilent adds the reaper's silent hosts to failures when no category
// is asked for, or silent is, sorted by host then category as the rest.
func withSilent(ctx context.Context, e *env, failures []store.Failure, categories []string) []store.Failure {
	want := len(categories) == 0
	for _, c := range categories {
		want = want || c == CategorySilent
	}
	if !want {
		return failures
	}
	failures = append(failures, silentFailures(ctx, e)...)
	sort.SliceStable(failures, func(i, j int) bool {
		if failures[i].Host != failures[j].Host {
			return failures[i].Host < failures[j].Host
		}
		return failures[i].Category < failures[j].Category
	})
	return failures
}

// writeHostMarks prints a role's silent and orphaned hosts, in the
// reaper's section of status.
func writeHostMarks(w io.Writer, r reaperkv.RoleReport) {
	for _, h := range r.Silent {
		fmt.Fprintf(w, "    %s SILENT: its records last moved at %s\n", h.Host, h.Since.UTC().Format(time.RFC3339))
	}
	if n := r.SilentCount - len(r.Silent); n > 0 {
		fmt.Fprintf(w, "    ... and %d more silent\n", n)
	}
	for _, h := range r.Orphaned {
		fmt.Fprintf(w, "    %s ORPHANED: records and no server since %s; its records are removed at %s\n", h.Host, h.Since.UTC().Format(time.RFC3339), h.Until.UTC().Format(time.RFC3339))
	}
	if n := r.OrphanedCount - len(r.Orphaned); n > 0 {
		fmt.Fprintf(w, "    ... and %d more orphaned\n", n)
	}
}

// hostMarkCounts counts the silent and orphaned hosts of a fresh report.
func hostMarkCounts(rr *reaperReport) (silent, orphaned int) {
	if rr == nil || !rr.Report || rr.Stale {
		return 0, 0
	}
	for _, r := range rr.State.Roles {
		silent += r.SilentCount
		orphaned += r.OrphanedCount
	}
	return silent, orphaned
}
