package orchestrate

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"sort"
	"strings"
	"time"

	"github.com/spf13/pflag"

	"github.com/jiocloud/orchestrate/internal/exitcode"
	"github.com/jiocloud/orchestrate/internal/fileutil"
	"github.com/jiocloud/orchestrate/internal/logship"
	"github.com/jiocloud/orchestrate/internal/paths"
	"github.com/jiocloud/orchestrate/internal/store"
	"github.com/jiocloud/orchestrate/internal/store/reaperkv"
	"github.com/jiocloud/orchestrate/internal/store/schema"
)

// EnvSwiftKeyFile names the file holding the log container's temp URL key,
// for `orchestrate logs HOST` (--temp-url-key-file).
const EnvSwiftKeyFile = "ORCHESTRATE_SWIFT_KEY_FILE"

// EnvSwiftContainer names the log container's URL, for `orchestrate logs
// HOST` (--container-url).
const EnvSwiftContainer = "ORCHESTRATE_SWIFT_CONTAINER_URL"

// unversioned is the version of a log pushed with no --version and no
// $ORCHESTRATE_VERSION (a first boot before any version is known).
const unversioned = "unversioned"

// readTTL is how long the GET temp URL `logs HOST` signs is valid: long
// enough for a slow read of a capped log, short enough that a URL that
// leaked from memory is soon worthless. It is never printed.
const readTTL = 5 * time.Minute

type logsOptions struct {
	step, version, host string
	grant, spool        string
	maxBytes            int64
	timeout             time.Duration
	keyFile, container  string
}

var cmdLogs = &command{
	name: "logs", minArgs: 1, maxArgs: 2, usage: "HOST | push FILE | flush",
	summary: "Failure logs in Swift. HOST: print the newest log of HOST its status records link to in Swift (--step, --version narrow it), read from --container-url ($" + EnvSwiftContainer + ") with a temp URL signed by the key in --temp-url-key-file ($" + EnvSwiftKeyFile + "); exit 1 when there is none. push FILE (on a node, e.g. the first boot's failure path): upload FILE as this host's log of --step through its write-only grant and print its URL; exit 3 when Swift could not take it now (it waits in the spool). flush: upload what the spool holds (a timer's job; converge does it too); exit 3 when some of it could not go.",
	setup: func(fs *pflag.FlagSet) runFunc {
		o := &logsOptions{}
		fs.StringVar(&o.step, "step", "", "HOST: only this step's log (a status category: puppet, validation, ...); push: the step the log is of (required)")
		fs.StringVar(&o.version, "version", "", "HOST: only logs of this version; push: the version the log is of (default $ORCHESTRATE_VERSION, else "+unversioned+")")
		fs.StringVar(&o.host, "host", "", "push, flush: this host's name (default: the Consul agent's node name, else the OS hostname)")
		fs.StringVar(&o.grant, "log-grant", paths.LogGrant, "push, flush: the host's write-only upload grant")
		fs.StringVar(&o.spool, "log-spool", paths.LogSpool, "push, flush: the spool of logs not uploaded yet")
		fs.Int64Var(&o.maxBytes, "max-log-bytes", logship.DefaultMaxBytes, "push: cap on the uploaded log (head and tail kept)")
		fs.DurationVar(&o.timeout, "timeout", logship.DefaultTimeout, "bound on the uploads (push, flush) or the read (HOST)")
		fs.StringVar(&o.keyFile, "temp-url-key-file", os.Getenv(EnvSwiftKeyFile), "HOST: file holding the log container's temp URL key (default $"+EnvSwiftKeyFile+")")
		fs.StringVar(&o.container, "container-url", os.Getenv(EnvSwiftContainer), "HOST: the log container's URL, https://SWIFT/v1/ACCOUNT/CONTAINER (default $"+EnvSwiftContainer+"); a record linking a log elsewhere is refused")
		return func(ctx context.Context, e *env, args []string) error { return runLogs(ctx, e, o, args) }
	},
}

func runLogs(ctx context.Context, e *env, o *logsOptions, args []string) error {
	if o.timeout < time.Second || o.timeout > 10*time.Minute {
		return exitcode.Usagef("logs: --timeout %s must be between 1s and 10m", o.timeout)
	}
	switch args[0] {
	case "push":
		if len(args) != 2 {
			return exitcode.Usagef("logs push: usage: orchestrate logs push --step STEP FILE")
		}
		return runLogsPush(ctx, e, o, args[1])
	case "flush":
		if len(args) != 1 {
			return exitcode.Usagef("logs flush takes no arguments")
		}
		return runLogsFlush(ctx, e, o)
	}
	if len(args) != 1 {
		return exitcode.Usagef("logs: usage: orchestrate logs HOST | push FILE | flush")
	}
	return runLogsGet(ctx, e, o, args[0])
}

// nodeShipper checks the node-side flags and builds the shipper.
func nodeShipper(ctx context.Context, e *env, o *logsOptions) (*logship.Shipper, string, error) {
	host := o.host
	if host == "" {
		h, err := defaultHost(e.client, e.log)
		if err != nil {
			return nil, "", err
		}
		host = h
	}
	if err := schema.ValidName("--host", host); err != nil {
		return nil, "", exitcode.Wrap(exitcode.Usage, err)
	}
	if o.maxBytes < logship.MinMaxBytes || o.maxBytes > 1<<30 {
		return nil, "", exitcode.Usagef("--max-log-bytes %d must be between %d and 1 GiB", o.maxBytes, logship.MinMaxBytes)
	}
	g, err := logship.CurrentGrant(ctx, o.grant, host, func(ctx context.Context) ([]byte, error) {
		ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		defer cancel()
		return e.store.LogGrant(ctx, host)
	}, e.log)
	if err != nil {
		return nil, "", exitcode.Wrap(exitcode.Usage, err)
	}
	if g.Host() != host {
		return nil, "", exitcode.Usagef("--log-grant %s is for host %s, not %s", o.grant, g.Host(), host)
	}
	return &logship.Shipper{
		// The grant was read (the file, or a renewal in Consul) and
		// checked once: the command's run is short.
		Grant:    func(context.Context) (logship.Grant, error) { return g, nil },
		Spool:    logship.Spool{Dir: o.spool},
		MaxBytes: o.maxBytes,
		Client:   logship.Client(o.timeout),
		Log:      e.log,
	}, host, nil
}

// uploadCode maps an upload failure to the exit code: Swift unreachable
// or refusing is 3; the log waits in the spool either way.
func uploadCode(err error) error {
	if errors.Is(err, logship.ErrUnreachable) || errors.Is(err, logship.ErrRefused) || errors.Is(err, logship.ErrExpired) {
		return exitcode.Wrap(exitcode.Unavailable, err)
	}
	return err
}

func runLogsPush(ctx context.Context, e *env, o *logsOptions, file string) error {
	if o.step == "" {
		return exitcode.Usagef("logs push: --step is required (the step the log is of, e.g. provision)")
	}
	version := o.version
	if version == "" {
		version = os.Getenv("ORCHESTRATE_VERSION")
	}
	if version == "" {
		version = unversioned
	}
	for _, v := range []struct{ kind, val string }{{"--step", o.step}, {"--version", version}} {
		if err := schema.ValidName(v.kind, v.val); err != nil {
			return exitcode.Wrap(exitcode.Usage, err)
		}
	}
	st, err := os.Stat(file)
	if err != nil {
		return exitcode.Wrap(exitcode.Usage, fmt.Errorf("logs push: %w", err))
	}
	if !st.Mode().IsRegular() {
		return exitcode.Usagef("logs push: %s is not a regular file", file)
	}
	sh, host, err := nodeShipper(ctx, e, o)
	if err != nil {
		return err
	}
	object, url, err := sh.Plan(ctx, host, version, o.step, time.Now())
	if err != nil {
		return exitcode.Wrap(exitcode.Usage, err)
	}
	// The URL first: a caller records it as log_url whatever the upload does.
	fmt.Fprintln(e.Stdout, url)
	res, err := sh.Ship(ctx, object, file)
	if err != nil {
		return uploadCode(fmt.Errorf("%w; the log waits in %s (%d spooled)", err, o.spool, res.Left))
	}
	return nil
}

func runLogsFlush(ctx context.Context, e *env, o *logsOptions) error {
	sh, _, err := nodeShipper(ctx, e, o)
	if err != nil {
		return err
	}
	res, err := sh.Flush(ctx)
	if e.json {
		if jerr := e.printJSON(map[string]int{"uploaded": res.Uploaded, "left": res.Left}); jerr != nil {
			return jerr
		}
	} else {
		fmt.Fprintf(e.Stdout, "uploaded %d, left %d\n", res.Uploaded, res.Left)
	}
	if err != nil {
		return uploadCode(err)
	}
	if len(res.Bad) > 0 {
		return exitcode.Usagef("logs flush: unreadable spool entries left in place: %s", strings.Join(res.Bad, ", "))
	}
	return nil
}

// maxKeyFile bounds the temp URL key file.
const maxKeyFile = 4 << 10

// readKey reads the temp URL key: the file's content without surrounding
// white space. Its errors never quote the content.
func readKey(path string) ([]byte, error) {
	if path == "" {
		return nil, exitcode.Usagef("logs: no temp URL key: give --temp-url-key-file or set $%s (the log container's X-Container-Meta-Temp-URL-Key, in a file)", EnvSwiftKeyFile)
	}
	data, err := fileutil.ReadLimited(path, maxKeyFile)
	if err != nil {
		return nil, exitcode.Wrap(exitcode.Usage, fmt.Errorf("--temp-url-key-file: %w", err))
	}
	key := []byte(strings.TrimSpace(string(data)))
	if len(key) == 0 {
		return nil, exitcode.Usagef("--temp-url-key-file %s is empty", path)
	}
	return key, nil
}

// logCandidate is a status record's log in Swift.
type logCandidate struct {
	category  string
	container string
	object    logship.Object
	name, url string
}

// swiftLogs lists the records of status whose log_url is an object in
// Swift, matching step and version when given, newest first.
func swiftLogs(status map[string]store.Status, step, version string) []logCandidate {
	var out []logCandidate
	for cat, st := range status {
		c, name, ok := logship.SplitObjectURL(st.LogURL)
		if !ok {
			continue
		}
		obj, err := logship.ParseObjectName(name)
		if err != nil {
			continue
		}
		if (step != "" && obj.Step != step) || (version != "" && obj.Version != version) {
			continue
		}
		out = append(out, logCandidate{category: cat, container: c, object: obj, name: name, url: st.LogURL})
	}
	sort.Slice(out, func(i, j int) bool {
		if !out[i].object.Time.Equal(out[j].object.Time) {
			return out[i].object.Time.After(out[j].object.Time)
		}
		return out[i].name > out[j].name
	})
	return out
}

func runLogsGet(ctx context.Context, e *env, o *logsOptions, host string) error {
	key, err := logsGetInput(o, host)
	if err != nil {
		return err
	}
	l, err := findLog(ctx, e, o, host)
	if err != nil {
		return err
	}
	// A log_url is written by the host itself: its object must be the
	// host's own, or a host could point the operator's signed read at
	// another host's log under its own name.
	if l.object.Host != host {
		return exitcode.Usagef("logs: %s's %s record links %s, a log of host %s: refused", host, l.category, l.url, l.object.Host)
	}
	// Nor may it point the signed read at another container (an account
	// key signs for every container of the account) or another server.
	if l.container != strings.TrimSuffix(o.container, "/") {
		return exitcode.Usagef("logs: %s's %s record links %s, outside the log container %s: refused", host, l.category, l.url, o.container)
	}
	return fetchLog(ctx, e, o, host, key, l)
}

// logsGetInput checks `logs HOST`'s host, filters and container, and
// reads the temp URL key.
func logsGetInput(o *logsOptions, host string) ([]byte, error) {
	if err := schema.ValidName("host", host); err != nil {
		return nil, exitcode.Wrap(exitcode.Usage, err)
	}
	for _, v := range []struct{ kind, val string }{{"--step", o.step}, {"--version", o.version}} {
		if v.val != "" {
			if err := schema.ValidName(v.kind, v.val); err != nil {
				return nil, exitcode.Wrap(exitcode.Usage, err)
			}
		}
	}
	if o.container == "" {
		return nil, exitcode.Usagef("logs: no log container: give --container-url or set $%s", EnvSwiftContainer)
	}
	if _, err := logship.ContainerPath(o.container); err != nil {
		return nil, exitcode.Usagef("--container-url: %v", err)
	}
	return readKey(o.keyFile)
}

// findLog is the newest log in Swift that host's status records link
// (matching the filters), else its departed record's (the host is gone:
// its records were forgotten when its server was deleted, and the
// departed record kept the links). None is the answer no.
func findLog(ctx context.Context, e *env, o *logsOptions, host string) (logCandidate, error) {
	status, err := e.store.HostStatus(ctx, host)
	if err != nil {
		return logCandidate{}, err
	}
	if logs := swiftLogs(status, o.step, o.version); len(logs) > 0 {
		return logs[0], nil
	}
	rec, found, err := e.store.Departed(ctx, host)
	if err != nil {
		return logCandidate{}, err
	}
	var logs []logCandidate
	if found {
		logs = swiftLogs(departedStatus(rec), o.step, o.version)
	}
	if len(logs) == 0 {
		why := "its status records link none"
		if found {
			why += ", nor does its departed record (forgotten " + rec.Forgotten.UTC().Format(time.RFC3339) + ")"
		}
		fmt.Fprintf(e.Stderr, "orchestrate: no log in Swift for %s%s: %s\n", host, filterText(o), why)
		return logCandidate{}, answerNo()
	}
	fmt.Fprintf(e.Stderr, "orchestrate: %s is gone: its records were forgotten at %s (its server deleted); reading the log its departed record links\n",
		host, rec.Forgotten.UTC().Format(time.RFC3339))
	return logs[0], nil
}

// fetchLog reads log l through a GET temp URL signed with key and copies
// it to standard output.
func fetchLog(ctx context.Context, e *env, o *logsOptions, host string, key []byte, l logCandidate) error {
	u, err := logship.SignGet(key, o.container, l.name, time.Now().Add(readTTL))
	if err != nil {
		return exitcode.Wrap(exitcode.Usage, err)
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
	if err != nil {
		return fmt.Errorf("read %s: bad request", l.url)
	}
	resp, err := logship.Client(o.timeout).Do(req)
	if err != nil {
		return exitcode.Wrap(exitcode.Unavailable, fmt.Errorf("read %s: swift unreachable: %v", l.url, logship.Redact(err)))
	}
	defer resp.Body.Close()
	switch {
	case resp.StatusCode == http.StatusOK:
	case resp.StatusCode == http.StatusNotFound:
		fmt.Fprintf(e.Stderr, "orchestrate: %s is not in Swift (yet): its upload may wait in %s's spool\n", l.url, host)
		return answerNo()
	case resp.StatusCode == http.StatusUnauthorized || resp.StatusCode == http.StatusForbidden:
		return exitcode.Wrap(exitcode.Unavailable, fmt.Errorf("read %s: swift refused the signed read (%s): is --temp-url-key-file the container's temp URL key?", l.url, resp.Status))
	default:
		return exitcode.Wrap(exitcode.Unavailable, fmt.Errorf("read %s: %s", l.url, resp.Status))
	}
	fmt.Fprintf(e.Stderr, "orchestrate: %s: %s log of version %s, %s\n", host, l.object.Step, l.object.Version, l.url)
	if _, err := io.Copy(e.Stdout, resp.Body); err != nil {
		return exitcode.Wrap(exitcode.Unavailable, fmt.Errorf("read %s: %v", l.url, logship.Redact(err)))
	}
	return nil
}

// departedStatus is a departed record's logs as status records, for
// swiftLogs: the same checks apply to them as to a live host's.
func departedStatus(rec reaperkv.DepartedRecord) map[string]store.Status {
	out := make(map[string]store.Status, len(rec.Logs))
	for cat, l := range rec.Logs {
		out[cat] = store.Status{State: l.State, StatusValue: store.StatusValue{Time: l.Time, Version: l.Version, Detail: l.Detail, LogURL: l.LogURL}}
	}
	return out
}

func filterText(o *logsOptions) string {
	var f []string
	if o.step != "" {
		f = append(f, "step "+o.step)
	}
	if o.version != "" {
		f = append(f, "version "+o.version)
	}
	if len(f) == 0 {
		return ""
	}
	return " (" + strings.Join(f, ", ") + ")"
}

// logColumn is get-failures' last column: the failure's log, when linked.
func logColumn(url string) string {
	if url == "" {
		return ""
	}
	return "\tlog " + oneLine(url)
}
