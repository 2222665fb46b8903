package store

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"

	"github.com/hashicorp/consul/api"
	"github.com/jiocloud/orchestrate/internal/store/schema"
)

// The layout before node restriction put the host last, where Consul's
// prefix rules cannot confine a node to its own records:
//
//	running_version/<version>/<host>   {"time"}
//	status/<category>/<state>/<host>   {"time", "version", "detail", "log_url", ...}
//	metrics/<role>/<host>/<name>       {"value", "time"}
//	drain/<host>                       the request, with the answer inside it
//	                                   ("answer": {"time", "by", "drained", "detail"})
//
// Nothing writes these keys now. Readers fall back to them for a host's
// record of a kind while the host has none of that kind under
// hosts/<host>/, so an upgraded cloud keeps its history and nothing looks
// missing; `orchestrate migrate` (Migrate) moves them.
const (
	dirRunning = "running_version"
	dirStatus  = "status"
	dirMetrics = "metrics"
)

// legacyRecords collects the older layout's records of a snapshot, each
// host's newest of each kind, until the snapshot falls back to them.
type legacyRecords struct {
	versions map[string]legacyVersion
	status   map[string]map[string]Status
	metrics  map[string]map[string]schema.MetricReport
}

type legacyVersion struct {
	version string
	VersionValue
}

func newLegacyRecords() *legacyRecords {
	return &legacyRecords{versions: map[string]legacyVersion{}, status: map[string]map[string]Status{}, metrics: map[string]map[string]schema.MetricReport{}}
}

// addRunning reads running_version/<version>/<host>.
func (snap *Snapshot) addRunning(p *api.KVPair, parts []string) {
	if len(parts) != 3 || schema.ValidName("version", parts[1]) != nil || schema.ValidName("host", parts[2]) != nil {
		snap.bad(p.Key, "not of the form running_version/<version>/<host>")
		return
	}
	snap.OldLayout = append(snap.OldLayout, p.Key)
	var vv VersionValue
	if err := json.Unmarshal(p.Value, &vv); err != nil {
		snap.bad(p.Key, "value is not the JSON orchestrate writes: %v", err)
	}
	host := parts[2]
	if prev, dup := snap.legacy.versions[host]; dup {
		snap.bad(p.Key, "host %s is also under version %s", host, prev.version)
		// Keep the most recent report as the host's version.
		if !vv.Time.After(prev.Time) {
			return
		}
	}
	snap.legacy.versions[host] = legacyVersion{version: parts[1], VersionValue: vv}
}

// addStatus reads status/<category>/<state>/<host>.
func (snap *Snapshot) addStatus(p *api.KVPair, parts []string) {
	if len(parts) != 4 || schema.ValidName("category", parts[1]) != nil || schema.ValidName("host", parts[3]) != nil {
		snap.bad(p.Key, "not of the form status/<category>/<state>/<host>")
		return
	}
	snap.OldLayout = append(snap.OldLayout, p.Key)
	cat, state, name := parts[1], parts[2], parts[3]
	if !ValidState(state) {
		snap.bad(p.Key, "unknown state %q", state)
		return
	}
	st := Status{State: state}
	if err := json.Unmarshal(p.Value, &st.StatusValue); err != nil {
		snap.bad(p.Key, "value is not the JSON orchestrate writes: %v", err)
		st.Corrupt = true
	}
	m := snap.legacy.status[name]
	if m == nil {
		m = map[string]Status{}
		snap.legacy.status[name] = m
	}
	if prev, dup := m[cat]; dup {
		snap.bad(p.Key, "host %s is also %s in %s", name, prev.State, cat)
		if !st.Time.After(prev.Time) {
			return
		}
	}
	m[cat] = st
}

// addLegacyMetric reads metrics/<role>/<host>/<name>. The role in the key
// is kept in the report for the reader; the reaper does not take it.
func (snap *Snapshot) addLegacyMetric(p *api.KVPair, parts []string) {
	if len(parts) != 4 || schema.ValidName("role", parts[1]) != nil || schema.ValidName("host", parts[2]) != nil || schema.ValidName("metric", parts[3]) != nil {
		snap.bad(p.Key, "not of the form metrics/<role>/<host>/<name>")
		return
	}
	snap.OldLayout = append(snap.OldLayout, p.Key)
	m, err := parseMetricReport(p.Value)
	if err != nil {
		snap.bad(p.Key, "%v", err)
		return
	}
	m.Role = parts[1]
	host, name := parts[2], parts[3]
	if snap.legacy.metrics[host] == nil {
		snap.legacy.metrics[host] = map[string]schema.MetricReport{}
	}
	if prev, dup := snap.legacy.metrics[host][name]; dup && !m.Time.After(prev.Time) {
		return
	}
	snap.legacy.metrics[host][name] = m
}

// fallBack gives each host the older layout's record of every kind it has
// no record of under hosts/<host>/.
func (snap *Snapshot) fallBack() {
	old := snap.legacy
	for name, v := range old.versions {
		if !snap.newVersion[name] {
			h := snap.host(name)
			h.Version, h.VersionTime = v.version, v.Time
		}
	}
	for name, cats := range old.status {
		for cat, st := range cats {
			h := snap.host(name)
			if _, ok := h.Status[cat]; !ok {
				h.Status[cat] = st
			}
		}
	}
	for name, ms := range old.metrics {
		for metric, m := range ms {
			mine := snap.Scaling.Metrics[name]
			if mine == nil {
				mine = map[string]schema.MetricReport{}
				snap.Scaling.Metrics[name] = mine
			}
			if _, ok := mine[metric]; !ok {
				mine[metric] = m
			}
		}
	}
}

// legacyHostVersions lists the versions host is under in the older layout.
func (s *Store) legacyHostVersions(ctx context.Context, host string) ([]string, error) {
	keys, _, err := s.kv.Keys(keyDir(s.prefix, dirRunning), "", readOpts(ctx))
	if err != nil {
		return nil, fmt.Errorf("list running versions: %w", err)
	}
	var out []string
	for _, k := range keys {
		if v, h, ok := s.splitRunning(k); ok && h == host {
			out = append(out, v)
		}
	}
	return out, nil
}

// legacyHostStatus adds to out host's state, in the older layout, in each
// category out has none in.
func (s *Store) legacyHostStatus(ctx context.Context, host string, out map[string]Status) error {
	dir := keyDir(s.prefix, dirStatus)
	keys, _, err := s.kv.Keys(dir, "", readOpts(ctx))
	if err != nil {
		return fmt.Errorf("list %s: %w", dir, err)
	}
	old := map[string]Status{}
	for _, k := range keys {
		parts := strings.Split(strings.TrimPrefix(k, dir), "/")
		if len(parts) != 3 || parts[2] != host || !ValidState(parts[1]) {
			continue
		}
		if _, mine := out[parts[0]]; mine {
			continue
		}
		p, _, err := s.kv.Get(k, readOpts(ctx))
		if err != nil {
			return fmt.Errorf("read %s: %w", k, err)
		}
		if p == nil {
			continue // moved since the listing
		}
		st := Status{State: parts[1]}
		if err := json.Unmarshal(p.Value, &st.StatusValue); err != nil {
			st.Corrupt = true
		}
		if prev, dup := old[parts[0]]; dup && !st.Time.After(prev.Time) {
			continue
		}
		old[parts[0]] = st
	}
	for cat, st := range old {
		out[cat] = st
	}
	return nil
}

// splitRunning parses <prefix>/running_version/<version>/<host>.
func (s *Store) splitRunning(key string) (version, host string, ok bool) {
	rest, found := strings.CutPrefix(key, keyDir(s.prefix, dirRunning))
	if !found {
		return "", "", false
	}
	version, host, ok = strings.Cut(rest, "/")
	if !ok || version == "" || host == "" || strings.Contains(host, "/") {
		return "", "", false
	}
	return version, host, true
}
