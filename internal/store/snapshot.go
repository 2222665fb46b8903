package store

import (
	"context"
	"fmt"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/hashicorp/consul/api"
	"github.com/jiocloud/orchestrate/internal/store/schema"
)

// Snapshot is everything under the prefix, read in one consistent listing.
type Snapshot struct {
	// CurrentVersion is the desired version; empty when not set.
	CurrentVersion string
	// Hosts holds every host that reported a version or a status.
	Hosts map[string]*Host
	// Desired holds roles/<role>/desired.
	Desired map[string]int
	// Scaling holds autoscaling's and scale-in's keys.
	Scaling schema.Scaling
	// Hooks holds the lifecycle hooks' requests and answers.
	Hooks schema.Hooks
	// Problems lists keys whose content is not what orchestrate writes
	// (corrupt JSON, a host under two versions, an unknown state...).
	Problems []Problem
	// Records holds, by host, the movement of each host's own records
	// (under hosts/<host>/): only the host itself (and an operator) may
	// write there.
	Records map[string]HostRecords
	// OldLayout lists the keys of hosts' records in the layout before node
	// restriction (legacy.go), read where a host has no record of the kind
	// of its own yet: `orchestrate migrate` moves them.
	OldLayout []string

	// While reading: the older layout's records, the hosts with a version
	// record of their own, and the hosts' drain answers.
	legacy     *legacyRecords
	newVersion map[string]bool
	answers    map[string]schema.DrainAnswer
	// ownStatus holds, by host, the categories of its status records of
	// its own (not the older layout's, which any node with the older
	// shared policy could write about any host): the reaper acts on
	// those only.
	ownStatus map[string]map[string]bool
}

// Host is one host's version and status.
type Host struct {
	Name string
	// Version is the version the host runs; empty when it never reported.
	Version     string
	VersionTime time.Time
	// Status maps category to the host's state in it.
	Status map[string]Status
}

// HostRecords is what a host's own records (every key under
// hosts/<host>/, whatever it holds) say of the host's movement.
type HostRecords struct {
	// Index is their highest modify index: Consul's, so it moves whenever
	// the host writes any of them, whatever its clock says. Keys counts
	// them.
	Index uint64
	Keys  int
	// Heartbeat is the time of the host's heartbeat record (its clock,
	// for people; zero without one).
	Heartbeat time.Time
}

// Status is a host's state in one category.
type Status struct {
	State string `json:"state"`
	StatusValue
	// Corrupt is set when the stored value could not be read.
	Corrupt bool `json:"corrupt,omitempty"`
}

// Problem names a key whose value or place is not valid.
type Problem struct {
	Key     string
	Problem string
}

func (p Problem) String() string { return p.Key + ": " + p.Problem }

// Snapshot reads the whole prefix in one request.
func (s *Store) Snapshot(ctx context.Context) (*Snapshot, error) {
	pairs, err := s.listAll(ctx)
	if err != nil {
		return nil, err
	}
	snap := &Snapshot{Hosts: map[string]*Host{}, Records: map[string]HostRecords{}, Desired: map[string]int{}, Scaling: newScaling(), Hooks: schema.NewHooks(),
		legacy: newLegacyRecords(), newVersion: map[string]bool{}, answers: map[string]schema.DrainAnswer{}, ownStatus: map[string]map[string]bool{}}
	for _, p := range pairs {
		parts := strings.Split(schema.RelKey(s.prefix, p.Key), "/")
		switch parts[0] {
		case keyCurrentVersion:
			if len(parts) == 1 {
				snap.addCurrentVersion(p)
			}
		case hostRecordsDir:
			snap.addHostRecord(p, parts)
		case dirRunning:
			snap.addRunning(p, parts)
		case dirStatus:
			snap.addStatus(p, parts)
		case dirMetrics:
			snap.addLegacyMetric(p, parts)
		case dirHook, dirHookAnswer:
			snap.addHook(p, parts)
		default:
			snap.addScaling(p, parts)
		}
	}
	snap.fallBack()
	snap.answerDrains()
	answerHooks(snap.Hooks)
	snap.legacy, snap.newVersion, snap.answers = nil, nil, nil
	return snap, nil
}

// listAll reads every key under the prefix, refusing a listing Consul's
// ACLs left keys out of.
func (s *Store) listAll(ctx context.Context) (api.KVPairs, error) {
	dir := schema.PrefixDir(s.prefix)
	pairs, meta, err := s.kv.List(dir, readOpts(ctx))
	if err != nil {
		return nil, fmt.Errorf("read %s: %w", dir, err)
	}
	if err := hiddenByACLs(meta, dir); err != nil {
		return nil, err
	}
	return pairs, nil
}

// addHostRecord reads one of a host's own records: hosts/<host>/version,
// hosts/<host>/status/<category>, hosts/<host>/metrics/<name> or
// hosts/<host>/drain.
func (snap *Snapshot) addHostRecord(p *api.KVPair, parts []string) {
	if len(parts) < 3 || schema.ValidName("host", parts[1]) != nil {
		snap.bad(p.Key, "not a record of a host (hosts/<host>/...)")
		return
	}
	name, rest := parts[1], parts[2:]
	own := snap.Records[name]
	own.Index, own.Keys = max(own.Index, p.ModifyIndex), own.Keys+1
	snap.Records[name] = own
	switch {
	case len(rest) == 1 && rest[0] == hostVersion:
		snap.newVersion[name] = true
		v, err := parseVersionRecord(p.Value)
		if err != nil {
			snap.bad(p.Key, "%v", err)
			return
		}
		h := snap.host(name)
		h.Version, h.VersionTime = v.Version, v.Time
	case len(rest) == 2 && rest[0] == hostStatus && schema.ValidName("category", rest[1]) == nil:
		st, err := parseStatusRecord(p.Value)
		if err != nil {
			snap.bad(p.Key, "%v", err)
		}
		snap.host(name).Status[rest[1]] = st
		if snap.ownStatus[name] == nil {
			snap.ownStatus[name] = map[string]bool{}
		}
		snap.ownStatus[name][rest[1]] = true
	case len(rest) == 2 && rest[0] == hostMetrics && schema.ValidName("metric", rest[1]) == nil:
		m, err := parseMetricReport(p.Value)
		if err != nil {
			snap.bad(p.Key, "%v", err)
			return
		}
		if snap.Scaling.Metrics[name] == nil {
			snap.Scaling.Metrics[name] = map[string]schema.MetricReport{}
		}
		snap.Scaling.Metrics[name][rest[1]] = m
	case len(rest) == 1 && rest[0] == hostHeartbeat:
		var hb heartbeatRecord
		if err := schema.StrictJSON(p.Value, &hb); err != nil || hb.Time.IsZero() {
			snap.bad(p.Key, "not a heartbeat (`orchestrate heartbeat` writes {\"time\"})")
			return
		}
		own.Heartbeat = hb.Time
		snap.Records[name] = own
	case len(rest) == 1 && rest[0] == hostDrain:
		a, err := parseDrainAnswer(p.Value)
		if err != nil {
			snap.bad(p.Key, "%v", err)
			return
		}
		snap.answers[name] = a
	default:
		snap.bad(p.Key, "not a record orchestrate writes under hosts/<host>/ (version, status/<category>, metrics/<name>, drain, heartbeat)")
	}
}

// answerDrains gives each drain request its answer: the host's own record
// when it names the request's entry (an answer to an earlier request is
// none), else an answer the older layout kept inside the request.
func (snap *Snapshot) answerDrains() {
	for host, d := range snap.Scaling.Drains {
		if a, ok := snap.answers[host]; ok && a.Entry == d.Entry {
			d.Answer = &a
		}
		snap.Scaling.Drains[host] = d
	}
}

func (snap *Snapshot) host(name string) *Host {
	h := snap.Hosts[name]
	if h == nil {
		h = &Host{Name: name, Status: map[string]Status{}}
		snap.Hosts[name] = h
	}
	return h
}

func (snap *Snapshot) bad(key, format string, args ...any) {
	snap.Problems = append(snap.Problems, Problem{Key: key, Problem: fmt.Sprintf(format, args...)})
}

func (snap *Snapshot) addCurrentVersion(p *api.KVPair) {
	v := string(p.Value)
	if err := schema.ValidName("version", v); err != nil {
		snap.bad(p.Key, "%v", err)
		return
	}
	snap.CurrentVersion = v
}

// addDesired reads roles/<role>/desired.
func (snap *Snapshot) addDesired(p *api.KVPair, role string) {
	n, err := parseDesired(p.Value)
	if err != nil {
		snap.bad(p.Key, "%v", err)
		return
	}
	snap.Desired[role] = n
}

// parseDesired reads a roles/<role>/desired value.
func parseDesired(v []byte) (int, error) {
	n, err := strconv.Atoi(strings.TrimSpace(string(v)))
	if err != nil || n < 0 {
		return 0, fmt.Errorf("desired count %q is not a non-negative integer", v)
	}
	return n, nil
}

// HostNames returns the hosts in sorted order.
func (s *Snapshot) HostNames() []string {
	names := make([]string, 0, len(s.Hosts))
	for n := range s.Hosts {
		names = append(names, n)
	}
	sort.Strings(names)
	return names
}

// Categories returns every category any host has a state in: provisioned,
// puppet, eventual and validation first, then the rest sorted.
func (s *Snapshot) Categories() []string {
	seen := map[string]bool{}
	for _, h := range s.Hosts {
		for c := range h.Status {
			seen[c] = true
		}
	}
	var out []string
	for _, c := range []string{CategoryProvisioned, CategoryPuppet, CategoryEventual, CategoryValidation} {
		if seen[c] {
			out = append(out, c)
			delete(seen, c)
		}
	}
	var rest []string
	for c := range seen {
		rest = append(rest, c)
	}
	sort.Strings(rest)
	return append(out, rest...)
}

// VersionCounts maps each running version to its number of hosts.
func (s *Snapshot) VersionCounts() map[string]int {
	out := map[string]int{}
	for _, h := range s.Hosts {
		if h.Version != "" {
			out[h.Version]++
		}
	}
	return out
}

// Failure is a host in the failed state of a category.
type Failure struct {
	Host     string    `json:"host"`
	Category string    `json:"category"`
	Since    time.Time `json:"since"`
	Version  string    `json:"version"`
	Detail   string    `json:"detail"`
	LogURL   string    `json:"log_url"`
}

// Failures lists failed hosts (and records whose state cannot be read),
// sorted by host then category, limited to categories when any are given.
func (s *Snapshot) Failures(categories ...string) []Failure {
	want := map[string]bool{}
	for _, c := range categories {
		want[c] = true
	}
	var out []Failure
	for _, name := range s.HostNames() {
		h := s.Hosts[name]
		cats := make([]string, 0, len(h.Status))
		for c := range h.Status {
			cats = append(cats, c)
		}
		sort.Strings(cats)
		for _, c := range cats {
			st := h.Status[c]
			// A record whose state cannot be read (the host-first layout
			// keeps the state in the value) is listed as a failure too.
			failed := st.State == StateFailed || (st.Corrupt && st.State == "")
			if !failed || (len(want) > 0 && !want[c]) {
				continue
			}
			detail := st.Detail
			if st.Corrupt {
				detail = "(stored value unreadable)"
			}
			out = append(out, Failure{Host: name, Category: c, Since: st.Time, Version: st.Version, Detail: detail, LogURL: st.LogURL})
		}
	}
	return out
}
