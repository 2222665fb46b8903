package orchestrate

import (
	"context"
	"errors"
	"fmt"

	"github.com/spf13/pflag"

	"github.com/jiocloud/orchestrate/internal/exitcode"
	"github.com/jiocloud/orchestrate/internal/store"
)

var cmdMigrate = &command{
	name: "migrate", minArgs: 0, maxArgs: 0, json: true,
	summary: "Move hosts' records from the layout before node restriction (running_version/, status/, metrics/, answers inside drain/) to each host's own records under <prefix>/hosts/HOST/, one transaction per host; a record the host wrote itself since the upgrade stands. Needs a token with key write on the prefix. Refused (exit 1, nothing moved) while a rollout slot of the older layout is held. With --check: list what is left; exit 1 while anything is.",
	setup: func(fs *pflag.FlagSet) runFunc {
		check := fs.Bool("check", false, "only list what is left of the older layout; exit 1 while anything is")
		return func(ctx context.Context, e *env, _ []string) error {
			if *check {
				return migrateCheck(ctx, e)
			}
			return migrate(ctx, e)
		}
	},
}

// migrateCheck prints what is left of the older layout.
func migrateCheck(ctx context.Context, e *env) error {
	m, err := e.store.PlanMigration(ctx)
	if err != nil {
		return err
	}
	if e.json {
		if err := e.printJSON(map[string]any{"moves": orEmpty(m.Moves), "held_slots": orEmpty(m.HeldSlots), "unreadable": orEmpty(m.Unreadable)}); err != nil {
			return err
		}
	} else {
		for _, mv := range m.Moves {
			fmt.Fprintf(e.Stdout, "%s\t%s\t%s\n", mv.Host, mv.Kind, mv)
		}
		for _, k := range m.HeldSlots {
			fmt.Fprintf(e.Stdout, "held slot\t%s\t(a rollout the older orchestrate started; migrate waits for it)\n", k)
		}
		for _, u := range m.Unreadable {
			fmt.Fprintf(e.Stdout, "unreadable\t%s\t%s\n", u.Key, oneLine(u.Problem))
		}
	}
	if !m.Left() {
		if !e.json {
			fmt.Fprintln(e.Stderr, "nothing is left of the layout before node restriction")
		}
		return nil
	}
	if !e.json {
		fmt.Fprintf(e.Stderr, "%d records to move, %d held slots, %d unreadable keys\n", len(m.Moves), len(m.HeldSlots), len(m.Unreadable))
	}
	return answerNo()
}

// migrate moves everything and prints what it moved.
func migrate(ctx context.Context, e *env) error {
	moved, err := e.store.Migrate(ctx)
	for _, mv := range moved {
		e.log.Info("moved", "host", mv.Host, "kind", mv.Kind, "to", mv.Target, "stood", mv.Stands, "older_keys", len(mv.Keys))
	}
	if e.json {
		if jerr := e.printJSON(map[string]any{"moved": orEmpty(moved), "error": errText(err)}); jerr != nil {
			return jerr
		}
	} else {
		fmt.Fprintf(e.Stdout, "%d records moved\n", len(moved))
	}
	if errors.Is(err, store.ErrSlotsHeld) {
		return exitcode.Wrap(exitcode.No, err)
	}
	return err
}

func errText(err error) string {
	if err == nil {
		return ""
	}
	return err.Error()
}
