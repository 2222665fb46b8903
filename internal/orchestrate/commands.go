package orchestrate

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"sort"
	"strings"

	"github.com/spf13/pflag"

	"github.com/jiocloud/orchestrate/internal/exitcode"
	"github.com/jiocloud/orchestrate/internal/store"
	"github.com/jiocloud/orchestrate/internal/store/schema"
	"github.com/jiocloud/orchestrate/internal/term"
)

var cmdTriggerUpdate = &command{
	name: "trigger-update", minArgs: 1, maxArgs: 1, usage: "VERSION", json: true,
	summary: "Set the desired version of the whole system (<prefix>/current_version).",
	run: func(ctx context.Context, e *env, args []string) error {
		old, had, err := e.store.SwapCurrentVersion(ctx, args[0])
		if err != nil {
			return err
		}
		c := Change{Changed: !had || old != args[0], Key: store.CurrentVersionKey(e.store.Prefix()), New: args[0],
			subject: "current version", oldText: "none", newText: args[0]}
		if had {
			c.Old, c.oldText = old, old
		}
		return e.printChange(c)
	},
}

var cmdCurrentVersion = &command{
	name: "current-version", minArgs: 0, maxArgs: 0, json: true,
	summary: "Print the desired version; exit 1 when none is set.",
	run: func(ctx context.Context, e *env, args []string) error {
		v, err := e.store.CurrentVersion(ctx)
		unset := errors.Is(err, store.ErrNoCurrentVersion)
		if err != nil && !unset {
			return err
		}
		if e.json {
			// The same shape whether set or not (docs/json.md).
			if err := e.printJSON(map[string]any{"current_version": v, "set": !unset}); err != nil || !unset {
				return err
			}
			return answerNo()
		}
		if unset {
			return exitcode.Wrap(exitcode.No, err)
		}
		fmt.Fprintln(e.Stdout, v)
		return nil
	},
}

var cmdPendingUpdate = &command{
	name: "pending-update", minArgs: 0, maxArgs: 0, needsHost: true, json: true, handler: true,
	summary: "Exit 0 and print the desired version when this host does not run it; exit 1 when it does, or when no version is set (with --handler: exit 0 either way).",
	run: func(ctx context.Context, e *env, args []string) error {
		want, err := e.store.CurrentVersion(ctx)
		if errors.Is(err, store.ErrNoCurrentVersion) {
			if e.json {
				// The same shape as with a version (docs/json.md).
				if err := e.printJSON(map[string]any{"host": e.host, "current_version": "", "running_versions": []string{}, "pending": false}); err != nil {
					return err
				}
			}
			if e.handler {
				e.log.Info("no current_version is set: nothing pending")
				return nil
			}
			if e.json {
				return answerNo()
			}
			return exitcode.Wrap(exitcode.No, err)
		}
		if err != nil {
			return err
		}
		have, err := e.store.HostVersions(ctx, e.host)
		if err != nil {
			return err
		}
		pending := !(len(have) == 1 && have[0] == want)
		if e.json {
			if err := e.printJSON(map[string]any{"host": e.host, "current_version": want, "running_versions": orEmpty(have), "pending": pending}); err != nil {
				return err
			}
		} else if pending {
			fmt.Fprintln(e.Stdout, want)
		}
		if !pending {
			if !e.json {
				fmt.Fprintf(e.Stderr, "%s already runs %s\n", e.host, want)
			}
			if e.handler {
				return nil
			}
			return answerNo()
		}
		return nil
	},
}

var cmdReportVersion = &command{
	name: "report-version", minArgs: 1, maxArgs: 1, usage: "VERSION", needsHost: true,
	summary: "Record that this host runs VERSION, removing it from every other version, in one transaction.",
	run: func(ctx context.Context, e *env, args []string) error {
		if err := e.store.ReportVersion(ctx, e.host, args[0]); err != nil {
			return err
		}
		e.log.Info("running version reported", "host", e.host, "version", args[0])
		return nil
	},
}

var cmdVerifyHosts = &command{
	name: "verify-hosts", minArgs: 1, maxArgs: -1, usage: "VERSION [HOST...]", json: true,
	summary: "Exit 0 when every host runs VERSION, else 1 and print the hosts that do not.",
	setup: func(fs *pflag.FlagSet) runFunc {
		fromFile := fs.String("from-file", "", "also read hosts from this file, one per line (- for stdin; # comments)")
		return func(ctx context.Context, e *env, args []string) error { return verifyHosts(ctx, e, args, *fromFile) }
	},
}

func verifyHosts(ctx context.Context, e *env, args []string, fromFile string) error {
	version, hosts := args[0], args[1:]
	if err := schema.ValidName("version", version); err != nil {
		return exitcode.Wrap(exitcode.Usage, err)
	}
	if fromFile != "" {
		more, err := readHosts(fromFile, e.Stdin)
		if err != nil {
			return err
		}
		hosts = append(hosts, more...)
	}
	if len(hosts) == 0 {
		return exitcode.Usagef("verify-hosts: no hosts given")
	}
	for _, h := range hosts {
		if err := schema.ValidName("host", h); err != nil {
			return exitcode.Wrap(exitcode.Usage, err)
		}
	}
	snap, err := e.store.Snapshot(ctx)
	if err != nil {
		return err
	}
	type miss struct {
		Host    string `json:"host"`
		Version string `json:"version"`
	}
	var missing []miss
	seen := map[string]bool{}
	for _, h := range hosts {
		if seen[h] {
			continue
		}
		seen[h] = true
		running := ""
		if hh := snap.Hosts[h]; hh != nil {
			running = hh.Version
		}
		if running != version {
			missing = append(missing, miss{Host: h, Version: running})
		}
	}
	if e.json {
		if err := e.printJSON(map[string]any{"version": version, "hosts": len(seen), "not_on_version": orEmpty(missing)}); err != nil {
			return err
		}
	} else {
		for _, m := range missing {
			v := m.Version
			if v == "" {
				v = "(no version reported)"
			}
			fmt.Fprintf(e.Stdout, "%s\t%s\n", m.Host, v)
		}
	}
	if len(missing) > 0 {
		if !e.json {
			fmt.Fprintf(e.Stderr, "%d of %d hosts not on %s\n", len(missing), len(seen), version)
		}
		return answerNo()
	}
	return nil
}

// readHosts reads host names, one per line, from path ("-" is stdin).
func readHosts(path string, stdin io.Reader) ([]string, error) {
	var r io.Reader = stdin
	if path != "-" {
		f, err := os.Open(path)
		if err != nil {
			return nil, exitcode.Wrap(exitcode.Usage, fmt.Errorf("--from-file: %w", err))
		}
		defer f.Close()
		r = f
	}
	var hosts []string
	sc := bufio.NewScanner(r)
	line := 0
	for sc.Scan() {
		line++
		h := strings.TrimSpace(sc.Text())
		if i := strings.IndexByte(h, '#'); i >= 0 {
			h = strings.TrimSpace(h[:i])
		}
		if h == "" {
			continue
		}
		if err := schema.ValidName("host", h); err != nil {
			return nil, exitcode.Usagef("--from-file %s line %d: %v", path, line, err)
		}
		hosts = append(hosts, h)
	}
	if err := sc.Err(); err != nil {
		return nil, exitcode.Usagef("--from-file %s: %v", path, err)
	}
	return hosts, nil
}

var cmdHostsAtVersion = &command{
	name: "hosts-at-version", minArgs: 1, maxArgs: 1, usage: "VERSION", json: true,
	summary: "Print the hosts running VERSION, one per line.",
	run: func(ctx context.Context, e *env, args []string) error {
		if err := schema.ValidName("version", args[0]); err != nil {
			return exitcode.Wrap(exitcode.Usage, err)
		}
		snap, err := e.store.Snapshot(ctx)
		if err != nil {
			return err
		}
		hosts := []string{}
		for _, name := range snap.HostNames() {
			if snap.Hosts[name].Version == args[0] {
				hosts = append(hosts, name)
			}
		}
		if e.json {
			return e.printJSON(hosts)
		}
		for _, h := range hosts {
			fmt.Fprintln(e.Stdout, h)
		}
		return nil
	},
}

var cmdRunningVersions = &command{
	name: "running-versions", minArgs: 0, maxArgs: 0, json: true,
	summary: "Print each running version with its number of hosts.",
	run: func(ctx context.Context, e *env, args []string) error {
		snap, err := e.store.Snapshot(ctx)
		if err != nil {
			return err
		}
		counts := snap.VersionCounts()
		if e.json {
			return e.printJSON(counts)
		}
		versions := make([]string, 0, len(counts))
		for v := range counts {
			versions = append(versions, v)
		}
		sort.Strings(versions)
		for _, v := range versions {
			fmt.Fprintf(e.Stdout, "%s\t%d\n", v, counts[v])
		}
		return nil
	},
}

var cmdUpdateStatus = &command{
	name: "update-status", minArgs: 2, maxArgs: 2, usage: "CATEGORY STATE", needsHost: true,
	summary: "Put this host in STATE (success, failed, pending, running) of CATEGORY, in one transaction.",
	setup: func(fs *pflag.FlagSet) runFunc {
		var v store.StatusValue
		fs.StringVar(&v.Detail, "detail", "", "what happened, e.g. the failing check or the unmet dependencies")
		fs.StringVar(&v.LogURL, "log-url", "", "where the run's log can be read")
		fs.StringVar(&v.Version, "version", "", "the version this status is about (default: the host's running version)")
		return func(ctx context.Context, e *env, args []string) error { return updateStatus(ctx, e, args, v) }
	},
}

func updateStatus(ctx context.Context, e *env, args []string, v store.StatusValue) error {
	category, state := args[0], args[1]
	if err := schema.ValidName("category", category); err != nil {
		return exitcode.Wrap(exitcode.Usage, err)
	}
	if !store.ValidState(state) {
		return exitcode.Usagef("state %q is not one of %s", state, strings.Join(store.States, ", "))
	}
	version := v.Version
	if version == "" {
		have, err := e.store.HostVersions(ctx, e.host)
		if err != nil {
			return err
		}
		if len(have) == 1 {
			version = have[0]
		}
	} else if err := schema.ValidName("version", version); err != nil {
		return exitcode.Usagef("--version: %v", err)
	}
	v.Version = version
	if err := e.store.UpdateStatus(ctx, e.host, category, state, v); err != nil {
		return err
	}
	e.log.Info("status updated", "host", e.host, "category", category, "state", state)
	return nil
}

var cmdGetFailures = &command{
	name: "get-failures", minArgs: 0, maxArgs: -1, usage: "[CATEGORY...]", json: true,
	summary: "Print hosts in a failed state; exit 1 when there are any.",
	run: func(ctx context.Context, e *env, args []string) error {
		for _, c := range args {
			if err := schema.ValidName("category", c); err != nil {
				return exitcode.Wrap(exitcode.Usage, err)
			}
		}
		snap, err := e.store.Snapshot(ctx)
		if err != nil {
			return err
		}
		reportProblems(e, snap)
		failures := withSilent(ctx, e, snap.Failures(args...), args)
		if e.json {
			if err := e.printJSON(orEmpty(failures)); err != nil {
				return err
			}
		} else {
			now := e.store.Now()
			for _, f := range failures {
				fmt.Fprintf(e.Stdout, "%s\t%s\tsince %s (%s ago)\t%s%s\n", f.Category, f.Host,
					f.Since.Format("2006-01-02T15:04:05Z07:00"), age(now, f.Since), oneLine(f.Detail), logColumn(f.LogURL))
			}
		}
		if len(failures) > 0 {
			return answerNo()
		}
		if len(snap.Problems) > 0 {
			return exitcode.Wrap(exitcode.Usage, &silentError{code: exitcode.Usage})
		}
		return nil
	},
}

// reportProblems writes each corrupt key to stderr, once.
func reportProblems(e *env, snap *store.Snapshot) {
	for _, p := range snap.Problems {
		fmt.Fprintf(e.Stderr, "orchestrate: warning: %s\n", p)
	}
}

func (e *env) printJSON(v any) error {
	enc := json.NewEncoder(e.Stdout)
	enc.SetIndent("", "  ")
	return enc.Encode(v)
}

// orEmpty makes a nil slice print as [] in JSON.
func orEmpty[T any](s []T) []T {
	if s == nil {
		return []T{}
	}
	return s
}

// oneLine makes a string read from Consul (a node's detail, a reason, a
// name of who did it) safe for one line of a terminal (term.OneLine).
func oneLine(s string) string { return term.OneLine(s) }
