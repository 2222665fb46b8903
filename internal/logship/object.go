package logship

import (
	"fmt"
	"net/url"
	"strings"
	"time"

	"github.com/jiocloud/orchestrate/internal/store/schema"
)

// stampFormat is an object's time: UTC, sortable, no colons.
const stampFormat = "20060102T150405.000Z"

// ObjectName is the name of host's log of step for version, from a run
// that started at t: "<host>/<version>/<step>/<time>.log". Names sort by
// time within a step, and every part is a valid KV name (no slash), so the
// name splits back unambiguously (ParseObjectName).
func ObjectName(host, version, step string, t time.Time) (string, error) {
	for _, p := range []struct{ kind, v string }{{"host", host}, {"version", version}, {"step", step}} {
		if err := schema.ValidName(p.kind, p.v); err != nil {
			return "", err
		}
	}
	return host + "/" + version + "/" + step + "/" + t.UTC().Format(stampFormat) + ".log", nil
}

// Object is a parsed object name.
type Object struct {
	Host, Version, Step string
	Time                time.Time
}

// ParseObjectName splits an ObjectName.
func ParseObjectName(name string) (Object, error) {
	parts := strings.Split(name, "/")
	if len(parts) != 4 {
		return Object{}, fmt.Errorf("object %q: want <host>/<version>/<step>/<time>.log", name)
	}
	stamp, ok := strings.CutSuffix(parts[3], ".log")
	if !ok {
		return Object{}, fmt.Errorf("object %q: want a name ending in .log", name)
	}
	t, err := time.Parse(stampFormat, stamp)
	if err != nil {
		return Object{}, fmt.Errorf("object %q: time %q: want %s", name, stamp, stampFormat)
	}
	return Object{Host: parts[0], Version: parts[1], Step: parts[2], Time: t}, nil
}

// escapeObject escapes each segment of an object name for a URL path.
func escapeObject(object string) string {
	parts := strings.Split(object, "/")
	for i, p := range parts {
		parts[i] = url.PathEscape(p)
	}
	return strings.Join(parts, "/")
}

// ObjectURL is object's URL in the container: the status record's log_url.
// It carries no signature; reading it takes a temp URL or a token.
func ObjectURL(containerURL, object string) string {
	return containerBase(containerURL) + "/" + escapeObject(object)
}

// SplitObjectURL is the inverse of ObjectURL: the container URL and the
// object name of a log_url. ok is false for a URL that is not an object
// in a Swift container (a file:// URL, a web server's).
func SplitObjectURL(raw string) (containerURL, object string, ok bool) {
	u, err := url.Parse(raw)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.RawQuery != "" {
		return "", "", false
	}
	parts := strings.SplitN(strings.TrimPrefix(u.EscapedPath(), "/"), "/", 4)
	if len(parts) != 4 || parts[0] != "v1" || parts[3] == "" {
		return "", "", false
	}
	obj, err := url.PathUnescape(parts[3])
	if err != nil {
		return "", "", false
	}
	base := *u
	base.Path, base.RawPath = "/"+parts[0]+"/"+parts[1]+"/"+parts[2], ""
	return base.String(), obj, true
}
