package store

import (
	"context"
	"encoding/json"
	"fmt"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/hashicorp/consul/api"
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
	Scaling Scaling
	// Problems lists keys whose content is not what orchestrate writes
	// (corrupt JSON, a host under two versions, an unknown state...).
	Problems []Problem
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
	pairs, meta, err := s.kv.List(s.prefix+"/", readOpts(ctx))
	if err != nil {
		return nil, fmt.Errorf("read %s/: %w", s.prefix, err)
	}
	if err := hiddenByACLs(meta, s.prefix+"/"); err != nil {
		return nil, err
	}
	snap := &Snapshot{Hosts: map[string]*Host{}, Desired: map[string]int{}, Scaling: newScaling()}
	for _, p := range pairs {
		parts := strings.Split(strings.TrimPrefix(p.Key, s.prefix+"/"), "/")
		switch parts[0] {
		case keyCurrentVersion:
			if len(parts) == 1 {
				snap.addCurrentVersion(p)
			}
		case dirRunning:
			snap.addRunning(p, parts)
		case dirStatus:
			snap.addStatus(p, parts)
		default:
			snap.addScaling(p, parts)
		}
	}
	return snap, nil
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
	if err := ValidName("version", v); err != nil {
		snap.bad(p.Key, "%v", err)
		return
	}
	snap.CurrentVersion = v
}

// addRunning reads running_version/<version>/<host>.
func (snap *Snapshot) addRunning(p *api.KVPair, parts []string) {
	if len(parts) != 3 || ValidName("version", parts[1]) != nil || ValidName("host", parts[2]) != nil {
		snap.bad(p.Key, "not of the form running_version/<version>/<host>")
		return
	}
	var vv VersionValue
	if err := json.Unmarshal(p.Value, &vv); err != nil {
		snap.bad(p.Key, "value is not the JSON orchestrate writes: %v", err)
	}
	h := snap.host(parts[2])
	if h.Version != "" {
		snap.bad(p.Key, "host %s is also under version %s", h.Name, h.Version)
		// Keep the most recent report as the host's version.
		if !vv.Time.After(h.VersionTime) {
			return
		}
	}
	h.Version, h.VersionTime = parts[1], vv.Time
}

// addStatus reads status/<category>/<state>/<host>.
func (snap *Snapshot) addStatus(p *api.KVPair, parts []string) {
	if len(parts) != 4 || ValidName("category", parts[1]) != nil || ValidName("host", parts[3]) != nil {
		snap.bad(p.Key, "not of the form status/<category>/<state>/<host>")
		return
	}
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
	h := snap.host(name)
	if prev, dup := h.Status[cat]; dup {
		snap.bad(p.Key, "host %s is also %s in %s", name, prev.State, cat)
		if !st.Time.After(prev.Time) {
			return
		}
	}
	h.Status[cat] = st
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

// Failures lists failed hosts, sorted by host then category, limited to
// categories when any are given.
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
			if st.State != StateFailed || (len(want) > 0 && !want[c]) {
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
