package orchestrate

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/spf13/pflag"

	"github.com/jiocloud/orchestrate/internal/exitcode"
	"github.com/jiocloud/orchestrate/internal/fault"
	"github.com/jiocloud/orchestrate/internal/store"
	"github.com/jiocloud/orchestrate/internal/store/schema"
	"github.com/jiocloud/orchestrate/internal/term"
)

var cmdStatus = &command{
	name: "status", minArgs: 0, maxArgs: 0, json: true,
	summary: "The cloud at a glance: the desired version, the reaper, and per role what is wrong, what the reaper does next and why it holds; healthy roles on one line. --problems: only what is wrong, exit 1 when something is, 0 when nothing is. --host H: one host in detail. --watch: redraw when Consul changes.",
	setup: func(fs *pflag.FlagSet) runFunc {
		o := &statusOptions{}
		fs.BoolVar(&o.noCatalog, "no-catalog", false, "read only KV: not the Consul catalog (nodes that never reported, checks, the datacenter)")
		fs.StringSliceVar(&o.roles, "role", nil, "only ROLE (repeatable, or a comma list)")
		fs.StringVar(&o.host, "host", "", "one host in detail: version, each category's state with detail and time, role, checks, what the reaper thinks of it")
		fs.BoolVar(&o.problems, "problems", false, "only what is wrong; exit 1 when something is, 0 when nothing is")
		fs.BoolVar(&o.watch, "watch", false, "redraw when what the screen reads changes in Consul (at most once a second) until interrupted")
		return func(ctx context.Context, e *env, _ []string) error {
			o.roleGiven = fs.Changed("role")
			return runStatus(ctx, e, *o)
		}
	},
}

// statusOptions are status's flags.
type statusOptions struct {
	noCatalog, problems, watch bool
	roles                      []string
	// roleGiven: --role was given, if empty.
	roleGiven bool
	host      string
}

// validate names the first bad flag value.
func (o statusOptions) validate() error {
	if o.roleGiven && len(o.roles) == 0 {
		return exitcode.Usagef("status --role: empty: name a role")
	}
	for _, r := range o.roles {
		if err := schema.ValidName("role", r); err != nil {
			return exitcode.Usagef("status --role: %v", err)
		}
	}
	if o.host != "" {
		if err := schema.ValidName("host", o.host); err != nil {
			return exitcode.Usagef("status --host: %v", err)
		}
		if len(o.roles) > 0 {
			return exitcode.Usagef("status: --host and --role do not go together (a host's detail names its role)")
		}
	}
	return nil
}

// statusSchema is the version of `status --json`'s schema: raised when a
// field changes meaning or goes; new fields do not raise it.
const statusSchema = 1

func runStatus(ctx context.Context, e *env, o statusOptions) error {
	if err := o.validate(); err != nil {
		return err
	}
	if now := clockFrom(ctx); now != nil {
		e.store.Now = now
	}
	if o.watch {
		return watchStatus(ctx, e, o)
	}
	var out bytes.Buffer
	err := drawStatus(ctx, e, o, &out, term.Width(e.Stdout))
	if _, werr := e.Stdout.Write(out.Bytes()); werr != nil && err == nil {
		err = werr
	}
	return err
}

// drawStatus reads what the screen shows and writes it (text or JSON) to
// w, fitted to width; warnings go to e.Stderr. The error carries the exit
// code: 2 for values orchestrate did not write, 1 with --problems when
// something is wrong, 3 when Consul could not be read.
func drawStatus(ctx context.Context, e *env, o statusOptions, w io.Writer, width int) error {
	in, err := gatherStatus(ctx, e, o)
	if err != nil {
		return err
	}
	rep := buildStatus(in, e.store.Now())
	if o.host != "" {
		return drawHost(e, rep, in, o.host, w, width)
	}
	if err := rep.filterRoles(o.roles); err != nil {
		return err
	}
	if o.problems {
		rep.onlyProblems()
	}
	if e.json {
		if err := e.withStdout(w).printJSON(rep); err != nil {
			return err
		}
	} else {
		writeScreen(w, rep, o, width)
	}
	return statusExit(e, rep, in, o)
}

// statusExit is the exit code of a drawn status: input errors first (the
// screen stands, the values are named on stderr), then --problems' answer.
func statusExit(e *env, rep statusReport, in *statusInput, o statusOptions) error {
	if n := len(in.snap.Problems); n > 0 {
		return exitcode.Usagef("%d keys under %s/ hold values orchestrate did not write (listed above)", n, e.store.Prefix())
	}
	if in.rollErr != nil {
		return exitcode.Wrap(exitcode.Usage, in.rollErr)
	}
	if err := unreadableRollout(rep.Rollouts...); err != nil {
		return err
	}
	if err := in.reaper.err; err != nil && fault.IsInput(err) {
		return exitcode.Wrap(exitcode.Usage, err)
	}
	if o.problems && rep.ProblemCount > 0 {
		return answerNo()
	}
	return nil
}

// withStdout is e writing its output to w.
func (e *env) withStdout(w io.Writer) *env {
	c := *e
	c.Stdout = w
	return &c
}

// statusInput is everything one screen reads, in one pass.
type statusInput struct {
	snap    *store.Snapshot
	catalog catalogView
	rolls   map[string]*store.Rollout
	// rollErr is a rollout record that cannot be read: shown like a
	// corrupt status key, the rest of the status stands.
	rollErr error
	reaper  *reaperReport
}

// gatherStatus reads the snapshot, the catalog, the rollouts and the
// reaper's report.
func gatherStatus(ctx context.Context, e *env, o statusOptions) (*statusInput, error) {
	snap, err := e.store.Snapshot(ctx)
	if err != nil {
		return nil, err
	}
	in := &statusInput{snap: snap, catalog: catalogView{Nodes: map[string]bool{}, Checks: map[string][]nodeCheck{}}}
	if !o.noCatalog {
		if in.catalog, err = readCatalog(ctx, e); err != nil {
			return nil, err
		}
	}
	if in.catalog.Datacenter == "" {
		in.catalog.Datacenter = agentDatacenter(e.client)
	}
	reportProblems(e, snap)
	if n := len(snap.OldLayout); n > 0 {
		fmt.Fprintf(e.Stderr, "orchestrate: note: %d records are still in the layout before node restriction (read where a host wrote none of its own yet): `orchestrate migrate` moves them\n", n)
	}
	in.rolls, err = e.store.Rollouts(ctx)
	switch {
	case err == nil:
	case fault.IsInput(err):
		fmt.Fprintf(e.Stderr, "orchestrate: warning: %v\n", err)
		in.rollErr = err
	default:
		return nil, err
	}
	// The reaper is optional: a report that cannot be read is shown on
	// the screen (and one the reaper did not write is exit 2, after it).
	in.reaper = loadReaperReport(ctx, e)
	return in, nil
}

// hostReport is one host in `status --json`'s hosts.
type hostReport struct {
	Host      string                  `json:"host"`
	Role      string                  `json:"role"`
	Version   string                  `json:"version"`
	OnDesired bool                    `json:"on_desired"`
	InCatalog bool                    `json:"in_catalog"`
	Status    map[string]store.Status `json:"status"`
	// Checks are the host's Consul checks that do not pass.
	Checks []nodeCheck `json:"checks"`
}

// statusSummary counts the hosts on the screen.
type statusSummary struct {
	Hosts         int `json:"hosts"`
	OnDesired     int `json:"on_desired"`
	Failed        int `json:"failed"`
	Suspect       int `json:"suspect"`
	NotReporting  int `json:"not_reporting"`
	CorruptValues int `json:"corrupt_values"`
	// Silent and Orphaned count the reaper's silent and orphaned hosts,
	// from its last report when it is fresh.
	Silent   int `json:"silent"`
	Orphaned int `json:"orphaned"`
}

// hostReports lists every host (in KV and, with the catalog, every
// node), sorted, and counts them.
func hostReports(in *statusInput, roleOf map[string]string) ([]hostReport, statusSummary) {
	names := map[string]bool{}
	for n := range in.snap.Hosts {
		names[n] = true
	}
	for n := range in.catalog.Nodes {
		names[n] = true
	}
	sorted := sortedKeys(names)
	out := make([]hostReport, 0, len(sorted))
	var sum statusSummary
	for _, n := range sorted {
		hr := hostReport{Host: n, Role: roleOf[n], InCatalog: in.catalog.Nodes[n], Status: map[string]store.Status{}, Checks: orEmpty(in.catalog.Checks[n])}
		if h := in.snap.Hosts[n]; h != nil {
			hr.Version, hr.Status = h.Version, h.Status
		}
		hr.OnDesired = hr.Version != "" && hr.Version == in.snap.CurrentVersion
		out = append(out, hr)
		sum.add(hr)
	}
	sum.CorruptValues = len(in.snap.Problems)
	sum.Silent, sum.Orphaned = hostMarkCounts(in.reaper)
	return out, sum
}

// add counts one host.
func (s *statusSummary) add(h hostReport) {
	s.Hosts++
	if h.OnDesired {
		s.OnDesired++
	}
	if h.Version == "" {
		s.NotReporting++
	}
	for _, c := range sortedKeys(h.Status) {
		if h.Status[c].State == store.StateFailed {
			s.Failed++
			break
		}
	}
	if st, ok := h.Status[store.CategoryPuppet]; ok && st.State == store.StateFailed && st.Suspect {
		s.Suspect++
	}
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

// joinLimit joins at most n of items and says how many more there are.
func joinLimit(items []string, n int) string {
	if len(items) <= n {
		return strings.Join(items, ", ")
	}
	return fmt.Sprintf("%s +%d more", strings.Join(items[:n], ", "), len(items)-n)
}
