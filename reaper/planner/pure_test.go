package planner

import (
	"os/exec"
	"strings"
	"testing"
)

// module is this module's import path.
const module = "github.com/jiocloud/orchestrate"

// allowedThirdParty are the packages outside the standard library and
// this module the planner may depend on: YAML parsing, through the
// domain's configuration types.
var allowedThirdParty = map[string]bool{"gopkg.in/yaml.v3": true}

// ioImport reports whether a standard package does I/O (files, network,
// processes, signals, logs, randomness) or escapes the type system.
// net/netip and net/url only parse.
func ioImport(path string) bool {
	switch path {
	case "net/netip", "net/url":
		return false
	case "os", "net", "syscall", "io/fs", "io/ioutil", "path/filepath", "log", "log/slog",
		"crypto/rand", "math/rand", "math/rand/v2", "unsafe", "embed", "plugin", "time/tzdata":
		return true
	}
	for _, p := range []string{"os/", "net/", "runtime/", "log/", "debug/"} {
		if strings.HasPrefix(path, p) {
			return true
		}
	}
	return false
}

// The planner is pure: the same Input gives the same Plan. The compiler
// keeps it so: neither the planner nor any package of this module it
// depends on imports a package that does I/O, and its only dependency
// outside the standard library and this module is the YAML parser. (The
// standard library's own fmt and time sit on os and syscall; what is
// checked is what this module's code can call.)
func TestPlannerImportsNoIO(t *testing.T) {
	out, err := exec.Command("go", "list", "-deps", "-f", "{{.ImportPath}}|{{.Standard}}|{{join .Imports \" \"}}", ".").Output()
	if err != nil {
		t.Fatalf("go list -deps: %v", err)
	}
	var ours int
	for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		path, rest, _ := strings.Cut(line, "|")
		std, imports, _ := strings.Cut(rest, "|")
		switch {
		case std == "true":
			continue
		case path != module && !strings.HasPrefix(path, module+"/"):
			if !allowedThirdParty[path] {
				t.Errorf("the planner depends on %s, outside the standard library and this module", path)
			}
			continue
		}
		ours++
		for _, imp := range strings.Fields(imports) {
			if ioImport(imp) {
				t.Errorf("%s, a dependency of the planner, imports %s", path, imp)
			}
		}
	}
	if ours < 2 {
		t.Fatalf("go list found %d packages of this module (want the planner and the domain at least): %s", ours, out)
	}
}
