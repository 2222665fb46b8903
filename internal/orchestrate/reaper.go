package orchestrate

import (
	"context"
	"fmt"
	"os"
	"os/user"

	"github.com/spf13/pflag"

	"github.com/jiocloud/orchestrate/internal/exitcode"
	"github.com/jiocloud/orchestrate/internal/store/reaperkv"
)

var cmdReaper = &command{
	name: "reaper", minArgs: 1, maxArgs: 1, usage: "arm|disarm|status|history", json: true,
	summary: "Open the reaper's start gate (arm: it may then replace and delete servers), close it again (disarm), print what it sees and plans (status), or what it did (history: every action with its result, each pause, arm and autoscaling change, oldest first; --role and --since filter it).",
	setup: func(fs *pflag.FlagSet) runFunc {
		var cf confirmFlags
		cf.register(fs, "the arm record, shown by history (arm: required, and asks first)")
		var f historyFilter
		fs.StringVar(&f.role, "role", "", "history: only this role's activities")
		fs.DurationVar(&f.since, "since", 0, "history: only the activities of this long ago or later (e.g. 24h)")
		return func(ctx context.Context, e *env, args []string) error {
			if args[0] == "history" {
				return runHistory(ctx, e, f)
			}
			return runReaper(ctx, e, args, cf)
		}
	},
}

func runReaper(ctx context.Context, e *env, args []string, cf confirmFlags) error {
	switch args[0] {
	case "arm":
		// Who opened the gate of the fleet's destroyer, and why, is what
		// the record is for: no default reason.
		if err := checkReason("reaper arm", cf.reason, true); err != nil {
			return err
		}
		prompt := fmt.Sprintf("This arms the reaper for %s: it may delete and create servers.", datacenter(e))
		if err := e.confirm("reaper arm", cf.yes, prompt, "arm"); err != nil {
			return err
		}
		return swapArm(ctx, e, armRecord(e, cf.reason))
	case "disarm":
		if err := checkReason("reaper disarm", cf.reason, false); err != nil {
			return err
		}
		rec := armRecord(e, cf.reason)
		if rec.Reason == "" {
			rec.Reason = "disarmed by hand with orchestrate reaper disarm"
		}
		rec.Disarmed = true
		return swapArm(ctx, e, rec)
	case "status":
		rr := loadReaperReport(ctx, e)
		if !e.json {
			if rr.err != nil {
				return rr.err // printed once, by Run
			}
			writeReaperStatus(e.Stdout, rr, true)
			return nil
		}
		if err := e.printJSON(rr); err != nil || rr.err == nil {
			return err
		}
		// The JSON holds the error: only its exit code is left (Consul
		// unreachable 3, a value the reaper did not write 2).
		code := exitcode.Code(rr.err)
		return exitcode.Wrap(code, &silentError{code: code})
	}
	return exitcode.Usagef("reaper: unknown action %q (want arm, disarm, status or history)", args[0])
}

// swapArm writes rec as the arm record and prints what it replaced.
func swapArm(ctx context.Context, e *env, rec reaperkv.ArmRecord) error {
	old, err := e.store.SwapArm(ctx, rec)
	if err != nil {
		return err
	}
	c := Change{Changed: true, Key: reaperkv.ReaperKey(e.store.Prefix(), reaperkv.ReaperArmedKey),
		Old: storedValue(old), New: rec, By: rec.By, Reason: rec.Reason, subject: "reaper",
		oldText: armText(old), newText: armState(rec) + " by " + rec.By + " (reason: " + quoteReason(rec.Reason) + ")"}
	if rec.Arms() {
		c.note = "it may now replace and delete servers"
	} else {
		c.note = "it creates missing servers and destroys nothing until `orchestrate reaper arm`"
	}
	return e.printChange(c)
}

// armText says what an arm record's value (nil: none) was.
func armText(data []byte) string {
	if data == nil {
		return "not armed (no arm record)"
	}
	rec, err := reaperkv.ParseArmRecord(data)
	if err != nil {
		return "disarmed (the arm record was unreadable)"
	}
	return armState(rec) + " by " + rec.By
}

func armState(rec reaperkv.ArmRecord) string {
	if rec.Arms() {
		return "armed"
	}
	return "disarmed"
}

// datacenter names where the reaper acts: the agent's datacenter, and the
// prefix (the agent's name when it does not answer).
func datacenter(e *env) string {
	self, err := e.client.Agent().Self()
	if dc, ok := self["Config"]["Datacenter"].(string); err == nil && ok && dc != "" {
		return fmt.Sprintf("datacenter %s (prefix %s)", oneLine(dc), e.store.Prefix())
	}
	return "prefix " + e.store.Prefix()
}

// armRecord is an arm or disarm record by the user running the command.
func armRecord(e *env, reason string) reaperkv.ArmRecord {
	return reaperkv.ArmRecord{Time: e.store.Now().UTC(), By: whoAmI(), Reason: reason}
}

// whoAmI names the user running a command (user@host), for the records it
// writes.
func whoAmI() string {
	who := "operator"
	if u, err := user.Current(); err == nil {
		who = u.Username
	}
	if h, err := os.Hostname(); err == nil {
		who += "@" + h
	}
	return who
}
