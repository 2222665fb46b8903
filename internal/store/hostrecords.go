package store

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"time"

	"github.com/hashicorp/consul/api"
	"github.com/jiocloud/orchestrate/internal/store/schema"
)

// Each host's own records live under <prefix>/hosts/<host>/, which the
// host's own policy (HostPolicyRules) lets it write and no other node's:
//
//	hosts/<host>/version            {"version", "time"}: the version it runs
//	hosts/<host>/status/<category>  {"state", "time", "version", "detail",
//	                                "log_url", "suspect", "waiting"}: its
//	                                state in the category
//	hosts/<host>/metrics/<name>     {"role", "value", "time"}: its load
//	hosts/<host>/drain              {"entry", "time", "by", "drained",
//	                                "detail"}: its answer to the drain
//	                                request of journal entry "entry"
//	hosts/<host>/heartbeat          {"time"}: its answer to the reaper's
//	                                heartbeat (reaper/heartbeat), so a
//	                                healthy idle host's records move
//
// One key per record: a host stands under one version and in one state of
// a category by construction, so no write moves anything. The layout
// before node restriction put the host last (legacy.go); readers fall back
// to it for a host's record of a kind while the host has none of that kind
// here, and `orchestrate migrate` moves it.
const (
	// hostRecordsDir is <prefix>/hosts/: each host's own records live
	// under hosts/<host>/.
	hostRecordsDir = "hosts"
	hostVersion    = "version"
	hostStatus     = "status"
	hostMetrics    = "metrics"
	hostDrain      = "drain"
	hostHeartbeat  = "heartbeat"
)

// HostDir is <prefix>/hosts/<host>/, the host's own records.
func HostDir(prefix, host string) string { return keyDir(prefix, hostRecordsDir, host) }

// statusKind is status/<category>, a host's status record relative to
// HostDir; statusKind("") is the directory of them all.
func statusKind(category string) string { return hostStatus + "/" + category }

// metricKind is metrics/<name>, a host's load report relative to HostDir.
func metricKind(name string) string { return hostMetrics + "/" + name }

// HostVersionKey is hosts/<host>/version under prefix.
func HostVersionKey(prefix, host string) string { return HostDir(prefix, host) + hostVersion }

// HostStatusKey is hosts/<host>/status/<category> under prefix.
func HostStatusKey(prefix, host, category string) string {
	return HostDir(prefix, host) + statusKind(category)
}

// MetricKey is hosts/<host>/metrics/<name> under prefix.
func MetricKey(prefix, host, name string) string { return HostDir(prefix, host) + metricKind(name) }

// DrainAnswerKey is hosts/<host>/drain under prefix: the host's answer to
// its drain request (the request itself is DrainKey, the reaper's).
func DrainAnswerKey(prefix, host string) string { return HostDir(prefix, host) + hostDrain }

// HeartbeatKey is hosts/<host>/heartbeat under prefix: the host's answer
// to the reaper's heartbeat.
func HeartbeatKey(prefix, host string) string { return HostDir(prefix, host) + hostHeartbeat }

// heartbeatRecord is the value of hosts/<host>/heartbeat.
type heartbeatRecord struct {
	Time time.Time `json:"time"`
}

// Heartbeat writes host's heartbeat record (one key, one write): the
// host's orchestrate, token and Consul agent work. Its time is the host's
// clock, for people; the reaper judges movement by Consul's index.
func (s *Store) Heartbeat(ctx context.Context, host string) error {
	if err := schema.ValidName("host", host); err != nil {
		return &InputError{Err: err}
	}
	data, _ := json.Marshal(heartbeatRecord{Time: s.Now().UTC()})
	k := HeartbeatKey(s.prefix, host)
	if _, err := s.kv.Put(&api.KVPair{Key: k, Value: data}, writeOpts(ctx)); err != nil {
		return fmt.Errorf("write %s: %w", k, err)
	}
	return nil
}

// statusRecord is the value of hosts/<host>/status/<category>.
type statusRecord struct {
	State string `json:"state"`
	StatusValue
}

// parseStatusRecord reads a hosts/<host>/status/<category> value.
func parseStatusRecord(data []byte) (Status, error) {
	var r statusRecord
	if err := json.Unmarshal(data, &r); err != nil {
		return Status{Corrupt: true}, fmt.Errorf("value is not the JSON orchestrate writes: %w", err)
	}
	if !ValidState(r.State) {
		return Status{Corrupt: true}, fmt.Errorf("unknown state %q", r.State)
	}
	return Status{State: r.State, StatusValue: r.StatusValue}, nil
}

// parseVersionRecord reads a hosts/<host>/version value.
func parseVersionRecord(data []byte) (VersionValue, error) {
	var v VersionValue
	if err := json.Unmarshal(data, &v); err != nil {
		return VersionValue{}, fmt.Errorf("value is not the JSON orchestrate writes: %w", err)
	}
	if err := schema.ValidName("version", v.Version); err != nil {
		return VersionValue{}, fmt.Errorf("not a version record: %w", err)
	}
	return v, nil
}

// parseDrainAnswer reads a hosts/<host>/drain value: an answer counts only
// with the entry of the request it answers.
func parseDrainAnswer(data []byte) (schema.DrainAnswer, error) {
	var a schema.DrainAnswer
	if err := schema.StrictJSON(data, &a); err != nil || a.Entry == "" || a.Time.IsZero() {
		return schema.DrainAnswer{}, fmt.Errorf("not a drain answer (`orchestrate drained` writes {\"entry\", \"time\", \"by\", \"drained\", \"detail\"})")
	}
	return a, nil
}

// parseMetricReport reads a metric report, in either layout.
func parseMetricReport(data []byte) (schema.MetricReport, error) {
	var m schema.MetricReport
	if err := schema.StrictJSON(data, &m); err != nil || m.Time.IsZero() {
		return schema.MetricReport{}, fmt.Errorf("not a metric report (`orchestrate report-metric` writes {\"role\", \"value\", \"time\"})")
	}
	return m, nil
}

// HostVersions returns the versions host is listed under: its own record,
// else (a host that has not written one since the upgrade) its records in
// the older layout, normally one, none before its first report.
func (s *Store) HostVersions(ctx context.Context, host string) ([]string, error) {
	if err := schema.ValidName("host", host); err != nil {
		return nil, &InputError{Err: err}
	}
	k := HostVersionKey(s.prefix, host)
	p, err := s.get(ctx, k)
	if err != nil {
		return nil, err
	}
	if p != nil {
		v, err := parseVersionRecord(p.Value)
		if err != nil {
			return nil, &InputError{Err: fmt.Errorf("%s: %w", k, err)}
		}
		return []string{v.Version}, nil
	}
	return s.legacyHostVersions(ctx, host)
}

// ReportVersion records that host runs version, in its own record (one
// key: a host stands under one version by construction).
func (s *Store) ReportVersion(ctx context.Context, host, version string) error {
	if err := schema.ValidName("host", host); err != nil {
		return &InputError{Err: err}
	}
	if err := schema.ValidName("version", version); err != nil {
		return &InputError{Err: err}
	}
	val, err := json.Marshal(VersionValue{Version: version, Time: s.Now().UTC()})
	if err != nil {
		return err
	}
	k := HostVersionKey(s.prefix, host)
	if _, err := s.kv.Put(&api.KVPair{Key: k, Value: val}, writeOpts(ctx)); err != nil {
		return fmt.Errorf("write %s: %w", k, err)
	}
	return nil
}

// UpdateStatus puts host in state of category: one key per category, so
// exactly one state. The write is a check-and-set on the index read, so of
// two writers on one host neither overwrites a record it did not see:
// the later one reads again and writes over the record that stands.
func (s *Store) UpdateStatus(ctx context.Context, host, category, state string, v StatusValue) error {
	if err := schema.ValidName("host", host); err != nil {
		return &InputError{Err: err}
	}
	if err := schema.ValidName("category", category); err != nil {
		return &InputError{Err: err}
	}
	if !ValidState(state) {
		return &InputError{Err: fmt.Errorf("state %q is not one of %s", state, strings.Join(States, ", "))}
	}
	if v.Time.IsZero() {
		v.Time = s.Now().UTC()
	}
	val, err := json.Marshal(statusRecord{State: state, StatusValue: v})
	if err != nil {
		return err
	}
	k := HostStatusKey(s.prefix, host, category)
	for attempt := 0; attempt < maxAttempts; attempt++ {
		if err := backoff(ctx, attempt); err != nil {
			return err
		}
		p, err := s.get(ctx, k)
		if err != nil {
			return err
		}
		var index uint64 // 0: must not exist yet
		if p != nil {
			index = p.ModifyIndex
		}
		ok, err := s.txn(ctx, api.KVTxnOps{{Verb: api.KVCAS, Key: k, Value: val, Index: index}}, "write "+k)
		if err != nil || ok {
			return err
		}
	}
	return fmt.Errorf("%s: %w", k, ErrConflict)
}

// HostStatus returns host's state in every category it has one in: its own
// records, and for a category it has none in since the upgrade, its record
// in the older layout.
func (s *Store) HostStatus(ctx context.Context, host string) (map[string]Status, error) {
	if err := schema.ValidName("host", host); err != nil {
		return nil, &InputError{Err: err}
	}
	dir := HostDir(s.prefix, host) + statusKind("")
	pairs, _, err := s.kv.List(dir, readOpts(ctx))
	if err != nil {
		return nil, fmt.Errorf("list %s: %w", dir, err)
	}
	out := map[string]Status{}
	for _, p := range pairs {
		cat := strings.TrimPrefix(p.Key, dir)
		if schema.ValidName("category", cat) != nil {
			continue
		}
		st, _ := parseStatusRecord(p.Value)
		out[cat] = st
	}
	if err := s.legacyHostStatus(ctx, host, out); err != nil {
		return nil, err
	}
	return out, nil
}

// ReportMetric writes host's report of metric name, host being of role
// (recorded for the reader; the reaper takes a host's role from what it
// knows of the server, never from the report).
func (s *Store) ReportMetric(ctx context.Context, role, host, name string, v float64) error {
	for _, c := range [][2]string{{"role", role}, {"host", host}, {"metric", name}} {
		if err := schema.ValidName(c[0], c[1]); err != nil {
			return &InputError{Err: err}
		}
	}
	if err := ValidMetricValue(v); err != nil {
		return &InputError{Err: err}
	}
	data, _ := json.Marshal(schema.MetricReport{Role: role, Value: v, Time: s.Now().UTC()})
	k := MetricKey(s.prefix, host, name)
	if _, err := s.kv.Put(&api.KVPair{Key: k, Value: data}, writeOpts(ctx)); err != nil {
		return fmt.Errorf("write %s: %w", k, err)
	}
	return nil
}

// drainState is host's drain request and the host's answer record, each
// with its modify index (0: absent). An answer record that is not one is
// no answer (its index is kept, so an answer can replace it).
type drainState struct {
	req      *schema.DrainRecord
	reqIndex uint64
	ans      *schema.DrainAnswer
	ansIndex uint64
}

// answer is the answer to the request: the host's record when it names
// the request's entry, else an answer kept inside the request by the
// older layout; nil when none.
func (d drainState) answer() *schema.DrainAnswer {
	switch {
	case d.req == nil:
		return nil
	case d.ans != nil && d.ans.Entry == d.req.Entry:
		return d.ans
	default:
		return d.req.Answer
	}
}

func (s *Store) readDrain(ctx context.Context, host string) (drainState, error) {
	var d drainState
	if err := schema.ValidName("host", host); err != nil {
		return d, &InputError{Err: err}
	}
	k := DrainKey(s.prefix, host)
	p, err := s.get(ctx, k)
	if err != nil || p == nil {
		return d, err
	}
	var req schema.DrainRecord
	if err := schema.StrictJSON(p.Value, &req); err != nil || req.Requested.IsZero() {
		return d, &InputError{Err: fmt.Errorf("%s holds a value the reaper did not write", k)}
	}
	d.req, d.reqIndex = &req, p.ModifyIndex
	a, err := s.get(ctx, DrainAnswerKey(s.prefix, host))
	if err != nil {
		return d, err
	}
	if a != nil {
		d.ansIndex = a.ModifyIndex
		if ans, err := parseDrainAnswer(a.Value); err == nil {
			d.ans = &ans
		}
	}
	return d, nil
}

// Drain reads host's drain request, with its modify index; its Answer is
// the host's answer to it (an answer to another request is none).
func (s *Store) Drain(ctx context.Context, host string) (*schema.DrainRecord, uint64, error) {
	d, err := s.readDrain(ctx, host)
	if err != nil || d.req == nil {
		return nil, 0, err
	}
	d.req.Answer = d.answer()
	return d.req, d.reqIndex, nil
}

// AnswerDrain records the answer to host's drain request in the host's own
// record (DrainAnswerKey), naming the request's entry, in one transaction
// that checks the request is the one read: an answer never lands on a
// request that ended or was replaced. It returns the request with its
// answer: when it was answered already, that answer, unchanged (the first
// answer counts). ErrNoDrain when there is no request.
func (s *Store) AnswerDrain(ctx context.Context, host string, a schema.DrainAnswer) (*schema.DrainRecord, error) {
	for attempt := 0; attempt < maxAttempts; attempt++ {
		if err := backoff(ctx, attempt); err != nil {
			return nil, err
		}
		d, err := s.readDrain(ctx, host)
		if err != nil {
			return nil, err
		}
		if d.req == nil {
			return nil, ErrNoDrain
		}
		if prev := d.answer(); prev != nil {
			d.req.Answer = prev
			return d.req, nil
		}
		a.Entry = d.req.Entry
		data, _ := json.Marshal(a)
		ok, resp, _, err := s.kv.Txn(api.KVTxnOps{
			{Verb: api.KVCheckIndex, Key: DrainKey(s.prefix, host), Index: d.reqIndex},
			{Verb: api.KVCAS, Key: DrainAnswerKey(s.prefix, host), Index: d.ansIndex, Value: data},
		}, readOpts(ctx))
		switch {
		case err != nil:
			return nil, fmt.Errorf("answer the drain of %s: %w", host, err)
		case ok:
			d.req.Answer = &a
			return d.req, nil
		case !movedUnder(resp):
			return nil, refusedOr(resp, fmt.Errorf("answer the drain of %s: transaction rolled back: %s", host, TxnErrors(resp)))
		}
		// The request or the answer moved since the read (the reaper ended
		// or replaced the request, another answer came): read again.
	}
	return nil, fmt.Errorf("answer the drain of %s: %w", host, ErrConflict)
}

// movedUnder reports whether a transaction rolled back only because keys
// it checked moved since they were read: a check-and-set on a stale index,
// or an index check on a key changed or gone. A refusal is not.
func movedUnder(resp *api.KVTxnResponse) bool {
	if resp == nil || len(resp.Errors) == 0 {
		return false
	}
	for _, e := range resp.Errors {
		if !strings.Contains(e.What, "index is stale") && !strings.Contains(e.What, "failed index check") && !strings.Contains(e.What, "failed to check index") {
			return false
		}
	}
	return true
}

// get reads key k (nil when absent).
func (s *Store) get(ctx context.Context, k string) (*api.KVPair, error) {
	p, _, err := s.kv.Get(k, readOpts(ctx))
	if err != nil {
		return nil, fmt.Errorf("read %s: %w", k, err)
	}
	return p, nil
}
