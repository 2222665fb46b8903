package schema

import (
	"strings"
)

// DefaultPrefix is the KV prefix when neither --prefix nor
// ORCHESTRATE_PREFIX says otherwise.
const DefaultPrefix = "orchestrate"

// PrefixDir is <prefix>/, the directory every key lives in (leading and
// trailing slashes of prefix are dropped).
func PrefixDir(prefix string) string { return strings.Trim(prefix, "/") + "/" }

// Join is the key <prefix>/<parts joined by slashes>.
func Join(prefix string, parts ...string) string {
	return PrefixDir(prefix) + strings.Join(parts, "/")
}

// RelKey is key relative to the prefix: the key's path under it.
func RelKey(prefix, key string) string { return strings.TrimPrefix(key, PrefixDir(prefix)) }
