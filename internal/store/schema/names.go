package schema

import (
	"fmt"
	"strings"
	"unicode"
	"unicode/utf8"
)

// maxNameLen bounds hosts, versions, categories and roles. Consul keys may be
// up to 512 bytes with a long prefix in front; 200 leaves room for both.
const MaxNameLen = 200

// ValidName checks a host, version, category or role name that becomes one
// segment of a KV key. kind names it in the error ("host", "version", ...).
func ValidName(kind, v string) error {
	switch {
	case v == "":
		return fmt.Errorf("%s is empty", kind)
	case v == "." || v == "..":
		return fmt.Errorf("%s %q is not a name", kind, v)
	case len(v) > MaxNameLen:
		return fmt.Errorf("%s %.20q... is %d bytes, longer than %d", kind, v, len(v), MaxNameLen)
	case strings.Contains(v, "/"):
		return fmt.Errorf("%s %q contains a slash", kind, v)
	case !utf8.ValidString(v):
		return fmt.Errorf("%s %q is not valid UTF-8", kind, v)
	}
	for _, r := range v {
		if unicode.IsSpace(r) || unicode.IsControl(r) {
			return fmt.Errorf("%s %q contains white space or a control character", kind, v)
		}
	}
	return nil
}

// ValidPrefix checks a KV prefix: one or more valid names joined by slashes.
func ValidPrefix(p string) error {
	if p == "" {
		return fmt.Errorf("prefix is empty")
	}
	for _, seg := range strings.Split(p, "/") {
		if err := ValidName("prefix segment", seg); err != nil {
			return fmt.Errorf("prefix %q: %w", p, err)
		}
	}
	return nil
}
