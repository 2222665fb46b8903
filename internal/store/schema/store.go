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

// join is the key <prefix>/<parts joined by slashes>.
func Join(prefix string, parts ...string) string {
	return PrefixDir(prefix) + strings.Join(parts, "/")
}
