package converge

import (
	"errors"
	"os"
	"path/filepath"
	"testing"

	"github.com/jiocloud/orchestrate/internal/fileutil"
)

func TestReadDependencies(t *testing.T) {
	dir := t.TempDir()
	write := func(name, body string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
		return p
	}
	met, unmet, err := readDependencies(write("unmet.yaml", "\"orchestrate::dependencies_met\": false\n\"orchestrate::unmet_dependencies\": [\"db\", \"lb\"]\n"))
	if err != nil || met || len(unmet) != 2 || unmet[0] != "db" || unmet[1] != "lb" {
		t.Fatalf("unmet: %v %v %v", met, unmet, err)
	}
	if met, _, err := readDependencies(write("none.yaml", "\"services::db::port\": [3306]\n")); err != nil || !met {
		t.Fatalf("no dependency keys must read as met: %v %v", met, err)
	}
	if _, _, err := readDependencies(write("bad.yaml", "\"orchestrate::dependencies_met\": maybe\n")); err == nil {
		t.Fatal("a non-boolean dependencies_met was accepted")
	}
	// A path that never ends is refused at the size limit, not read until
	// memory runs out.
	if _, _, err := readDependencies("/dev/zero"); !errors.Is(err, fileutil.ErrTooLarge) {
		t.Fatalf("/dev/zero: %v", err)
	}
}
