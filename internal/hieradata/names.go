package hieradata

import (
	"fmt"
)

// MaxNameLen bounds a service name or tagged-address key used as one segment
// of a hiera key. Consul accepts far longer names; 255 keeps every key well
// inside what Puppet, YAML parsers and people handle, and no real service
// name comes near it.
const MaxNameLen = 255

// A segment of a hiera key, as validSegment checks it, is letters, digits,
// '_' and '-': the intersection
// of what hiera treats as a plain key segment (no ".", which hiera reads as
// "dig into a hash", no "::", its namespace separator, no quoting) and what
// consul-template's service query syntax accepts as a service name
// ([[:word:]-]): a name outside it could not even be queried, and a name with
// a "." would be read by consul-template as "tag.name", a different query.
// validSegment checks byte by byte rather than with a regexp: it runs for
// every service on every pass over the template.

// reservedKeys are the per-service keys the renderer writes itself; a
// tagged address with one of these names would overwrite them.
var reservedKeys = map[string]bool{"address": true, "port": true, "nodes": true}

// ValidServiceName reports whether a Consul service name can form hiera keys
// (services::<name>::...), and why not.
func ValidServiceName(name string) error {
	return validSegment("service name", name)
}

// ValidTaggedAddressKey reports whether a service tagged-address key can form
// a hiera key (services::<svc>::<key>), and why not.
func ValidTaggedAddressKey(key string) error {
	if err := validSegment("tagged address key", key); err != nil {
		return err
	}
	if reservedKeys[key] {
		return fmt.Errorf("tagged address key %q would overwrite services::<service>::%s", key, key)
	}
	return nil
}

func validSegment(kind, s string) error {
	switch {
	case s == "":
		return fmt.Errorf("%s is empty", kind)
	case len(s) > MaxNameLen:
		return fmt.Errorf("%s %.40q... is %d bytes, longer than %d", kind, s, len(s), MaxNameLen)
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '_' || c == '-') {
			return fmt.Errorf("%s %q has characters other than letters, digits, '_' and '-'", kind, s)
		}
	}
	return nil
}
