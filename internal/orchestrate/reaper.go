package orchestrate

import (
	"context"
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
		reason := fs.String("reason", "", "why the gate is opened or closed (recorded with arm and disarm)")
		var f historyFilter
		fs.StringVar(&f.role, "role", "", "history: only this role's activities")
		fs.DurationVar(&f.since, "since", 0, "history: only the activities of this long ago or later (e.g. 24h)")
		return func(ctx context.Context, e *env, args []string) error {
			if args[0] == "history" {
				return runHistory(ctx, e, f)
			}
			return runReaper(ctx, e, args, *reason)
		}
	},
}

func runReaper(ctx context.Context, e *env, args []string, reason string) error {
	key := reaperkv.ReaperKey(e.store.Prefix(), reaperkv.ReaperArmedKey)
	switch args[0] {
	case "arm":
		if reason == "" {
			reason = "armed by hand with orchestrate reaper arm"
		}
		if err := e.store.Arm(ctx, armRecord(e, reason)); err != nil {
			return err
		}
		e.log.Info("reaper armed: it may now replace and delete servers", "key", key)
		return nil
	case "disarm":
		if reason == "" {
			reason = "disarmed by hand with orchestrate reaper disarm"
		}
		if err := e.store.Disarm(ctx, armRecord(e, reason)); err != nil {
			return err
		}
		e.log.Info("reaper disarmed: it creates missing servers and destroys nothing until `orchestrate reaper arm`", "key", key)
		return nil
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
