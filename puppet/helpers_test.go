package puppet_test

import (
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"

	"github.com/jiocloud/orchestrate/internal/testutil"
)

// world is a temporary root for puppet apply.
type world struct {
	root, bin string
	dir       string   // puppet's own directories
	env       []string // more environment for puppet apply
}

// newWorld makes a world with the directories the module writes under
// and the project's binaries built.
func newWorld(t *testing.T) *world {
	t.Helper()
	testutil.RequirePuppet(t)
	w := &world{root: t.TempDir(), dir: t.TempDir(), bin: testutil.BuildCommands(t, "orchestrate", "hiera-services", "reaper")}
	for _, d := range []string{"etc/orchestrate", "etc/consul.d", "var/lib/orchestrate/hiera"} {
		if err := os.MkdirAll(filepath.Join(w.root, d), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	return w
}

// apply runs puppet apply of manifest (after `%[1]s` is the root and
// `%[2]s` the binaries' directory) and returns its exit code
// (--detailed-exitcodes: 0 no change, 2 changes, 4 or 6 failures) and
// output.
func (w *world) apply(t *testing.T, manifest string) (int, string) {
	t.Helper()
	site := filepath.Join(w.dir, "site.pp")
	if err := os.WriteFile(site, []byte(fmt.Sprintf(manifest, w.root, w.bin)), 0o644); err != nil {
		t.Fatal(err)
	}
	modules, err := filepath.Abs(".")
	if err != nil {
		t.Fatal(err)
	}
	return testutil.PuppetApplyIn(t, w.dir, w.env, "--modulepath", modules, "--write-catalog-summary", site)
}

// resources lists the resources of the last catalog applied, from the
// catalog summary puppet apply writes.
func (w *world) resources(t *testing.T) []string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(w.dir, "vardir", "state", "resources.txt"))
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, l := range strings.Split(strings.TrimSpace(string(b)), "\n") {
		if !strings.HasPrefix(l, "class[") && !strings.HasPrefix(l, "stage[") {
			out = append(out, l)
		}
	}
	sort.Strings(out)
	return out
}

// mode and content of a file under the root.
func (w *world) file(t *testing.T, rel string) (os.FileMode, string) {
	t.Helper()
	st, err := os.Stat(filepath.Join(w.root, rel))
	if err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(filepath.Join(w.root, rel))
	if err != nil {
		t.Fatal(err)
	}
	return st.Mode().Perm(), string(b)
}
