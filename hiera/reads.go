package hiera

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"hash"
	"regexp"
	"slices"
	"strings"

	"gopkg.in/yaml.v3"
)

// ReadSet is what a node's Puppet reads of the hiera data, as the node
// declares it (--reads, --reads-regex, its dependencies and
// --expect-service): --exec runs only when a key it reads changed.
type ReadSet struct {
	// Names are the services read.
	Names []string
	// Regex, when set, reads every service whose name matches it.
	Regex *regexp.Regexp
}

// NewReadSet returns the read set of a node: the services named, those
// matching re (may be nil), its dependencies and its expected services.
func NewReadSet(names []string, re *regexp.Regexp, deps Dependencies, expect []string) *ReadSet {
	all := slices.Clone(names)
	all = append(all, expect...)
	for _, r := range deps {
		all = append(all, r.Service)
	}
	slices.Sort(all)
	return &ReadSet{Names: slices.Compact(all), Regex: re}
}

// reads reports whether the node reads a service's keys.
func (r *ReadSet) reads(service string) bool {
	if _, ok := slices.BinarySearch(r.Names, service); ok {
		return true
	}
	return r.Regex != nil && r.Regex.MatchString(service)
}

// String is the declaration, as the digest includes it: a node that
// changes what it declares runs --exec once more.
func (r *ReadSet) String() string {
	re := ""
	if r.Regex != nil {
		re = r.Regex.String()
	}
	return fmt.Sprintf("reads %q regex %q", r.Names, re)
}

// relevant reports whether a change of key must run --exec: any key but
// the services:: and healthy_services:: keys of a service the node does
// not read. The orchestrate:: keys (the dependency state) and keys a
// custom template adds are always relevant: only what is known to be
// another service's is left out.
func (r *ReadSet) relevant(key string) bool {
	for _, p := range [...]string{"services::", "healthy_services::"} {
		rest, ok := strings.CutPrefix(key, p)
		if !ok {
			continue
		}
		svc, _, found := strings.Cut(rest, "::")
		if found && ValidServiceName(svc) == nil {
			return r.reads(svc)
		}
	}
	return true
}

// ExecDigest is the digest of what a node reads in rendered hiera data:
// with rs nil, of the whole data; otherwise of the declaration and the
// relevant keys with their values (comments and the other services' keys
// left out). Two renders with the same digest look the same to the node's
// Puppet.
//
// The built-in template's output (one `"key": value` per line, every
// value on its line) is read line by line; anything else a custom
// template writes is parsed as YAML. The error is for data that is not a
// YAML mapping, which the renderer never writes.
func ExecDigest(rs *ReadSet, data []byte) (string, error) {
	h := sha256.New()
	if rs == nil {
		h.Write([]byte("all\n"))
		h.Write(data)
		return "sha256:" + hex.EncodeToString(h.Sum(nil)), nil
	}
	fmt.Fprintf(h, "%s\n", rs)
	if !hashLines(h, rs, data) {
		h.Reset()
		fmt.Fprintf(h, "%s\nyaml\n", rs)
		if err := hashYAML(h, rs, data); err != nil {
			return "", err
		}
	}
	return "sha256:" + hex.EncodeToString(h.Sum(nil)), nil
}

// hashLines hashes the relevant lines of data when every line is blank, a
// comment or one `"key": value` entry in the form EncodeKeys writes: a
// key of letters, digits, '_', '-' and ':' and a value that is a quoted
// string, a whole number, a boolean or a flow list of strings and
// numbers, all on the line. It reports false, having hashed part of the
// data, for anything else.
func hashLines(h hash.Hash, rs *ReadSet, data []byte) bool {
	for len(data) > 0 {
		line := data
		if i := bytes.IndexByte(data, '\n'); i >= 0 {
			line, data = data[:i], data[i+1:]
		} else {
			data = nil
		}
		if len(line) == 0 || line[0] == '#' {
			continue
		}
		key, ok := entryLine(line)
		if !ok {
			return false
		}
		if rs.relevant(key) {
			h.Write(line)
			h.Write([]byte{'\n'})
		}
	}
	return true
}

// entryLine returns the key of `"key": value` when the line is in
// EncodeKeys' form.
func entryLine(line []byte) (key string, ok bool) {
	if len(line) < 5 || line[0] != '"' {
		return "", false
	}
	end := bytes.IndexByte(line[1:], '"') + 1
	if end <= 1 || !bytes.HasPrefix(line[end+1:], []byte(": ")) {
		return "", false
	}
	for _, c := range line[1:end] {
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '_' || c == '-' || c == ':') {
			return "", false
		}
	}
	return string(line[1:end]), scalarOrList(line[end+3:])
}

// scalarOrList reports whether v is exactly one value EncodeKeys writes:
// true, false, a whole number, a double-quoted string, or a flow list of
// strings and numbers.
func scalarOrList(v []byte) bool {
	if string(v) == "true" || string(v) == "false" {
		return true
	}
	if len(v) == 0 || v[0] != '[' {
		n := itemLen(v)
		return n > 0 && n == len(v)
	}
	rest := v[1:]
	if string(rest) == "]" {
		return true
	}
	for {
		n := itemLen(rest)
		if n <= 0 {
			return false
		}
		rest = rest[n:]
		switch {
		case string(rest) == "]":
			return true
		case bytes.HasPrefix(rest, []byte(", ")):
			rest = rest[2:]
		default:
			return false
		}
	}
}

// itemLen is the length of the whole number or double-quoted string at
// the start of b, or 0 when there is none. A quoted string may hold
// backslash escapes but no raw control character.
func itemLen(b []byte) int {
	if len(b) == 0 {
		return 0
	}
	if b[0] != '"' {
		i := 0
		if b[0] == '-' {
			i++
		}
		start := i
		for i < len(b) && b[i] >= '0' && b[i] <= '9' {
			i++
		}
		if i == start {
			return 0
		}
		return i
	}
	for i := 1; i < len(b); i++ {
		switch c := b[i]; {
		case c == '\\':
			i++
		case c == '"':
			return i + 1
		case c < 0x20 || c == 0x7f:
			return 0
		}
	}
	return 0
}

// hashYAML hashes the relevant entries of a YAML mapping, each value
// decoded (aliases resolved) and printed in Go syntax, which orders map
// keys: the same data always hashes the same.
func hashYAML(h hash.Hash, rs *ReadSet, data []byte) error {
	var doc yaml.Node
	if err := yaml.Unmarshal(data, &doc); err != nil {
		return fmt.Errorf("hiera data is not valid YAML: %w", err)
	}
	if len(doc.Content) == 0 || doc.Content[0].Kind != yaml.MappingNode {
		return fmt.Errorf("hiera data is not a YAML mapping")
	}
	m := doc.Content[0]
	for i := 0; i+1 < len(m.Content); i += 2 {
		var k, v any
		if err := m.Content[i].Decode(&k); err != nil {
			return fmt.Errorf("hiera data: %w", err)
		}
		if err := m.Content[i+1].Decode(&v); err != nil {
			return fmt.Errorf("hiera data: %w", err)
		}
		if key, ok := k.(string); ok && !rs.relevant(key) {
			continue
		}
		fmt.Fprintf(h, "%#v\x00%#v\n", k, v)
	}
	return nil
}
