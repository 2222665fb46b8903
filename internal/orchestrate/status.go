package orchestrate

import (
	"context"
	"errors"
	"fmt"
	"io"
	"sort"
	"strings"
	"text/tabwriter"
	"time"
	"unicode/utf8"

	"github.com/hashicorp/consul/api"
	"github.com/spf13/pflag"

	"github.com/jiocloud/orchestrate/internal/exitcode"
	"github.com/jiocloud/orchestrate/internal/fault"
	"github.com/jiocloud/orchestrate/internal/store"
	"github.com/jiocloud/orchestrate/internal/store/reaperkv"
	"github.com/jiocloud/orchestrate/internal/store/schema"
)

var cmdStatus = &command{
	name: "status", minArgs: 0, maxArgs: 0, json: true,
	summary: "Print every host's version and state per category, with a summary line.",
	setup: func(fs *pflag.FlagSet) runFunc {
		noCatalog := fs.Bool("no-catalog", false, "list only hosts found in KV, not also Consul catalog nodes that never reported")
		return func(ctx context.Context, e *env, _ []string) error { return runStatus(ctx, e, *noCatalog) }
	},
}

// statusReport is `orchestrate status --json`.
type statusReport struct {
	CurrentVersion string          `json:"current_version"`
	Hosts          []hostReport    `json:"hosts"`
	Summary        statusSummary   `json:"summary"`
	Problems       []store.Problem `json:"problems,omitempty"`
	Reaper         *reaperReport   `json:"reaper,omitempty"`
	// Rollouts are the roles' rollouts of the current version.
	Rollouts []rolloutReport `json:"rollouts,omitempty"`
	// Scaling is what KV holds for scaling, for the platform and the
	// operator: exhausted capacity, counts set by hand, protected hosts,
	// drains in progress and hosts named for scale-in.
	Scaling scalingView `json:"scaling"`
}

// scalingView is the scaling part of the status (nodes' metric reports
// left out: each is under its host's records, hosts/<host>/metrics/).
type scalingView struct {
	Capacity  map[string]schema.CapacityRecord            `json:"capacity"`
	Overrides map[string]schema.Override                  `json:"overrides"`
	Protected map[string]schema.Protection                `json:"protected"`
	Drains    map[string]schema.DrainRecord               `json:"drains"`
	ScaleIn   map[string]map[string]schema.ScaleInRequest `json:"scale_in"`
}

// writeScaling prints the scaling lines of the status, when there are any.
func writeScaling(w io.Writer, v scalingView) {
	for _, role := range sortedKeys(v.Capacity) {
		c := v.Capacity[role]
		fmt.Fprintf(w, "capacity of role %s EXHAUSTED since %s (%s): %s\n", role, c.Since.UTC().Format(time.RFC3339), c.Class, oneLine(c.Reason))
	}
	for _, role := range sortedKeys(v.Overrides) {
		o := v.Overrides[role]
		fmt.Fprintf(w, "role %s: count %d set by hand by %s at %s (an autoscaled role holds it until `orchestrate scale %s --auto`)\n", role, o.Count, oneLine(o.By), o.Time.UTC().Format(time.RFC3339), role)
	}
	for _, role := range sortedKeys(v.ScaleIn) {
		fmt.Fprintf(w, "role %s: named for scale-in: %s\n", role, strings.Join(sortedKeys(v.ScaleIn[role]), ", "))
	}
	for _, h := range sortedKeys(v.Protected) {
		fmt.Fprintf(w, "protected from scale-in: %s (by %s: %s)\n", h, oneLine(v.Protected[h].By), oneLine(v.Protected[h].Reason))
	}
	for _, h := range sortedKeys(v.Drains) {
		d := v.Drains[h]
		ans := "no answer yet"
		if a := d.Answer; a != nil && a.Drained {
			ans = fmt.Sprintf("drained (%s at %s)", oneLine(a.By), a.Time.UTC().Format(time.RFC3339))
		} else if a != nil {
			ans = fmt.Sprintf("moving the work away FAILED (%s: %s)", oneLine(a.By), oneLine(a.Detail))
		}
		fmt.Fprintf(w, "draining %s (role %s, %s): requested %s, answer by %s (%s); %s\n", h, d.Role, oneLine(d.Reason), d.Requested.UTC().Format(time.RFC3339), d.Deadline.UTC().Format(time.RFC3339), drainEnds(d), ans)
	}
}

// drainEnds says what a drain's failed answer, and no answer by its
// deadline, lead to (a request written before it said so: delete).
func drainEnds(d schema.DrainRecord) string {
	keeps := func(v string) string {
		if v == reaperkv.DrainAbort {
			return "the server stays"
		}
		return "deleted"
	}
	return "failed: " + keeps(d.OnFailure) + "; no answer: " + keeps(d.OnTimeout)
}

type hostReport struct {
	Host      string                  `json:"host"`
	Version   string                  `json:"version"`
	OnDesired bool                    `json:"on_desired"`
	InCatalog bool                    `json:"in_catalog"`
	Status    map[string]store.Status `json:"status"`
}

type statusSummary struct {
	Hosts         int `json:"hosts"`
	OnDesired     int `json:"on_desired"`
	Failed        int `json:"failed"`
	Suspect       int `json:"suspect"`
	NotReporting  int `json:"not_reporting"`
	CorruptValues int `json:"corrupt_values"`
	// Silent and Orphaned count the reaper's silent and orphaned hosts,
	// from its last report when it is fresh (listed in its section).
	Silent   int `json:"silent"`
	Orphaned int `json:"orphaned"`
}

func runStatus(ctx context.Context, e *env, noCatalog bool) error {
	snap, err := e.store.Snapshot(ctx)
	if err != nil {
		return err
	}
	catalog := map[string]bool{}
	if !noCatalog {
		nodes, meta, err := e.client.Catalog().Nodes((&api.QueryOptions{}).WithContext(ctx))
		if err != nil {
			return fmt.Errorf("list catalog nodes: %w", err)
		}
		// A node the token may not read would be missing from the table,
		// as if it had never joined.
		if meta != nil && meta.ResultsFilteredByACLs {
			return exitcode.Wrap(exitcode.Unavailable, errors.New("list catalog nodes: some nodes are hidden from this token by Consul's ACLs: it needs node_prefix \"\" read (or use --no-catalog)"))
		}
		for _, n := range nodes {
			catalog[n.Node] = true
		}
	}
	rep := buildStatus(snap, catalog)
	reportProblems(e, snap)
	if n := len(snap.OldLayout); n > 0 {
		fmt.Fprintf(e.Stderr, "orchestrate: note: %d records are still in the layout before node restriction (read where a host wrote none of its own yet): `orchestrate migrate` moves them\n", n)
	}
	rolls, rollErr := e.store.Rollouts(ctx)
	switch {
	case rollErr == nil:
		rep.Rollouts = rolloutReports(rolls, snap.CurrentVersion)
	case fault.IsInput(rollErr):
		// Shown like a corrupt status key: the rest of the status stands.
		fmt.Fprintf(e.Stderr, "orchestrate: warning: %v\n", rollErr)
	default:
		return rollErr
	}
	defer printReaperStatus(e, rep.withReaper(ctx, e))
	rep.Summary.Silent, rep.Summary.Orphaned = hostMarkCounts(rep.Reaper)
	if e.json {
		if err := e.printJSON(rep); err != nil {
			return err
		}
	} else {
		writeStatusTable(e.Stdout, rep, snap.Categories(), e.store.Now())
	}
	if len(snap.Problems) > 0 {
		return exitcode.Usagef("%d keys under %s/ hold values orchestrate did not write (listed above)", len(snap.Problems), e.store.Prefix())
	}
	if rollErr != nil {
		return exitcode.Wrap(exitcode.Usage, rollErr)
	}
	return unreadableRollout(rep.Rollouts...)
}

func buildStatus(snap *store.Snapshot, catalog map[string]bool) statusReport {
	names := map[string]bool{}
	for n := range snap.Hosts {
		names[n] = true
	}
	for n := range catalog {
		names[n] = true
	}
	sorted := make([]string, 0, len(names))
	for n := range names {
		sorted = append(sorted, n)
	}
	sort.Strings(sorted)
	rep := statusReport{CurrentVersion: snap.CurrentVersion, Hosts: []hostReport{}, Problems: snap.Problems}
	for _, n := range sorted {
		hr := hostReport{Host: n, InCatalog: catalog[n], Status: map[string]store.Status{}}
		if h := snap.Hosts[n]; h != nil {
			hr.Version = h.Version
			hr.Status = h.Status
		}
		hr.OnDesired = hr.Version != "" && hr.Version == snap.CurrentVersion
		rep.Hosts = append(rep.Hosts, hr)
		rep.Summary.Hosts++
		if hr.OnDesired {
			rep.Summary.OnDesired++
		}
		if hr.Version == "" {
			rep.Summary.NotReporting++
		}
		for _, st := range hr.Status {
			if st.State == store.StateFailed {
				rep.Summary.Failed++
				break
			}
		}
		if st, ok := hr.Status[store.CategoryPuppet]; ok && st.State == store.StateFailed && st.Suspect {
			rep.Summary.Suspect++
		}
	}
	rep.Summary.CorruptValues = len(snap.Problems)
	sc := snap.Scaling
	rep.Scaling = scalingView{Capacity: sc.Capacity, Overrides: sc.Overrides, Protected: sc.Protected, Drains: sc.Drains, ScaleIn: sc.ScaleIn}
	return rep
}

func writeStatusTable(w io.Writer, rep statusReport, categories []string, now time.Time) {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	header := []string{"HOST", "VERSION", "DESIRED"}
	for _, c := range categories {
		header = append(header, strings.ToUpper(c))
	}
	fmt.Fprintln(tw, strings.Join(header, "\t"))
	for _, h := range rep.Hosts {
		version, desired := h.Version, "no"
		if version == "" {
			version = "-"
		}
		if h.OnDesired {
			desired = "yes"
		}
		row := []string{h.Host, version, desired}
		for _, c := range categories {
			st, ok := h.Status[c]
			switch {
			case !ok:
				row = append(row, "-")
			case st.Corrupt:
				row = append(row, strings.TrimSpace(st.State+" (unreadable)"))
			case st.Suspect && st.State == store.StateFailed:
				row = append(row, "failed SUSPECT "+age(now, st.Time))
			default:
				row = append(row, st.State+" "+age(now, st.Time))
			}
		}
		fmt.Fprintln(tw, strings.Join(row, "\t"))
	}
	tw.Flush()
	// Failed and pending states with their details, so the table says why.
	first := true
	for _, h := range rep.Hosts {
		for _, c := range categories {
			st, ok := h.Status[c]
			if !ok || (st.State != store.StateFailed && st.State != store.StatePending) {
				continue
			}
			if first {
				fmt.Fprintln(w, "\nfailed or pending:")
				first = false
			}
			detail := oneLine(st.Detail)
			if st.Corrupt {
				detail = "(stored value unreadable)"
			}
			fmt.Fprintf(w, "  %s %s %s %s ago: %s\n", h.Host, c, st.State, age(now, st.Time), truncate(detail, 300))
			if st.LogURL != "" {
				fmt.Fprintf(w, "    log %s\n", oneLine(st.LogURL))
			}
		}
	}
	want := rep.CurrentVersion
	if want == "" {
		want = "(none set)"
	}
	fmt.Fprintf(w, "\ndesired version %s: hosts on desired version %d/%d, failed %d, not reporting %d",
		want, rep.Summary.OnDesired, rep.Summary.Hosts, rep.Summary.Failed, rep.Summary.NotReporting)
	if rep.Summary.Suspect > 0 {
		// Suspects failed the configuration that must always pass; a
		// reaper role with replace_suspect replaces them.
		fmt.Fprintf(w, ", suspect %d", rep.Summary.Suspect)
	}
	if s := rep.Summary; s.Silent > 0 || s.Orphaned > 0 {
		// The reaper's judgement (listed in its section below).
		fmt.Fprintf(w, ", silent %d, orphaned %d", s.Silent, s.Orphaned)
	}
	fmt.Fprintln(w)
	for _, r := range rep.Rollouts {
		writeRollout(w, r)
	}
	writeScaling(w, rep.Scaling)
}

// age is a short human duration since t: 42s, 5m, 3h, 4d.
func age(now, t time.Time) string {
	if t.IsZero() {
		return "?"
	}
	d := now.Sub(t)
	switch {
	case d < 0:
		return "0s"
	case d < time.Minute:
		return fmt.Sprintf("%ds", int(d.Seconds()))
	case d < time.Hour:
		return fmt.Sprintf("%dm", int(d.Minutes()))
	case d < 48*time.Hour:
		return fmt.Sprintf("%dh", int(d.Hours()))
	default:
		return fmt.Sprintf("%dd", int(d.Hours()/24))
	}
}

// truncate shortens s to at most n bytes, on a rune boundary, marking the cut.
func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	for n > 0 && !utf8.RuneStart(s[n]) {
		n--
	}
	return s[:n] + "..."
}
