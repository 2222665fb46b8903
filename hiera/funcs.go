package hiera

import (
	"bytes"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"regexp"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"text/template"

	dep "github.com/hashicorp/consul-template/dependency"
	"github.com/hashicorp/consul/api"

	"github.com/jiocloud/orchestrate/internal/store/reaperkv"
)

// Selection says which services a render puts into the output and what it
// needs for the header and the dependency keys.
type Selection struct {
	// Services names services to output; with ServiceRegex, a service named
	// here or matching it is output. Neither: every service.
	Services []string
	// ServiceRegex selects services by name.
	ServiceRegex *regexp.Regexp
	// Dependencies are the node's declared dependencies. Their services are
	// always queried, to count instances, even when not output; a selected
	// one is always output, its lists empty while it has no instance.
	Dependencies Dependencies
	// Expect names services always output, selected or not, their lists
	// empty while they have no instance, so Puppet code that looks them up
	// compiles before the first instance registers.
	Expect []string
	// Datacenter is the datacenter the data comes from, for the header.
	Datacenter string
	// QueryDatacenter, when set, adds @Datacenter to every catalog query;
	// otherwise the agent's own datacenter is queried.
	QueryDatacenter bool
}

func (s *Selection) selected(name string) bool {
	if len(s.Services) == 0 && s.ServiceRegex == nil || slices.Contains(s.Expect, name) {
		return true
	}
	return slices.Contains(s.Services, name) || s.ServiceRegex != nil && s.ServiceRegex.MatchString(name)
}

// expected returns the services whose keys are always output: Expect and
// the selected dependencies, sorted.
func (s *Selection) expected() []string {
	out := slices.Clone(s.Expect)
	for _, r := range s.Dependencies {
		if s.selected(r.Service) {
			out = append(out, r.Service)
		}
	}
	slices.Sort(out)
	return slices.Compact(out)
}

func (s *Selection) dependency(name string) bool {
	for _, r := range s.Dependencies {
		if r.Service == name {
			return true
		}
	}
	return false
}

// Funcs are the template functions hiera-services adds to consul-template's
// through its ExtFuncMap. Across renders they keep the names already warned
// about, and the data of the latest render for Expand.
type Funcs struct {
	sel *Selection
	log *slog.Logger
	// marker is a random per-process token: "$h.YAML" prints it, and Expand
	// replaces it with the encoded data. Catalog text cannot forge it.
	marker string

	mu     sync.Mutex
	warned map[string]bool // guarded by mu
	latest *Collector      // guarded by mu: the last render's data
	seq    int             // guarded by mu: numbers renders
	// fragments caches each service's encoded keys by the identity of the
	// instance list consul-template handed over, which stays the same
	// until that service's query returns new data. Guarded by encodeMu
	// (not mu: encoding warns, and warnOnce takes mu).
	encodeMu  sync.Mutex
	fragments map[string]*fragment
}

// fragment is one service's encoded healthy_services:: and services:: lines.
type fragment struct {
	first             *dep.HealthService
	n                 int
	healthy, services []byte
}

// NewFuncs returns the template functions for a selection; log receives one
// warning per name skipped because it cannot form a hiera key.
func NewFuncs(sel *Selection, log *slog.Logger) *Funcs {
	var b [12]byte
	_, _ = rand.Read(b[:])
	return &Funcs{sel: sel, log: log, warned: map[string]bool{}, marker: "#hiera-services-data-" + hex.EncodeToString(b[:]) + "-"}
}

// FuncMap returns the functions for config.TemplateConfig.ExtFuncMap:
//
//	hieraData  a fresh *Collector for this render
//	yamlQuote  a string as a double-quoted YAML scalar with Hiera's
//	           interpolation escaped, for custom templates
func (f *Funcs) FuncMap() template.FuncMap {
	return template.FuncMap{
		"hieraData": func() *Collector { return &Collector{f: f} },
		"yamlQuote": YAMLQuote,
	}
}

func (f *Funcs) warnOnce(key, msg string, args ...any) {
	f.mu.Lock()
	seen := f.warned[key]
	f.warned[key] = true
	f.mu.Unlock()
	if !seen {
		f.log.Warn(msg, args...)
	}
}

// Expand replaces the marker a render's "$h.YAML" printed with that render's
// data as YAML. consul-template executes a template many times while its
// queries come in and writes only the last, complete execution; encoding
// there, once, instead of in every execution keeps a large catalog cheap.
// trusted reports that nothing but comment lines surrounds the data, so
// the output needs no further YAML check.
func (f *Funcs) Expand(contents []byte) (out []byte, trusted bool, err error) {
	if !bytes.Contains(contents, []byte(f.marker)) {
		return contents, false, nil
	}
	f.mu.Lock()
	c := f.latest
	f.mu.Unlock()
	i := -1
	var m []byte
	if c != nil {
		m = []byte(f.marker + strconv.Itoa(c.seq) + "\n")
		i = bytes.Index(contents, m)
	}
	if i < 0 {
		return nil, false, errors.New("render: the output holds no data of its own render")
	}
	data, err := f.encode(c)
	if err != nil {
		return nil, false, err
	}
	end := i + len(m)
	out = make([]byte, 0, len(contents)+len(data))
	out = append(out, contents[:i]...)
	out = append(out, data...)
	out = append(out, contents[end:]...)
	// Other markers (a template calling hieraData twice) stay behind as
	// YAML comments.
	return out, onlyComments(contents[:i]) && onlyComments(contents[end:]), nil
}

// onlyComments reports whether b holds nothing but blank and comment lines.
func onlyComments(b []byte) bool {
	for _, line := range bytes.Split(b, []byte("\n")) {
		line = bytes.TrimSpace(line)
		if len(line) > 0 && line[0] != '#' {
			return false
		}
	}
	return true
}

// Collector gathers one render's services inside a template:
//
//	{{ $h := hieraData }}
//	{{ range services $h.DatacenterQuery }}{{ if $h.Wants .Name }}
//	  {{ $h.Add .Name (service (print .Name $h.DatacenterQuery) "any") }}
//	{{ end }}{{ end }}
//	{{ $h.YAML }}
type Collector struct {
	f       *Funcs
	entries []entry
	seq     int
}

type entry struct {
	name     string
	services []*dep.HealthService
}

// Wants reports whether the render needs a service's instances: it is
// selected for output or is a dependency, and its name can form a hiera key.
// A name that cannot is skipped with one warning naming it.
func (c *Collector) Wants(name string) bool {
	if !c.f.sel.selected(name) && !c.f.sel.dependency(name) {
		return false
	}
	if err := ValidServiceName(name); err != nil {
		c.f.warnOnce("service\x00"+name, "skipping service: its name cannot form a hiera key", "service", name, "problem", err.Error())
		return false
	}
	return true
}

// Add records a service's instances, as returned by consul-template's
// `service "NAME" "any"`, and returns "" so it prints nothing.
func (c *Collector) Add(name string, services []*dep.HealthService) (string, error) {
	if err := ValidServiceName(name); err != nil {
		return "", fmt.Errorf("hieraData.Add: %w", err)
	}
	c.entries = append(c.entries, entry{name: name, services: services})
	return "", nil
}

// instances converts consul-template's instances of a service, skipping
// tagged addresses whose key cannot form a hiera key, with one warning each.
func (f *Funcs) instances(e entry) []Instance {
	insts := make([]Instance, 0, len(e.services))
	for _, s := range e.services {
		if s == nil || isStandby(s.Checks) {
			continue
		}
		i := Instance{Node: s.Node, Address: s.Address, Port: s.Port, Status: s.Status}
		for k, ta := range s.ServiceTaggedAddresses {
			if err := ValidTaggedAddressKey(k); err != nil {
				f.warnOnce("tagged\x00"+e.name+"\x00"+k, "skipping tagged address: its key cannot form a hiera key", "service", e.name, "key", k, "problem", err.Error())
				continue
			}
			if i.TaggedAddresses == nil {
				i.TaggedAddresses = map[string]string{}
			}
			i.TaggedAddresses[k] = ta.Address
		}
		insts = append(insts, i)
	}
	return insts
}

// isStandby reports whether a node's checks say it is a warm pool standby
// of the reaper: its node maintenance check's notes say so. A standby is no
// member of its service: it is in no key and no dependency count.
func isStandby(checks api.HealthChecks) bool {
	for _, c := range checks {
		if c != nil && c.CheckID == reaperkv.NodeMaintenanceCheck && strings.HasPrefix(c.Notes, reaperkv.StandbyNotesPrefix) {
			return true
		}
	}
	return false
}

// all returns the collected entries and, for every expected service the
// catalog does not hold, an entry without instances: its keys are output
// as empty lists.
func (c *Collector) all() []entry {
	have := make(map[string]bool, len(c.entries))
	for _, e := range c.entries {
		have[e.name] = true
	}
	out := c.entries
	for _, name := range c.f.sel.expected() {
		if !have[name] && ValidServiceName(name) == nil {
			out = append(out[:len(out):len(out)], entry{name: name})
		}
	}
	return out
}

// data converts the collected instances into Data, the reference model
// that encode must match byte for byte.
func (c *Collector) data() *Data {
	d := NewData(c.f.sel.Dependencies)
	for _, e := range c.all() {
		if c.f.sel.selected(e.name) {
			d.AddService(e.name, c.f.instances(e))
		} else {
			d.CountService(e.name, c.f.instances(e))
		}
	}
	return d
}

// encode writes what c.data().YAML() would, reusing the encoded lines of
// every service whose instances did not change since the last render: a
// change to one service of a thousand re-encodes one.
func (f *Funcs) encode(c *Collector) ([]byte, error) {
	entries := append([]entry(nil), c.all()...)
	// Sorting by name+"::" orders the services as their keys sort, so
	// each service's keys stay together in the sorted output.
	sort.Slice(entries, func(i, j int) bool { return entries[i].name+"::" < entries[j].name+"::" })
	f.encodeMu.Lock()
	defer f.encodeMu.Unlock()
	old := f.fragments
	f.fragments = make(map[string]*fragment, len(entries))
	deps := NewData(f.sel.Dependencies)
	var healthy, services []byte
	for i, e := range entries {
		if i > 0 && entries[i-1].name == e.name {
			return nil, fmt.Errorf("render: service %q collected twice", e.name)
		}
		if f.sel.dependency(e.name) {
			deps.CountService(e.name, f.instances(e))
		}
		if !f.sel.selected(e.name) {
			continue
		}
		var first *dep.HealthService
		if len(e.services) > 0 {
			first = e.services[0]
		}
		fr := old[e.name]
		if fr == nil || fr.first != first || fr.n != len(e.services) || first == nil {
			keys := map[string]any{}
			serviceKeys(keys, e.name, f.instances(e))
			h, s := map[string]any{}, map[string]any{}
			for k, v := range keys {
				if strings.HasPrefix(k, "healthy_services::") {
					h[k] = v
				} else {
					s[k] = v
				}
			}
			fr = &fragment{first: first, n: len(e.services)}
			var err error
			if fr.healthy, err = EncodeKeys(h); err != nil {
				return nil, err
			}
			if fr.services, err = EncodeKeys(s); err != nil {
				return nil, err
			}
		}
		f.fragments[e.name] = fr
		healthy = append(healthy, fr.healthy...)
		services = append(services, fr.services...)
	}
	depKeys := map[string]any{}
	deps.dependencyKeys(depKeys)
	orch, err := EncodeKeys(depKeys)
	if err != nil {
		return nil, err
	}
	out := make([]byte, 0, len(healthy)+len(orch)+len(services))
	out = append(out, healthy...)
	out = append(out, orch...)
	return append(out, services...), nil
}

// YAML stands for the collected data as YAML (see Data.YAML) in the
// template's output; the renderer encodes it once the render is complete.
func (c *Collector) YAML() string {
	c.f.mu.Lock()
	c.f.seq++
	c.seq = c.f.seq
	c.f.latest = c
	c.f.mu.Unlock()
	return c.f.marker + strconv.Itoa(c.seq) + "\n"
}

// Datacenter returns the datacenter the data comes from, reduced to
// characters that cannot end the header comment's line.
func (c *Collector) Datacenter() string {
	dc := strings.Map(func(r rune) rune {
		if r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '-' || r == '_' || r == '.' {
			return r
		}
		return '?'
	}, c.f.sel.Datacenter)
	if dc == "" {
		return "(the local agent's)"
	}
	return dc
}

// DatacenterQuery returns "@DC" when queries name a datacenter, else "".
func (c *Collector) DatacenterQuery() string {
	if c.f.sel.QueryDatacenter && c.f.sel.Datacenter != "" {
		return "@" + c.f.sel.Datacenter
	}
	return ""
}

// YAMLQuote returns s as a double-quoted YAML scalar that Hiera reads back
// as exactly s, whatever s holds: YAML's special characters are escaped,
// and so is Hiera's interpolation (each '%' becomes %{literal('%')}), so a
// custom template that writes catalog strings through yamlQuote cannot be
// made to copy another hiera key into its data. Hiera does not interpolate
// top-level keys, so a key built from a name holding '%' would not be found
// as written; the names the template functions accept hold none.
func YAMLQuote(s string) string {
	return string(appendValue(nil, s))
}
