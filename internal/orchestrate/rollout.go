package orchestrate

import (
	"context"
	"errors"
	"fmt"
	"io"
	"sort"
	"strconv"
	"strings"

	"github.com/spf13/pflag"

	"github.com/jiocloud/orchestrate/internal/exitcode"
	"github.com/jiocloud/orchestrate/internal/rollout"
	"github.com/jiocloud/orchestrate/internal/store"
	"github.com/jiocloud/orchestrate/internal/store/schema"
)

// rolloutOptions are rollout's flags; empty means "keep what is set".
type rolloutOptions struct {
	maxUnavailable, maxFailures, after string
}

var cmdRollout = &command{
	name: "rollout", minArgs: 1, maxArgs: 2, usage: "ROLE | resume ROLE", json: true,
	summary: "Set how ROLE's hosts roll a new version out and print its rollout: at most --max-unavailable of them in their consistent step at once (each claims an update slot in its own key, held by its Consul session), none before --after ROLE[:N] has N hosts on the version, and none once more than --max-failures failed it. `rollout resume ROLE` lifts a halt (the failures so far no longer count). Flags not given keep their value.",
	setup: func(fs *pflag.FlagSet) runFunc {
		o := &rolloutOptions{}
		fs.StringVar(&o.maxUnavailable, "max-unavailable", "", "how many hosts of ROLE may run their consistent step at once: N, or all (the default: no bound)")
		fs.StringVar(&o.maxFailures, "max-failures", "", "halt the rollout once more than N hosts of ROLE failed the version: N, or none (the default: never halt)")
		fs.StringVar(&o.after, "after", "", "ROLE2[:N]: ROLE's hosts start only once N hosts of ROLE2 run the version (N defaults to ROLE2's desired count); none clears it")
		return func(ctx context.Context, e *env, args []string) error { return runRollout(ctx, e, *o, args) }
	},
}

func runRollout(ctx context.Context, e *env, o rolloutOptions, args []string) error {
	version, err := e.store.CurrentVersion(ctx)
	if err != nil && !errors.Is(err, store.ErrNoCurrentVersion) {
		return err
	}
	if args[0] == "resume" {
		if len(args) != 2 {
			return exitcode.Usagef("rollout: usage: orchestrate rollout resume ROLE")
		}
		if o != (rolloutOptions{}) {
			return exitcode.Usagef("rollout resume takes no policy flags; set them with `orchestrate rollout %s ...`", args[1])
		}
		return resumeRollout(ctx, e, args[1], version)
	}
	if len(args) != 1 {
		return exitcode.Usagef("rollout: got %d arguments, usage: orchestrate rollout ROLE [flags] | resume ROLE", len(args))
	}
	role := args[0]
	if err := schema.ValidName("role", role); err != nil {
		return exitcode.Usagef("rollout: %v", err)
	}
	if o != (rolloutOptions{}) {
		c, err := setRolloutPolicy(ctx, e, role, o)
		if err != nil {
			return err
		}
		// With --json the change is the answer: one JSON document.
		if err := e.printChange(c); err != nil || e.json {
			return err
		}
	}
	r, err := e.store.Rollout(ctx, role)
	if err != nil {
		return err
	}
	rep := newRolloutReport(r, version)
	if e.json {
		if err := e.printJSON(rep); err != nil {
			return err
		}
	} else {
		writeRollout(e.Stdout, rep)
	}
	return unreadableRollout(rep)
}

// unreadableRollout is exit 2 naming the hosts' records that hold values
// orchestrate did not write, once the report is printed (as status does
// for a corrupt status key).
func unreadableRollout(reps ...rolloutReport) error {
	var keys []string
	for _, r := range reps {
		keys = append(keys, r.Unreadable...)
	}
	if len(keys) == 0 {
		return nil
	}
	return exitcode.Usagef("rollout records hold values orchestrate did not write: %s (counted the safe way meanwhile; the host's next converge rewrites its own)", strings.Join(keys, ", "))
}

// setRolloutPolicy changes role's policy as o says, and returns the
// change: the policy the store's check-and-set replaced, and the new.
func setRolloutPolicy(ctx context.Context, e *env, role string, o rolloutOptions) (Change, error) {
	change, err := o.change()
	if err != nil {
		return Change{}, exitcode.Usagef("rollout: %v", err)
	}
	var old store.RolloutPolicy
	p, err := e.store.SetRolloutPolicy(ctx, role, func(p *store.RolloutPolicy) error {
		old = *p
		return change(p)
	})
	if err != nil {
		return Change{}, err
	}
	c := Change{Changed: true, Key: store.RolloutPolicyKey(e.store.Prefix(), role), New: p, By: whoAmI(),
		subject: "rollout policy of " + role, oldText: "none (" + describePolicy(old) + ")", newText: describePolicy(p)}
	if !old.Time.IsZero() {
		c.Old, c.oldText = old, describePolicy(old)
	}
	return c, nil
}

func resumeRollout(ctx context.Context, e *env, role, version string) error {
	if err := schema.ValidName("role", role); err != nil {
		return exitcode.Usagef("rollout resume: %v", err)
	}
	if version == "" {
		return exitcode.Usagef("rollout resume %s: no current_version is set, so no rollout to resume", role)
	}
	halted, forgiven, err := rollout.Resume(ctx, e.store, role, version)
	if err != nil {
		return err
	}
	// Old and new are the rollout's state: the resume record holds no
	// halt, which the hosts' failures make.
	c := Change{Changed: halted, Key: store.RolloutResumeKey(e.store.Prefix(), role), Old: "halted", New: "resumed", By: whoAmI(),
		subject: "rollout of " + role + " to " + version, oldText: "halted", newText: "resumed",
		note: "failures forgiven: " + orDash(strings.Join(forgiven, ", "))}
	if !halted {
		c.Old, c.New, c.newText, c.note = "not halted", "not halted", "not halted", "nothing to resume"
	}
	return e.printChange(c)
}

// change turns the flags given into a change of the stored policy.
func (o rolloutOptions) change() (func(*store.RolloutPolicy) error, error) {
	var sets []func(*store.RolloutPolicy)
	if o.maxUnavailable != "" {
		n := 0
		if o.maxUnavailable != "all" {
			v, err := strconv.Atoi(o.maxUnavailable)
			if err != nil || v < 1 {
				return nil, fmt.Errorf("--max-unavailable %q: want a count of at least 1, or all", o.maxUnavailable)
			}
			n = v
		}
		sets = append(sets, func(p *store.RolloutPolicy) { p.MaxUnavailable = n })
	}
	if o.maxFailures != "" {
		var n *int
		if o.maxFailures != "none" {
			v, err := strconv.Atoi(o.maxFailures)
			if err != nil || v < 0 {
				return nil, fmt.Errorf("--max-failures %q: want a count of at least 0, or none", o.maxFailures)
			}
			n = &v
		}
		sets = append(sets, func(p *store.RolloutPolicy) { p.MaxFailures = n })
	}
	if o.after != "" {
		role, hosts := "", 0
		if o.after != "none" {
			r, count, hasCount := strings.Cut(o.after, ":")
			if err := schema.ValidName("--after role", r); err != nil {
				return nil, err
			}
			if hasCount {
				v, err := strconv.Atoi(count)
				if err != nil || v < 1 {
					return nil, fmt.Errorf("--after %q: the count after the colon must be at least 1", o.after)
				}
				hosts = v
			}
			role = r
		}
		sets = append(sets, func(p *store.RolloutPolicy) { p.After, p.AfterHosts = role, hosts })
	}
	return func(p *store.RolloutPolicy) error {
		for _, set := range sets {
			set(p)
		}
		return nil
	}, nil
}

func describePolicy(p store.RolloutPolicy) string {
	parts := []string{"max-unavailable " + countOr(p.MaxUnavailable, "all")}
	if p.MaxFailures != nil {
		parts = append(parts, "max-failures "+strconv.Itoa(*p.MaxFailures))
	} else {
		parts = append(parts, "max-failures none")
	}
	if p.After != "" {
		parts = append(parts, "after "+p.After+":"+countOr(p.AfterHosts, "its desired count"))
	}
	return strings.Join(parts, ", ")
}

func countOr(n int, zero string) string {
	if n == 0 {
		return zero
	}
	return strconv.Itoa(n)
}

// rolloutReport is one role's rollout of the desired version, for
// `rollout ROLE` and `status`.
type rolloutReport struct {
	Role    string `json:"role"`
	Version string `json:"version"`
	Policy  string `json:"policy"`
	// InUse lists the hosts holding a slot; Limit is 0 for no bound.
	// Fresh lists new hosts (no version yet) building, which hold a slot
	// outside the bound.
	InUse   []string `json:"in_use"`
	Limit   int      `json:"limit"`
	Fresh   []string `json:"fresh"`
	Done    int      `json:"done"`
	Pending int      `json:"pending"`
	Failed  []string `json:"failed"`
	Halted  string   `json:"halted,omitempty"`
	// Blocked says why no slot is granted even so: slots of an older
	// orchestrate's layout are held.
	Blocked string `json:"blocked,omitempty"`
	// Unreadable lists the hosts' own records whose values orchestrate did
	// not write: each counts the safe way (a claim as a slot in use, a
	// progress record as a failure).
	Unreadable []string `json:"unreadable,omitempty"`
}

func newRolloutReport(r *store.Rollout, version string) rolloutReport {
	rep := rolloutReport{Role: r.Role, Version: version, Policy: describePolicy(r.Policy),
		InUse: r.Holders(), Fresh: r.Fresh(), Limit: r.Policy.MaxUnavailable, Failed: orEmpty(r.Failed(version)),
		Done: len(r.Done(version))}
	for _, h := range r.Hosts {
		if h.Version == version && h.State == store.RolloutPending {
			rep.Pending++
		}
	}
	rep.Halted = rollout.Halted(r, version)
	rep.Blocked = rollout.LegacyReason(r)
	rep.Unreadable = r.Unreadable
	return rep
}

func writeRollout(w io.Writer, r rolloutReport) {
	fmt.Fprintf(w, "rollout of %s to %s (%s): slots in use %d/%s (%s), done %d, pending %d, failed %d (%s)",
		r.Role, orDash(r.Version), r.Policy, len(r.InUse), countOr(r.Limit, "all"), orDash(strings.Join(r.InUse, ", ")),
		r.Done, r.Pending, len(r.Failed), orDash(strings.Join(r.Failed, ", ")))
	if len(r.Fresh) > 0 {
		fmt.Fprintf(w, ", new hosts building %d (%s)", len(r.Fresh), strings.Join(r.Fresh, ", "))
	}
	if r.Halted != "" {
		fmt.Fprintf(w, "; HALTED: %s", r.Halted)
	}
	fmt.Fprintln(w)
	if r.Blocked != "" {
		fmt.Fprintf(w, "  no slot is granted: %s\n", r.Blocked)
	}
	for _, k := range r.Unreadable {
		fmt.Fprintf(w, "  %s: unreadable (not written by orchestrate); counted as a slot in use or a failure\n", k)
	}
}

// rolloutReports lists every role's rollout of version, sorted by role.
func rolloutReports(rolls map[string]*store.Rollout, version string) []rolloutReport {
	out := make([]rolloutReport, 0, len(rolls))
	for _, r := range rolls {
		out = append(out, newRolloutReport(r, version))
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Role < out[j].Role })
	return out
}

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}
