package yamlconf

import (
	"fmt"
	"maps"
	"reflect"
	"slices"
	"strings"

	"gopkg.in/yaml.v3"
)

// maxNodes bounds the nodes one walk visits: aliases let a small file
// name a huge tree (a "billion laughs"); a real configuration has a few
// thousand.
const maxNodes = 100_000

// walker checks a YAML tree against a Go type, before the decoder sees it.
type walker struct {
	file  string
	nodes int
}

var unmarshalerType = reflect.TypeFor[yaml.Unmarshaler]()

func (w *walker) fail(n *yaml.Node, path, format string, args ...any) error {
	return inputError(&Error{File: w.file, Line: n.Line, Path: path, Msg: fmt.Sprintf(format, args...)})
}

// check walks n against t, at path.
func (w *walker) check(n *yaml.Node, t reflect.Type, path string) error {
	if w.nodes++; w.nodes > maxNodes {
		return w.fail(n, path, "more than %d values (aliases that repeat themselves?)", maxNodes)
	}
	n = resolve(n)
	if isNull(n) {
		return nil
	}
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	custom := reflect.PointerTo(t).Implements(unmarshalerType)
	switch {
	case t.Kind() == reflect.Struct:
		if err := w.checkStruct(n, t, path); err != nil || !custom {
			return err
		}
		return w.tryDecode(n, t, path)
	case custom:
		return w.tryDecode(n, t, path)
	case t.Kind() == reflect.Slice:
		return w.checkSlice(n, t, path)
	case t.Kind() == reflect.Map:
		return w.checkMap(n, t, path)
	case t.Kind() == reflect.Interface:
		return nil
	}
	if n.Kind != yaml.ScalarNode {
		return w.fail(n, path, "%s: want %s, got %s", path, Noun(t), describe(n))
	}
	return w.tryDecode(n, t, path)
}

// tryDecode decodes n into a new value of t: a value the decoder (or the
// type's own UnmarshalYAML) refuses is named at its line.
func (w *walker) tryDecode(n *yaml.Node, t reflect.Type, path string) error {
	err := n.Decode(reflect.New(t).Interface())
	if err == nil {
		return nil
	}
	if reflect.PointerTo(t).Implements(unmarshalerType) {
		msg := err.Error()
		if m := yamlLine.FindStringSubmatch(msg); m != nil {
			msg = msg[len(m[0]):]
		}
		if _, isType := err.(*yaml.TypeError); isType {
			msg = "want " + Noun(t) + ", got " + describe(n)
		}
		return w.fail(n, path, "%s: %s", path, msg)
	}
	return w.fail(n, path, "%s: want %s, got %s", path, Noun(t), describe(n))
}

func (w *walker) checkSlice(n *yaml.Node, t reflect.Type, path string) error {
	if n.Kind != yaml.SequenceNode {
		return w.fail(n, path, "%s: want %s, got %s", path, listNoun(path), describe(n))
	}
	for i, item := range n.Content {
		if err := w.check(item, t.Elem(), fmt.Sprintf("%s[%d]", path, i)); err != nil {
			return err
		}
	}
	return nil
}

func (w *walker) checkMap(n *yaml.Node, t reflect.Type, path string) error {
	if n.Kind != yaml.MappingNode {
		return w.fail(n, path, "%s: want a mapping (key: value), got %s", path, describe(n))
	}
	seen := map[string]int{}
	for i := 0; i+1 < len(n.Content); i += 2 {
		k, v := resolve(n.Content[i]), n.Content[i+1]
		if k.Kind != yaml.ScalarNode {
			return w.fail(k, path, "%s: a key is %s; keys are plain names", path, describe(k))
		}
		if err := w.unique(seen, k, path); err != nil {
			return err
		}
		if err := w.check(v, t.Elem(), join(path, k.Value)); err != nil {
			return err
		}
	}
	return nil
}

// unique refuses a key given twice at one level.
func (w *walker) unique(seen map[string]int, k *yaml.Node, path string) error {
	if first, dup := seen[k.Value]; dup {
		return w.fail(k, join(path, k.Value), "%s: given twice (first on line %d)", join(path, k.Value), first)
	}
	seen[k.Value] = k.Line
	return nil
}

// fields are a struct's keys: each yaml tag's field type, and the inline
// map that takes the keys no field names, if any.
type fields struct {
	byKey     map[string]reflect.Type
	inlineMap reflect.Type
}

// Keys are the keys a YAML mapping decoded into v (a struct, or a
// pointer to one) may hold, sorted: its fields' yaml tags, inline ones
// included.
func Keys(v any) []string {
	t := reflect.TypeOf(v)
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	if t.Kind() != reflect.Struct {
		return []string{}
	}
	return slices.Sorted(maps.Keys(structFields(t).byKey))
}

func structFields(t reflect.Type) fields {
	f := fields{byKey: map[string]reflect.Type{}}
	for i := range t.NumField() {
		sf := t.Field(i)
		tag := sf.Tag.Get("yaml")
		name, opts, _ := strings.Cut(tag, ",")
		switch {
		case !sf.IsExported() || name == "-":
			continue
		case strings.Contains(","+opts+",", ",inline,"):
			if sf.Type.Kind() == reflect.Map {
				f.inlineMap = sf.Type
				continue
			}
			inner := structFields(sf.Type)
			for k, v := range inner.byKey {
				f.byKey[k] = v
			}
			continue
		case name == "":
			name = strings.ToLower(sf.Name)
		}
		f.byKey[name] = sf.Type
	}
	return f
}

// holder names the field one level down whose mapping takes key, if any
// does: a key written at the wrong level (user_data_file under a role,
// not its boot).
func (f fields) holder(key string) string {
	for _, name := range slices.Sorted(maps.Keys(f.byKey)) {
		t := f.byKey[name]
		for t.Kind() == reflect.Pointer {
			t = t.Elem()
		}
		if t.Kind() != reflect.Struct {
			continue
		}
		if _, ok := structFields(t).byKey[key]; ok {
			return name
		}
	}
	return ""
}

func (w *walker) checkStruct(n *yaml.Node, t reflect.Type, path string) error {
	if n.Kind != yaml.MappingNode {
		what := "a mapping of settings (key: value)"
		if path == "" {
			return w.fail(n, path, "want %s at the top, got %s", what, describe(n))
		}
		return w.fail(n, path, "%s: want %s, got %s", path, what, describe(n))
	}
	f := structFields(t)
	seen := map[string]int{}
	for i := 0; i+1 < len(n.Content); i += 2 {
		k, v := resolve(n.Content[i]), n.Content[i+1]
		if k.Kind == yaml.ScalarNode && k.Value == "<<" && k.ShortTag() == "!!merge" {
			if err := w.checkMerge(v, t, path); err != nil {
				return err
			}
			continue
		}
		if k.Kind != yaml.ScalarNode {
			return w.fail(k, path, "%s: a key is %s; keys are plain names", orTop(path), describe(k))
		}
		if err := w.unique(seen, k, path); err != nil {
			return err
		}
		ft, known := f.byKey[k.Value]
		switch {
		case known:
		case f.inlineMap != nil:
			ft = f.inlineMap.Elem()
		default:
			return w.unknown(k, path, f)
		}
		if err := w.check(v, ft, join(path, k.Value)); err != nil {
			return err
		}
	}
	return nil
}

// checkMerge checks what a merge key (<<: *anchor) brings in.
func (w *walker) checkMerge(v *yaml.Node, t reflect.Type, path string) error {
	v = resolve(v)
	if v.Kind == yaml.SequenceNode {
		for _, m := range v.Content {
			if err := w.checkStruct(resolve(m), t, path); err != nil {
				return err
			}
		}
		return nil
	}
	return w.checkStruct(v, t, path)
}

func (w *walker) unknown(k *yaml.Node, path string, f fields) error {
	keys := slices.Collect(maps.Keys(f.byKey))
	where := " at the top level"
	if path != "" {
		where = " in " + path
	}
	msg := fmt.Sprintf("unknown field %s%s", quote(k.Value), where)
	if s := Suggest(k.Value, keys); s != "" {
		msg += fmt.Sprintf(": did you mean %q?", s)
	} else if parent := f.holder(k.Value); parent != "" {
		msg += fmt.Sprintf(": it belongs under %s", parent)
	}
	return inputError(&Error{File: w.file, Line: k.Line, Path: join(path, k.Value), Msg: msg})
}

func join(path, key string) string {
	if path == "" {
		return key
	}
	return path + "." + key
}

func orTop(path string) string {
	if path == "" {
		return "the top level"
	}
	return path
}

// Noun says what a field of type t takes, in the words of a YAML file
// ("a whole number", "a list", "a mapping (key: value)").
func Noun(t reflect.Type) string {
	switch t.Kind() {
	case reflect.Bool:
		return "true or false"
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64:
		return "a whole number"
	case reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
		return "a whole number, 0 or more"
	case reflect.Float32, reflect.Float64:
		return "a number"
	case reflect.String:
		return "a string"
	case reflect.Slice, reflect.Array:
		return "a list"
	case reflect.Map, reflect.Struct:
		return "a mapping (key: value)"
	}
	return "another kind of value"
}

// listNoun says what a list field takes: "a list of roles" for roles.
func listNoun(path string) string {
	segs := pathSegments(path)
	last := segs[len(segs)-1]
	if strings.HasSuffix(last, "s") && !strings.HasPrefix(last, "[") {
		return "a list of " + strings.ReplaceAll(last, "_", " ")
	}
	return "a list"
}

// Suggest returns the option nearest to word by edit distance, when near
// enough to be the word meant (at most 2 edits, or a third of its
// length); "" when none is. Ties go to the first in sorted order.
func Suggest(word string, options []string) string {
	best, bestD := "", -1
	for _, o := range slices.Sorted(slices.Values(options)) {
		if d := Distance(strings.ToLower(word), o); bestD < 0 || d < bestD {
			best, bestD = o, d
		}
	}
	if bestD < 0 || bestD > max(2, len([]rune(word))/3) || bestD >= len([]rune(word)) {
		return ""
	}
	return best
}

// Distance is the Levenshtein distance between a and b: the fewest
// single-character insertions, deletions and substitutions from one to
// the other.
func Distance(a, b string) int {
	ra, rb := []rune(a), []rune(b)
	prev := make([]int, len(rb)+1)
	cur := make([]int, len(rb)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(ra); i++ {
		cur[0] = i
		for j := 1; j <= len(rb); j++ {
			cost := 1
			if ra[i-1] == rb[j-1] {
				cost = 0
			}
			cur[j] = min(prev[j]+1, cur[j-1]+1, prev[j-1]+cost)
		}
		prev, cur = cur, prev
	}
	return prev[len(rb)]
}
