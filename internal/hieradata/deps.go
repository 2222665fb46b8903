package hieradata

import (
	"errors"
	"fmt"
	"os"
	"sort"
	"strconv"

	"github.com/jiocloud/orchestrate/internal/fault"
	"github.com/jiocloud/orchestrate/internal/fileutil"
	"github.com/jiocloud/orchestrate/internal/yamlconf"
	"gopkg.in/yaml.v3"
)

// Requirement is how many instances of one service a node needs before it
// can be configured (Addressable) and before its role can work (Functional).
type Requirement struct {
	// Service is the Consul service name.
	Service string
	// Addressable is the number of registered instances whose checks are not
	// critical: what Consul DNS returns (passing and warning).
	Addressable int
	// Functional is the number of instances whose checks all pass.
	Functional int
}

// Dependencies are a node's declared requirements, sorted by service.
type Dependencies []Requirement

// maxRequired bounds a required count; no cloud runs a million instances of
// a service, so a larger number is a typo.
const maxRequired = 1_000_000

// LoadDependencies reads a dependencies file: a YAML mapping from service
// name to {addressable: N, functional: N}, either count optional, e.g.
//
//	mysql: {addressable: 1, functional: 2}
//	keystone: {functional: 1}
//
// An empty file declares nothing. Any problem is a fault.InputError naming the
// file, the line and what is wrong.
func LoadDependencies(path string) (Dependencies, error) {
	data, err := fileutil.ReadLimited(path, MaxInputFile)
	if err != nil {
		var pe *os.PathError
		if errors.As(err, &pe) {
			err = pe.Err
		}
		return nil, fault.Inputf("dependencies file %s: %w", path, err)
	}
	deps, err := ParseDependencies(data)
	if err != nil {
		return nil, fault.Inputf("dependencies file %s:%w", path, err)
	}
	return deps, nil
}

// MaxInputFile bounds the dependencies file and a --template: both are
// a few KiB; 1 MiB is far above any real one, and a device such as
// /dev/zero is refused instead of read until memory runs out.
const MaxInputFile = 1 << 20

// lineError is a problem at a line of the dependencies file; its message
// starts with the line number so LoadDependencies can print file:line.
type lineError struct {
	line int
	msg  string
}

func (e *lineError) Error() string { return strconv.Itoa(e.line) + ": " + e.msg }

func lineErrorf(n *yaml.Node, format string, args ...any) error {
	return &lineError{line: n.Line, msg: fmt.Sprintf(format, args...)}
}

// ParseDependencies parses the contents of a dependencies file; errors start
// with "LINE: ".
func ParseDependencies(data []byte) (Dependencies, error) {
	var doc yaml.Node
	if err := yaml.Unmarshal(data, &doc); err != nil {
		var ye *yamlconf.Error
		if errors.As(yamlconf.SyntaxError("", data, err), &ye) {
			return nil, &lineError{line: max(ye.Line, 1), msg: ye.Msg}
		}
		return nil, err
	}
	if doc.Kind == 0 || len(doc.Content) == 0 {
		return Dependencies{}, nil // an empty file declares nothing
	}
	root := doc.Content[0]
	if root.Kind == yaml.ScalarNode && root.Tag == "!!null" {
		return Dependencies{}, nil
	}
	if root.Kind != yaml.MappingNode {
		return nil, lineErrorf(root, "want a mapping of service name to {addressable: N, functional: N}, got %s", yamlconf.Describe(root))
	}
	seen := map[string]int{}
	var deps Dependencies
	for i := 0; i+1 < len(root.Content); i += 2 {
		k, v := root.Content[i], root.Content[i+1]
		if k.Kind != yaml.ScalarNode || (k.Tag != "!!str" && k.Tag != "!!int") {
			return nil, lineErrorf(k, "service name must be a string, got %s", yamlconf.Describe(k))
		}
		name := k.Value
		if err := ValidServiceName(name); err != nil {
			return nil, lineErrorf(k, "%v", err)
		}
		if prev, dup := seen[name]; dup {
			return nil, lineErrorf(k, "service %q declared twice (first on line %d)", name, prev)
		}
		seen[name] = k.Line
		req := Requirement{Service: name}
		if v.Kind != yaml.MappingNode {
			return nil, lineErrorf(v, "service %q: want {addressable: N, functional: N}, got %s", name, yamlconf.Describe(v))
		}
		fields := map[string]bool{}
		for j := 0; j+1 < len(v.Content); j += 2 {
			fk, fv := v.Content[j], v.Content[j+1]
			if fk.Kind != yaml.ScalarNode {
				return nil, lineErrorf(fk, "service %q: want keys addressable and functional, got %s", name, yamlconf.Describe(fk))
			}
			if fields[fk.Value] {
				return nil, lineErrorf(fk, "service %q: %s given twice", name, fk.Value)
			}
			fields[fk.Value] = true
			var dst *int
			switch fk.Value {
			case "addressable":
				dst = &req.Addressable
			case "functional":
				dst = &req.Functional
			default:
				return nil, unknownKey(fk, name)
			}
			n, err := count(fv)
			if err != nil {
				return nil, lineErrorf(fv, "service %q: %s: %v", name, fk.Value, err)
			}
			*dst = n
		}
		deps = append(deps, req)
	}
	sort.Slice(deps, func(i, j int) bool { return deps[i].Service < deps[j].Service })
	return deps, nil
}

func count(n *yaml.Node) (int, error) {
	if n.Kind != yaml.ScalarNode || n.Tag != "!!int" {
		return 0, fmt.Errorf("want a whole number, got %s", yamlconf.Describe(n))
	}
	v, err := strconv.ParseInt(n.Value, 0, 64)
	if err != nil {
		return 0, fmt.Errorf("want a whole number, got %q", n.Value)
	}
	if v < 0 || v > maxRequired {
		return 0, fmt.Errorf("%d is out of range 0..%d", v, maxRequired)
	}
	return int(v), nil
}

// unknownKey names a key that is neither addressable nor functional,
// and the one meant when it is near one.
func unknownKey(k *yaml.Node, service string) error {
	msg := fmt.Sprintf("service %q: unknown key %q (want addressable or functional)", service, k.Value)
	if s := yamlconf.Suggest(k.Value, []string{"addressable", "functional"}); s != "" {
		msg = fmt.Sprintf("service %q: unknown key %q: did you mean %q?", service, k.Value, s)
	}
	return &lineError{line: k.Line, msg: msg}
}
