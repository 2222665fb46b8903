// Package yamlconf decodes the YAML files operators write (the reaper's
// configuration, a node's dependencies file) strictly, and says what is
// wrong in the file's own words: FILE:LINE, the field path as written in
// YAML (roles[1].max_age), what is wrong and, for an unknown key, the
// nearest valid one. No Go type name, YAML tag or decoder wording reaches
// a message.
//
// Decode first reads the file into a yaml.Node and walks it against the
// target struct's yaml tags (the keys known at each level come from
// reflection), so every problem is found with its line and path; only then
// does it decode. Doc.Annotate gives a later validation error the line of
// the field it names.
package yamlconf

import (
	"errors"
	"fmt"
	"regexp"
	"strconv"
	"strings"

	"gopkg.in/yaml.v3"

	"github.com/jiocloud/orchestrate/internal/fault"
)

// Error is a problem in a configuration file. Its message reads
// FILE:LINE: MESSAGE, without the parts that are not known.
type Error struct {
	// File is the file's path as the user gave it; empty when the text
	// came from elsewhere.
	File string
	// Line is the 1-based line of the problem; 0 when not known.
	Line int
	// Path is the field path as written in YAML (roles[0].boot.flavor);
	// empty when the problem is not in one field (a syntax error).
	Path string
	// Msg says what is wrong; it names Path when there is one.
	Msg string
	// Err is the validation error Annotate placed, if any.
	Err error
}

// Error returns FILE:LINE: MESSAGE.
func (e *Error) Error() string {
	switch {
	case e.File != "" && e.Line > 0:
		return fmt.Sprintf("%s:%d: %s", e.File, e.Line, e.Msg)
	case e.File != "":
		return e.File + ": " + e.Msg
	case e.Line > 0:
		return fmt.Sprintf("line %d: %s", e.Line, e.Msg)
	}
	return e.Msg
}

// Unwrap returns the validation error Annotate placed, if any.
func (e *Error) Unwrap() error { return e.Err }

// Doc is a decoded file: its name and its tree, to place the errors of
// a later validation at the line of the field they name.
type Doc struct {
	file string
	root *yaml.Node
	// setBy names where a top-level key's value came from when not from
	// the file (a flag that overrode it).
	setBy map[string]string
}

// File is the path the document was read from ("" when not from a file).
func (d *Doc) File() string {
	if d == nil {
		return ""
	}
	return d.file
}

// SetBy records that the value of the top-level key came from by (a
// flag, "--max-in-flight") rather than the file: an error about it then
// points there instead of at the file's line.
func (d *Doc) SetBy(key, by string) {
	if d == nil {
		return
	}
	if d.setBy == nil {
		d.setBy = map[string]string{}
	}
	d.setBy[key] = by
}

// leadingPath finds the field path a validation message starts with:
// "roles[1].min_healthy: must not be negative" names roles[1].min_healthy.
var leadingPath = regexp.MustCompile(`^[a-z_][a-z0-9_-]*(\[\d+\])*(\.[A-Za-z0-9_-]+(\[\d+\])*)*`)

// Annotate places a validation error: when its message starts with a
// field path the file holds, it gains the file's name and that field's
// line (for a field the file leaves out, the line of the nearest
// enclosing one); otherwise the file's name alone. The result is an input
// error that unwraps to err; nil stays nil.
func (d *Doc) Annotate(err error) error {
	if err == nil {
		return nil
	}
	var e *Error
	if errors.As(err, &e) {
		return err // placed already
	}
	if d == nil {
		return fault.Input(err)
	}
	msg := err.Error()
	path := leadingPath.FindString(msg)
	top, _, _ := strings.Cut(path, ".")
	top, _, _ = strings.Cut(top, "[")
	if by, ok := d.setBy[top]; ok {
		return fault.Input(&Error{File: by, Path: path, Msg: msg, Err: err})
	}
	line := 0
	if path != "" {
		line = lineOf(d.root, path)
	}
	if line == 0 {
		path = ""
	}
	return fault.Input(&Error{File: d.file, Line: line, Path: path, Msg: msg, Err: err})
}

// pathSegments splits roles[1].boot.flavor into roles, [1], boot, flavor.
func pathSegments(path string) []string {
	var segs []string
	for part := range strings.SplitSeq(path, ".") {
		name, rest, _ := strings.Cut(part, "[")
		segs = append(segs, name)
		for rest != "" {
			idx, after, _ := strings.Cut(rest, "]")
			segs = append(segs, "["+idx+"]")
			_, rest, _ = strings.Cut(after, "[")
		}
	}
	return segs
}

// index parses "[3]" as 3.
func index(seg string) (int, bool) {
	if !strings.HasPrefix(seg, "[") {
		return 0, false
	}
	i, err := strconv.Atoi(strings.Trim(seg, "[]"))
	return i, err == nil && i >= 0
}
