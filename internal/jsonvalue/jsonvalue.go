// Package jsonvalue says what is wrong with a JSON value that did not
// decode (a KV value, a grant file), in JSON's words for a person who
// wrote it by hand: the field's path, what it holds and what belongs
// there; never a Go type name, never the value itself.
package jsonvalue

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"reflect"
	"strings"
	"time"

	"github.com/jiocloud/orchestrate/internal/yamlconf"
)

// Problem says what is wrong with a JSON value that did not decode, in
// the value's own terms: where (the field's JSON path), what it holds,
// and what belongs there; never a Go type name, never the value itself
// (it may be anything). A decoder with DisallowUnknownFields names the
// unknown field (quoted, so escaped).
func Problem(err error) string { return ProblemOr(err, "not a value of the expected shape") }

// ProblemOr is Problem, saying otherwise for an error it cannot describe
// (a type's own decoder refusing, as time.Time given a number): a caller
// names the shape it wanted.
func ProblemOr(err error, otherwise string) string {
	var se *json.SyntaxError
	var te *json.UnmarshalTypeError
	var pe *time.ParseError
	switch {
	case errors.Is(err, io.ErrUnexpectedEOF), errors.As(err, &se) && se.Error() == "unexpected end of JSON input":
		return "not JSON (it ends early)"
	case errors.As(err, &se):
		return fmt.Sprintf("not JSON (at byte %d)", se.Offset)
	case errors.As(err, &te) && te.Field == "":
		return fmt.Sprintf("want %s, got %s", noun(te.Type), valueNoun(te.Value))
	case errors.As(err, &te):
		return fmt.Sprintf("field %s: want %s, got %s", te.Field, noun(te.Type), valueNoun(te.Value))
	case errors.As(err, &pe):
		return "a time that is not RFC 3339 (as 2026-11-27T12:00:00Z)"
	case strings.HasPrefix(err.Error(), "json: unknown field "):
		return strings.TrimPrefix(err.Error(), "json: ")
	}
	return otherwise
}

// noun says what a field of type t takes, in JSON's words.
func noun(t reflect.Type) string {
	for t != nil && t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	switch {
	case t == nil:
		return "another kind of value"
	case t.Kind() == reflect.Map || t.Kind() == reflect.Struct:
		return "an object"
	}
	return yamlconf.Noun(t)
}

// valueNoun names the kind of JSON value json's errors report
// ("number", "array", ...; a number out of range comes as "number 1e999").
func valueNoun(v string) string {
	switch v {
	case "array":
		return "a list"
	case "object":
		return "an object"
	case "string":
		return "a string"
	case "bool":
		return "true or false"
	}
	if n, ok := strings.CutPrefix(v, "number "); ok {
		return "the number " + n // a JSON number literal: digits, sign, point, exponent
	}
	return "a " + v
}
