package hiera

import (
	"fmt"
	"sort"
	"strconv"
	"strings"
	"unicode/utf8"

	"github.com/hashicorp/consul/api"

	"github.com/jiocloud/orchestrate/internal/hieradata"
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
	return i.Status == api.HealthPassing || i.Status == api.HealthWarning
}

// Functional reports whether every check of the instance passes.
func (i Instance) Functional() bool { return i.Status == api.HealthPassing }

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
		serviceKeys(keys, name, insts)
	}
	d.dependencyKeys(keys)
	return keys
}

// serviceKeys adds the services:: and healthy_services:: keys of a service.
func serviceKeys(keys map[string]any, name string, insts []Instance) {
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

// dependencyKeys adds the orchestrate:: keys.
func (d *Data) dependencyKeys(keys map[string]any) {
	unmet := []string{}
	for _, s := range d.DependencyStates() {
		p := hieradata.DependencyKeyPrefix + s.Service + "::"
		keys[p+"addressable_required"] = s.Addressable
		keys[p+"addressable"] = s.HaveAddressable
		keys[p+"functional_required"] = s.Functional
		keys[p+"functional"] = s.HaveFunctional
		if !s.Met() {
			unmet = append(unmet, s.Service)
		}
	}
	keys[hieradata.KeyDependenciesMet] = len(unmet) == 0
	keys[hieradata.KeyUnmetDependencies] = unmet
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
// deduplicated in flow style, every '%' in a string value escaped for Hiera
// (see appendValue). The same data always encodes to the same bytes.
func (d *Data) YAML() ([]byte, error) {
	return EncodeKeys(d.Keys())
}

// EncodeKeys encodes a key map as YAML the way Data.YAML does. Values may be
// string, int, bool, []string or []int.
//
// It writes the YAML itself rather than through a generic encoder: the
// output is one flat mapping of double-quoted keys to scalars or flow lists,
// and every string goes through appendQuoted, which escapes all that YAML
// 1.1 and 1.2 do not allow raw inside double quotes. That keeps a render of
// a large catalog fast and small; TestEncodeRoundTrip and the hostile-names
// tests parse the result back with yaml.v3 and Puppet.
func EncodeKeys(keys map[string]any) ([]byte, error) {
	names := make([]string, 0, len(keys))
	for k := range keys {
		names = append(names, k)
	}
	sort.Strings(names)
	if len(names) == 0 {
		return []byte("{}\n"), nil
	}
	buf := make([]byte, 0, 64*len(names))
	for _, k := range names {
		start := len(buf)
		buf = appendQuoted(buf, k)
		if len(buf)-start > maxImplicitKey {
			// YAML allows an implicit key of at most 1024 characters; a
			// longer one needs the explicit "? key" form.
			buf = append(buf[:start], '?', ' ')
			buf = appendQuoted(buf, k)
			buf = append(buf, '\n')
		}
		buf = append(buf, ':', ' ')
		switch v := keys[k].(type) {
		case string:
			buf = appendValue(buf, v)
		case int:
			buf = strconv.AppendInt(buf, int64(v), 10)
		case bool:
			buf = strconv.AppendBool(buf, v)
		case []string:
			buf = append(buf, '[')
			for i, s := range v {
				if i > 0 {
					buf = append(buf, ',', ' ')
				}
				buf = appendValue(buf, s)
			}
			buf = append(buf, ']')
		case []int:
			buf = append(buf, '[')
			for i, n := range v {
				if i > 0 {
					buf = append(buf, ',', ' ')
				}
				buf = strconv.AppendInt(buf, int64(n), 10)
			}
			buf = append(buf, ']')
		default:
			return nil, fmt.Errorf("key %q: cannot encode %T", k, v)
		}
		buf = append(buf, '\n')
	}
	return buf, nil
}

const hexDigits = "0123456789ABCDEF"

// maxImplicitKey leaves a margin below YAML's 1024-character limit on
// implicit keys (the limit counts characters; quoted keys here are mostly
// ASCII, and a longer one only costs the explicit form).
const maxImplicitKey = 1000

// hieraLiteralPercent is how Hiera 5 writes a literal '%' in data: the
// literal function's result is not interpolated again.
const hieraLiteralPercent = "%{literal('%')}"

// appendValue appends a string value: s as a YAML double-quoted scalar that
// Hiera reads back as exactly s. Hiera interpolates "%{...}" in every string
// it looks up (lookup, alias, scope, facts), so each '%' is written as
// %{literal('%')}: a catalog string can never make Puppet read another
// hiera key. Keys need no escape: Hiera looks up top-level keys as written,
// and every key the renderer writes is built from names ValidServiceName
// and ValidTaggedAddressKey accept, which hold no '%'.
func appendValue(buf []byte, s string) []byte {
	if strings.IndexByte(s, '%') < 0 {
		return appendQuoted(buf, s)
	}
	return appendQuoted(buf, strings.ReplaceAll(s, "%", hieraLiteralPercent))
}

// appendQuoted appends s as a YAML double-quoted scalar. Printable
// characters other than '"' and '\\' go in as they are; everything else
// (control characters, line breaks, tabs, DEL, C1 controls, the BOM, the
// Unicode line and paragraph separators, U+FFFE/U+FFFF, invalid UTF-8) is
// escaped, so the scalar is one line that every YAML parser reads back as
// exactly s (invalid UTF-8 as U+FFFD, as Consul's JSON already does).
func appendQuoted(buf []byte, s string) []byte {
	buf = append(buf, '"')
	for i := 0; i < len(s); {
		c := s[i]
		if c >= 0x20 && c < 0x7f {
			if c == '"' || c == '\\' {
				buf = append(buf, '\\')
			}
			buf = append(buf, c)
			i++
			continue
		}
		r, size := utf8.DecodeRuneInString(s[i:])
		i += size
		switch {
		case r == '\n':
			buf = append(buf, '\\', 'n')
		case r == '\t':
			buf = append(buf, '\\', 't')
		case r == '\r':
			buf = append(buf, '\\', 'r')
		case r < 0x20 || r == 0x7f || (r >= 0x80 && r < 0xa0):
			buf = append(buf, '\\', 'x', hexDigits[r>>4], hexDigits[r&0xf])
		case r == utf8.RuneError && size == 1:
			buf = append(buf, '\\', 'u', 'F', 'F', 'F', 'D')
		case r == 0x2028 || r == 0x2029 || r == 0xfeff || r == 0xfffe || r == 0xffff || (r >= 0xd800 && r < 0xe000):
			buf = append(buf, '\\', 'u', hexDigits[r>>12&0xf], hexDigits[r>>8&0xf], hexDigits[r>>4&0xf], hexDigits[r&0xf])
		default:
			buf = utf8.AppendRune(buf, r)
		}
	}
	return append(buf, '"')
}
