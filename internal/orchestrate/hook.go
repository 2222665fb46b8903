package orchestrate

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/pflag"

	"github.com/jiocloud/orchestrate/internal/exitcode"
	"github.com/jiocloud/orchestrate/internal/store"
	"github.com/jiocloud/orchestrate/internal/store/schema"
)

// The lifecycle hooks' commands read and write Consul KV only: the reaper
// publishes each hook that waits under <prefix>/hook/<role>/<host>, and
// takes the answer written under <prefix>/hook-answer/<role>/<host>.

var cmdHook = &command{
	name: "hook", minArgs: 1, maxArgs: 4, usage: "list | complete ROLE HOST continue|abandon", json: true,
	summary: "The reaper's lifecycle hooks (a role's on_launch and on_terminate): list those waiting for an answer (--json: a list, [] when none), or answer one: continue (the new server joins its role; the leaving one is deleted) or abandon (the new server is deleted; the leaving one stays, unless it was replaced for its health). The answer goes to <prefix>/hook-answer/ROLE/HOST, naming the hook's entry: it takes a token that may write there (a handler's or an operator's; no node's). Exit 2, nothing written, when no hook of ROLE waits for HOST, when it was answered already (the first answer stands) or for a word other than continue or abandon.",
	setup: func(fs *pflag.FlagSet) runFunc {
		detail := fs.String("detail", "", "complete: what was done, or why the action is abandoned (recorded with the answer)")
		by := fs.String("by", "", "complete: who answers (default user@host)")
		role := fs.String("role", "", "list: only this role's hooks")
		return func(ctx context.Context, e *env, args []string) error {
			switch args[0] {
			case "list":
				if len(args) != 1 {
					return exitcode.Usagef("hook list: no arguments (--role ROLE filters)")
				}
				return hookList(ctx, e, *role)
			case "complete":
				if len(args) != 4 {
					return exitcode.Usagef("hook complete: usage: orchestrate hook complete ROLE HOST continue|abandon")
				}
				return hookComplete(ctx, e, args[1], args[2], args[3], *by, *detail)
			}
			return exitcode.Usagef("hook: unknown action %q (want list or complete)", args[0])
		}
	},
}

// hookComplete answers the hook that waits for host of role.
func hookComplete(ctx context.Context, e *env, role, host, result, by, detail string) error {
	if err := schema.ValidHookResult(result); err != nil {
		return exitcode.Usagef("hook complete: %v", err)
	}
	for _, n := range [][2]string{{"role", role}, {"host", host}} {
		if err := schema.ValidName(n[0], n[1]); err != nil {
			return exitcode.Usagef("hook complete: %v", err)
		}
	}
	if by == "" {
		by = whoAmI()
	}
	ans := schema.HookAnswer{Result: result, Time: e.store.Now().UTC(), By: by, Detail: detail}
	r, err := e.store.AnswerHook(ctx, role, host, ans)
	switch {
	case errors.Is(err, store.ErrNoHook):
		return exitcode.Usagef("hook complete: no lifecycle hook of role %s waits for %s, nothing written (`orchestrate hook list` shows those that do; one that ended at its deadline, or whose server left, waits no more)", role, host)
	case errors.Is(err, store.ErrHookAnswered):
		a := r.Answer
		return exitcode.Usagef("hook complete: the on_%s hook of %s (entry %s) was answered already, nothing written: %s by %s at %s; the first answer stands",
			r.Hook, host, r.Entry, a.Result, oneLine(a.By), a.Time.UTC().Format(time.RFC3339))
	case err != nil:
		return err
	}
	// The store answers only a hook not answered yet (the first answer
	// stands): the old value is none.
	return e.printChange(Change{Changed: true, Key: store.HookAnswerKey(e.store.Prefix(), role, host), New: ans, By: by,
		subject: fmt.Sprintf("on_%s hook of %s (entry %s)", r.Hook, host, r.Entry), oldText: "no answer",
		newText: result + " by " + by, note: "the reaper takes it at its next cycle"})
}

// hookView is a waiting hook as `hook list --json` prints it.
type hookView struct {
	schema.HookRequest
	Answer *schema.HookAnswer `json:"answer,omitempty"`
}

// hookList prints the hooks that wait, by role then host; an answer
// record that is no answer is named on stderr (exit 2 after the list).
func hookList(ctx context.Context, e *env, role string) error {
	if role != "" {
		if err := schema.ValidName("role", role); err != nil {
			return exitcode.Usagef("hook list: --role: %v", err)
		}
	}
	h, err := e.store.Hooks(ctx)
	if err != nil {
		return err
	}
	var out []hookView
	for _, r := range sortedKeys(h.Requests) {
		for _, host := range sortedKeys(h.Requests[r]) {
			if role == "" || r == role {
				req := h.Requests[r][host]
				out = append(out, hookView{HookRequest: req, Answer: req.Answer})
			}
		}
	}
	if e.json {
		if err := e.printJSON(orEmpty(out)); err != nil {
			return err
		}
	} else {
		writeHooks(e.Stdout, out, e.store.Now())
	}
	var bad []string
	for _, r := range sortedKeys(h.Problems) {
		for _, host := range sortedKeys(h.Problems[r]) {
			if role == "" || r == role {
				bad = append(bad, h.Problems[r][host].Why)
			}
		}
	}
	if len(bad) > 0 {
		return exitcode.Usagef("%s (never taken for an answer: `orchestrate hook complete` replaces it)", strings.Join(bad, "; "))
	}
	return nil
}

// writeHooks prints the waiting hooks as a table, one a line.
func writeHooks(w io.Writer, hs []hookView, now time.Time) {
	if len(hs) == 0 {
		fmt.Fprintln(w, "no lifecycle hook waits for an answer")
		return
	}
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "ROLE\tHOST\tHOOK\tDEADLINE\tDEFAULT\tANSWER\tENTRY\tWHY")
	for _, h := range hs {
		ans := "none yet"
		if a := h.Answer; a != nil {
			ans = fmt.Sprintf("%s (%s, taken at the reaper's next cycle)", a.Result, oneLine(a.By))
		}
		def := h.Default
		if h.Hook == schema.HookTerminate && h.AbandonIgnored {
			def += " (abandon ignored: replaced for its health)"
		}
		deadline := h.Deadline.UTC().Format(time.RFC3339)
		if left := h.Deadline.Sub(now); left > 0 {
			deadline += fmt.Sprintf(" (in %s)", left.Round(time.Second))
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n", h.Role, h.Host, "on_"+h.Hook, deadline, def, ans, h.Entry, oneLine(h.Reason))
	}
	tw.Flush()
}
