package orchestrate

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/user"

	"github.com/hashicorp/consul/api"
	"github.com/spf13/pflag"

	"github.com/jiocloud/orchestrate/internal/exitcode"
	"github.com/jiocloud/orchestrate/reaper"
)

var cmdReaper = &command{
	name: "reaper", minArgs: 1, maxArgs: 1, usage: "arm|disarm|status", json: true,
	summary: "Open the reaper's start gate (arm: it may then replace and delete servers), close it again (disarm), or print what it sees and plans (status).",
	flags: func(fs *pflag.FlagSet, f *cmdFlags) {
		fs.StringVar(&f.detail, "reason", "", "why the gate is opened (recorded with arm)")
	},
	run: runReaper,
}

func runReaper(ctx context.Context, e *env, args []string) error {
	key := reaper.ArmKey(e.store.Prefix())
	switch args[0] {
	case "arm":
		who := "operator"
		if u, err := user.Current(); err == nil {
			who = u.Username
		}
		if h, err := os.Hostname(); err == nil {
			who += "@" + h
		}
		reason := e.flags.detail
		if reason == "" {
			reason = "armed by hand with orchestrate reaper arm"
		}
		data, _ := json.Marshal(reaper.Armed{Time: e.store.Now().UTC(), By: who, Reason: reason})
		if _, err := e.client.KV().Put(&api.KVPair{Key: key, Value: data}, (&api.WriteOptions{}).WithContext(ctx)); err != nil {
			return fmt.Errorf("write %s: %w", key, err)
		}
		e.log.Info("reaper armed: it may now replace and delete servers", "key", key)
		return nil
	case "disarm":
		if _, err := e.client.KV().Delete(key, (&api.WriteOptions{}).WithContext(ctx)); err != nil {
			return fmt.Errorf("delete %s: %w", key, err)
		}
		e.log.Info("reaper disarmed: it creates missing servers and destroys nothing until every role validates again, or arm", "key", key)
		return nil
	case "status":
		rr := loadReaperReport(ctx, e)
		if e.json {
			if err := e.printJSON(rr); err != nil {
				return err
			}
		} else {
			writeReaperStatus(e.Stdout, rr)
		}
		if rr.err != nil {
			return reaperReadError(rr.err)
		}
		return nil
	}
	return exitcode.Usagef("reaper: unknown action %q (want arm, disarm or status)", args[0])
}
