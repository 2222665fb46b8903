package hiera

import (
	"fmt"
	"sort"
	"strconv"

	dep "github.com/hashicorp/consul-template/dependency"
	"gopkg.in/yaml.v3"
)

// Instance is one registered instance of a service, as the renderer needs it.
type Instance struct {
	// Node is the name of the node the instance runs on.
	Node string
	// Address is the service address, or the node's when the service has none.
	Address string
	// Port is the service port; 0 means none.
	Port int
	// TaggedAddresses maps a service tagged-address key (eth0, lan_ipv4...)
	// to its address.
	TaggedAddresses map[string]string
	// Status is the aggregate of the instance's checks: passing, warning,
	// critical or maintenance.
	Status string
}

// Addressable reports whether Consul DNS returns the instance: its checks
// are passing or warning, not critical and not in maintenance.
func (i Instance) Addressable() bool {
	return i.Status == dep.HealthPassing || i.Status == dep.HealthWarning
}

// Functional reports whether every check of the instance passes.
func (i Instance) Functional() bool { return i.Status == dep.HealthPassing }

// Data is the hiera data of one render: the selected services' instances
// and the node's dependencies. Keys and values become YAML through an
// encoder that quotes every string, never through text concatenation, so no
// name or address in the catalog can add or change a key.
type Data struct {
	services map[string][]Instance
	deps     Dependencies
	// counted holds the instances of dependency services not selected for
	// output, which still count towards the dependencies.
	counted map[string][]Instance
}

// NewData returns empty data for a node with these dependencies.
func NewData(deps Dependencies) *Data {
	return &Data{services: map[string][]Instance{}, counted: map[string][]Instance{}, deps: deps}
}

// AddService records the instances of a service whose keys go into the
// output. The caller has checked the name with ValidServiceName.
func (d *Data) AddService(name string, instances []Instance) {
	d.services[name] = append(d.services[name], instances...)
}

// CountService records the instances of a service that is not output but is
// a dependency.
func (d *Data) CountService(name string, instances []Instance) {
	d.counted[name] = append(d.counted[name], instances...)
}

// DependencyState is the state of one declared dependency.
type DependencyState struct {
	Requirement
	// HaveAddressable and HaveFunctional are the current counts.
	HaveAddressable, HaveFunctional int
}

// Met reports whether both counts reach what is required.
func (s DependencyState) Met() bool {
	return s.HaveAddressable >= s.Addressable && s.HaveFunctional >= s.Functional
}

// DependencyStates returns the state of every declared dependency, sorted by
// service.
func (d *Data) DependencyStates() []DependencyState {
	out := make([]DependencyState, 0, len(d.deps))
	for _, r := range d.deps {
		s := DependencyState{Requirement: r}
		insts, ok := d.services[r.Service]
		if !ok {
			insts = d.counted[r.Service]
		}
		for _, i := range insts {
			if i.Addressable() {
				s.HaveAddressable++
			}
			if i.Functional() {
				s.HaveFunctional++
			}
		}
		out = append(out, s)
	}
	return out
}

// Keys returns the hiera data as a map from key to value: []string, []int,
// int or bool. It is what YAML encodes; tests compare against it.
func (d *Data) Keys() map[string]any {
	keys := map[string]any{}
	for name, insts := range d.services {
		// Both groups carry the same tagged-address keys, so Puppet can look
		// up healthy_services::<svc>::eth0 even when nothing passes yet.
		tagKeys := map[string]bool{}
		var healthy []Instance
		for _, i := range insts {
			for k := range i.TaggedAddresses {
				tagKeys[k] = true
			}
			if i.Functional() {
				healthy = append(healthy, i)
			}
		}
		addService(keys, "services::"+name+"::", insts, tagKeys)
		addService(keys, "healthy_services::"+name+"::", healthy, tagKeys)
	}
	unmet := []string{}
	for _, s := range d.DependencyStates() {
		p := "orchestrate::dependencies::" + s.Service + "::"
		keys[p+"addressable_required"] = s.Addressable
		keys[p+"addressable"] = s.HaveAddressable
		keys[p+"functional_required"] = s.Functional
		keys[p+"functional"] = s.HaveFunctional
		if !s.Met() {
			unmet = append(unmet, s.Service)
		}
	}
	keys["orchestrate::dependencies_met"] = len(unmet) == 0
	keys["orchestrate::unmet_dependencies"] = unmet
	return keys
}

func addService(keys map[string]any, prefix string, insts []Instance, tagKeys map[string]bool) {
	var addrs, nodes []string
	var ports []int
	tagged := make(map[string][]string, len(tagKeys))
	for _, i := range insts {
		if i.Address != "" {
			addrs = append(addrs, i.Address)
		}
		nodes = append(nodes, i.Node)
		if i.Port != 0 {
			ports = append(ports, i.Port)
		}
		for k, a := range i.TaggedAddresses {
			if a != "" {
				tagged[k] = append(tagged[k], a)
			}
		}
	}
	keys[prefix+"address"] = uniqueStrings(addrs)
	keys[prefix+"nodes"] = uniqueStrings(nodes)
	keys[prefix+"port"] = uniqueInts(ports)
	for k := range tagKeys {
		keys[prefix+k] = uniqueStrings(tagged[k])
	}
}

func uniqueStrings(in []string) []string {
	out := make([]string, 0, len(in))
	seen := make(map[string]bool, len(in))
	for _, s := range in {
		if !seen[s] {
			seen[s] = true
			out = append(out, s)
		}
	}
	sort.Strings(out)
	return out
}

func uniqueInts(in []int) []int {
	out := make([]int, 0, len(in))
	seen := make(map[int]bool, len(in))
	for _, n := range in {
		if !seen[n] {
			seen[n] = true
			out = append(out, n)
		}
	}
	sort.Ints(out)
	return out
}

// YAML encodes the data: one top-level key per line in byte order, every key
// and string double-quoted (so YAML 1.1 readers such as Puppet's never take
// an address for a boolean, a number or a date), lists sorted and
// deduplicated in flow style. The same data always encodes to the same bytes.
func (d *Data) YAML() ([]byte, error) {
	return EncodeKeys(d.Keys())
}

// EncodeKeys encodes a key map as YAML the way Data.YAML does. Values may be
// string, int, bool, []string or []int.
func EncodeKeys(keys map[string]any) ([]byte, error) {
	names := make([]string, 0, len(keys))
	for k := range keys {
		names = append(names, k)
	}
	sort.Strings(names)
	root := &yaml.Node{Kind: yaml.MappingNode, Content: make([]*yaml.Node, 0, 2*len(names))}
	for _, k := range names {
		v, err := valueNode(keys[k])
		if err != nil {
			return nil, fmt.Errorf("key %q: %w", k, err)
		}
		root.Content = append(root.Content, strNode(k), v)
	}
	if len(names) == 0 {
		return []byte("{}\n"), nil
	}
	out, err := yaml.Marshal(root)
	if err != nil {
		return nil, fmt.Errorf("encode yaml: %w", err)
	}
	return out, nil
}

func strNode(s string) *yaml.Node {
	return &yaml.Node{Kind: yaml.ScalarNode, Tag: "!!str", Value: s, Style: yaml.DoubleQuotedStyle}
}

func valueNode(v any) (*yaml.Node, error) {
	switch v := v.(type) {
	case string:
		return strNode(v), nil
	case int:
		return &yaml.Node{Kind: yaml.ScalarNode, Tag: "!!int", Value: strconv.Itoa(v)}, nil
	case bool:
		return &yaml.Node{Kind: yaml.ScalarNode, Tag: "!!bool", Value: strconv.FormatBool(v)}, nil
	case []string:
		seq := &yaml.Node{Kind: yaml.SequenceNode, Tag: "!!seq", Style: yaml.FlowStyle, Content: make([]*yaml.Node, 0, len(v))}
		for _, s := range v {
			seq.Content = append(seq.Content, strNode(s))
		}
		return seq, nil
	case []int:
		seq := &yaml.Node{Kind: yaml.SequenceNode, Tag: "!!seq", Style: yaml.FlowStyle, Content: make([]*yaml.Node, 0, len(v))}
		for _, n := range v {
			seq.Content = append(seq.Content, &yaml.Node{Kind: yaml.ScalarNode, Tag: "!!int", Value: strconv.Itoa(n)})
		}
		return seq, nil
	}
	return nil, fmt.Errorf("cannot encode %T", v)
}
