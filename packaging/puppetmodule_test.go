package packaging_test

import (
	"bytes"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"

	"github.com/jiocloud/orchestrate/internal/paths"
	"github.com/jiocloud/orchestrate/internal/testutil"
)

// The package ships the Puppet module where Debian's puppet finds modules,
// each file as in the source tree and nothing else; with the extracted
// package's modulepath alone, `puppet apply --noop` compiles `include
// orchestrate` and a service_blocker running the packaged binary, while the same apply without
// the package's module cannot find the class.
func TestPackagedPuppetModule(t *testing.T) {
	testutil.RequireTool(t, "dpkg-deb", "dpkg")
	testutil.RequirePuppet(t)
	pkg, _ := packages(t)
	root := extract(t, pkg.path)
	module := filepath.Join(root, paths.PuppetModuleDir)
	want := moduleFiles(t)
	var got []string
	err := filepath.WalkDir(module, func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		rel, _ := filepath.Rel(module, p)
		got = append(got, rel)
		shipped, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		if src, err := os.ReadFile(filepath.Join(moduleSource, rel)); err != nil || !bytes.Equal(src, shipped) {
			t.Errorf("%s/%s differs from %s/%s (%v)", paths.PuppetModuleDir, rel, moduleSource, rel, err)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	sort.Strings(got)
	if strings.Join(got, " ") != strings.Join(want, " ") {
		t.Errorf("the package's %s holds %v, want the module's files %v", paths.PuppetModuleDir, got, want)
	}

	modulepath := filepath.Dir(module)
	for _, tc := range []struct{ name, code string }{
		{"include orchestrate", "--execute=include orchestrate"},
		// The packaged binary, whose `unless` check runs in noop too.
		{"orchestrate::service_blocker", "--execute=orchestrate::service_blocker { 'mysql': count => 2, check_timeout => 1, binary => '" +
			filepath.Join(root, paths.ServiceBlocker) + "' }"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			code, out := testutil.PuppetApply(t, "--noop", "--modulepath", modulepath, tc.code)
			// --noop --detailed-exitcodes: 0, or 2 for what it would change;
			// 1, 4 or 6 is an error or a failed resource.
			if (code != 0 && code != 2) || !strings.Contains(out, "Compiled catalog") || strings.Contains(out, "Error:") {
				t.Fatalf("puppet apply --noop %s with --modulepath %s: exit %d\n%s", tc.code, modulepath, code, out)
			}
		})
	}
	// The same apply with an empty modulepath fails: the class came from
	// the package.
	code, out := testutil.PuppetApply(t, "--noop", "--modulepath", t.TempDir(), "--execute=include orchestrate")
	if code == 0 || code == 2 || !strings.Contains(out, "Could not find class ::orchestrate") {
		t.Errorf("puppet apply without the package's module: exit %d, want a failure to find the class:\n%s", code, out)
	}
}
