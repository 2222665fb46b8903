package yamlconf

import (
	"bytes"
	"errors"
	"io"
	"reflect"
	"regexp"
	"strconv"
	"strings"

	"gopkg.in/yaml.v3"

	"github.com/jiocloud/orchestrate/internal/fault"
)

// Decode reads data (the contents of file, "" when it came from
// elsewhere) as one YAML document into v, a pointer to a struct: every
// key must be one of the struct's yaml tags at its level, every value of
// the kind its field takes. An empty document leaves v as it is. Errors
// are input errors of type *Error. The Doc it returns places later
// validation errors (Annotate).
func Decode(file string, data []byte, v any) (*Doc, error) {
	doc := &Doc{file: file}
	dec := yaml.NewDecoder(bytes.NewReader(data))
	var top yaml.Node
	if err := dec.Decode(&top); err != nil {
		if errors.Is(err, io.EOF) {
			return doc, nil // empty: nothing set
		}
		return nil, syntaxError(file, data, err)
	}
	var next yaml.Node
	switch err := dec.Decode(&next); {
	case err == nil:
		return nil, inputError(&Error{File: file, Line: next.Line, Msg: "a second YAML document (after ---): the file holds one"})
	case !errors.Is(err, io.EOF):
		return nil, syntaxError(file, data, err)
	}
	root := &top
	if root.Kind == yaml.DocumentNode && len(root.Content) > 0 {
		root = root.Content[0]
	}
	doc.root = root
	if isNull(root) {
		return doc, nil
	}
	w := &walker{file: file}
	if err := w.check(root, reflect.TypeOf(v).Elem(), ""); err != nil {
		return nil, err
	}
	if err := root.Decode(v); err != nil {
		return nil, decodeError(file, err)
	}
	return doc, nil
}

func inputError(e *Error) error { return fault.Input(e) }

// yamlLine finds the line yaml.v3 puts in its messages.
var yamlLine = regexp.MustCompile(`^(?:yaml: )?line (\d+): `)

// syntaxError says where the text stops being YAML; a tab among a line's
// indentation (the usual cause) is named.
func syntaxError(file string, data []byte, err error) error {
	msg := err.Error()
	line := 0
	if m := yamlLine.FindStringSubmatch(msg); m != nil {
		line, _ = strconv.Atoi(m[1])
		msg = msg[len(m[0]):]
	}
	msg = strings.TrimPrefix(msg, "yaml: ")
	if tab := tabIndented(data, line); tab > 0 {
		return inputError(&Error{File: file, Line: tab, Msg: "a tab indents this line: YAML indents with spaces only"})
	}
	return inputError(&Error{File: file, Line: line, Msg: "not valid YAML: " + msg})
}

// tabIndented finds a tab among the indentation of line n (1-based) or
// of a line next to it (the parser may stop a line early or late) and
// returns that line; 0 when there is none.
func tabIndented(data []byte, n int) int {
	if n <= 0 {
		return 0
	}
	lines := bytes.Split(data, []byte("\n"))
	for _, i := range []int{n - 1, n, n - 2} {
		if i >= 0 && i < len(lines) {
			rest := bytes.TrimLeft(lines[i], " ")
			if len(rest) > 0 && rest[0] == '\t' {
				return i + 1
			}
		}
	}
	return 0
}

// decodeError translates what the decoder found after the walk found
// nothing (it should not happen): its lines, never its Go types.
func decodeError(file string, err error) error {
	var te *yaml.TypeError
	if !errors.As(err, &te) || len(te.Errors) == 0 {
		// Such as "document contains excessive aliasing": no Go type.
		return inputError(&Error{File: file, Msg: "not accepted: " + strings.TrimPrefix(err.Error(), "yaml: ")})
	}
	line := 0
	if m := yamlLine.FindStringSubmatch(te.Errors[0]); m != nil {
		line, _ = strconv.Atoi(m[1])
	}
	return inputError(&Error{File: file, Line: line, Msg: "this value does not fit its field"})
}

// isNull reports whether n is absent or an explicit null (key: with no
// value, ~, null): the field keeps its default.
func isNull(n *yaml.Node) bool {
	return n == nil || (n.Kind == yaml.ScalarNode && n.ShortTag() == "!!null")
}

// lineOf is the line of path in the tree under root: the line of its
// deepest part the tree holds, 0 when not even the first.
func lineOf(root *yaml.Node, path string) int {
	line := 0
	if root == nil {
		return 0
	}
	n := root
	for _, seg := range pathSegments(path) {
		n = resolve(n)
		var next *yaml.Node
		if i, ok := index(seg); ok {
			if n.Kind == yaml.SequenceNode && i < len(n.Content) {
				next = n.Content[i]
				line = next.Line
			}
		} else if n.Kind == yaml.MappingNode {
			for j := 0; j+1 < len(n.Content); j += 2 {
				if n.Content[j].Value == seg {
					next = n.Content[j+1]
					line = n.Content[j].Line
				}
			}
		}
		if next == nil {
			return line
		}
		n = next
	}
	return line
}

// resolve follows an alias to its anchor.
func resolve(n *yaml.Node) *yaml.Node {
	for n != nil && n.Kind == yaml.AliasNode {
		n = n.Alias
	}
	return n
}

// describe says what a node is, as the user wrote it: the number 3, the
// string "x", a list.
func describe(n *yaml.Node) string {
	n = resolve(n)
	switch n.Kind {
	case yaml.MappingNode:
		return "a mapping"
	case yaml.SequenceNode:
		return "a list"
	case yaml.ScalarNode:
		v := quote(n.Value)
		switch n.ShortTag() {
		case "!!null":
			return "nothing"
		case "!!int", "!!float":
			return "the number " + strings.Trim(v, `"`)
		case "!!bool":
			return "the value " + strings.Trim(v, `"`)
		case "!!timestamp":
			return "the date " + v
		case "!!str":
			return "the string " + v
		}
		return "the value " + v
	}
	return "something else"
}

// maxQuoted bounds a value quoted in a message: enough to recognise it.
const maxQuoted = 60

// quote quotes a value for a message: escaped (no control character or
// terminal escape reaches the terminal raw), cut after maxQuoted runes.
func quote(s string) string {
	r := []rune(s)
	if len(r) > maxQuoted {
		return strconv.Quote(string(r[:maxQuoted])) + "..."
	}
	return strconv.Quote(s)
}

// Describe says what a node is in the user's words (the number 3, the
// string "x", a list), for parsers that walk a yaml.Node themselves.
func Describe(n *yaml.Node) string { return describe(n) }

// SyntaxError is the error for text that is not YAML, placed in file.
func SyntaxError(file string, data []byte, err error) error { return syntaxError(file, data, err) }
