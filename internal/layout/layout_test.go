// Package layout_test checks the direction of the module's dependencies
// (DESIGN.md, "Top-level packages"): cmd/ -> the binaries' packages ->
// internal/, and no library package under internal/ imports a domain
// package: hiera, blocker, reaper or anything under them. watch/ is not a
// domain package but Consul-watch plumbing (stdin payloads, serialising
// runs, run-on-change, watch stanzas) that converge and the orchestrate
// command share, so internal/ may import it.
//
// Only non-test code counts: `go list -deps` without -test walks each
// package's own imports and theirs, which is what a binary links. A test of
// an internal package may drive a domain package, as a test under cmd/
// would; programs that run the whole system (cmd/demo) live under cmd/.
package layout_test

import (
	"errors"
	"os/exec"
	"strings"
	"testing"
)

const module = "github.com/jiocloud/orchestrate"

// domains are the top-level domain packages internal/ must not depend on.
var domains = []string{"hiera", "blocker", "reaper"}

// isDomain reports whether import path p is a domain package or one under it.
func isDomain(p string) bool {
	for _, d := range domains {
		root := module + "/" + d
		if p == root || strings.HasPrefix(p, root+"/") {
			return true
		}
	}
	return false
}

// breaches reads `go list -deps`-style lines, "package dep dep ...", and
// returns "package -> dep" for each domain package a package depends on.
func breaches(listing string) []string {
	var out []string
	for _, line := range strings.Split(listing, "\n") {
		f := strings.Fields(line)
		if len(f) == 0 {
			continue
		}
		for _, dep := range f[1:] {
			if isDomain(dep) {
				out = append(out, f[0]+" -> "+dep)
			}
		}
	}
	return out
}

// TestInternalImportsNoDomainPackage lists every package under internal/
// with everything it links (Deps: its imports, transitively, without test
// files) and fails naming each path from an internal package to hiera,
// blocker or reaper.
func TestInternalImportsNoDomainPackage(t *testing.T) {
	out, err := exec.Command("go", "list", "-f", "{{.ImportPath}} {{join .Deps \" \"}}", module+"/internal/...").Output()
	if err != nil {
		var ee *exec.ExitError
		if errors.As(err, &ee) {
			t.Fatalf("go list: %v\n%s", err, ee.Stderr)
		}
		t.Fatalf("go list: %v", err)
	}
	if !strings.Contains(string(out), module+"/internal/store ") {
		t.Fatalf("go list did not list internal/store; got:\n%s", out)
	}
	for _, b := range breaches(string(out)) {
		t.Errorf("%s: a package under internal/ must not depend on a domain package (DESIGN.md); move it under cmd/ or the domain package", b)
	}
}

// TestBreaches checks the reading of the listing: a domain package or one
// under it is a breach, watch/ and a look-alike prefix are not.
func TestBreaches(t *testing.T) {
	tests := []struct {
		name, listing string
		want          []string
	}{
		{name: "clean", listing: module + "/internal/store fmt " + module + "/internal/consulclient\n", want: nil},
		{name: "watch is plumbing", listing: module + "/internal/converge " + module + "/watch\n", want: nil},
		{name: "look-alike prefix", listing: module + "/internal/x " + module + "/reaperish " + module + "/hieradata\n", want: nil},
		{name: "root domain", listing: module + "/internal/x " + module + "/hiera\n", want: []string{module + "/internal/x -> " + module + "/hiera"}},
		{name: "under a domain", listing: module + "/internal/x fmt\n" + module + "/internal/y " + module + "/reaper/simcloud " + module + "/blocker\n",
			want: []string{module + "/internal/y -> " + module + "/reaper/simcloud", module + "/internal/y -> " + module + "/blocker"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got := breaches(tc.listing)
			if strings.Join(got, "|") != strings.Join(tc.want, "|") {
				t.Fatalf("got %q, want %q", got, tc.want)
			}
		})
	}
}
