package reaper

import (
	"strings"
)

// namedLike reports whether name is what the role's name template makes,
// or matches its name_regex.
func (r *Role) NamedLike(name string) bool {
	if _, ok := r.TemplateIndex(name); ok {
		return true
	}
	return r.nameRE != nil && r.nameRE.MatchString(name)
}

// templateIndex returns n when name is what the role's name template makes
// of some index n (digits only).
func (r *Role) TemplateIndex(name string) (string, bool) {
	mid, ok := strings.CutPrefix(name, r.namePrefix)
	if !ok {
		return "", false
	}
	if mid, ok = strings.CutSuffix(mid, r.nameSuffix); !ok || mid == "" || strings.Trim(mid, "0123456789") != "" {
		return "", false
	}
	return mid, true
}
