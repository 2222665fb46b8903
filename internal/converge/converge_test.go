package converge

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
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
	if _, _, err := readDependencies(write("bad.yaml", "\"orchestrate::dependencies_met\": maybe\n")); err == nil || !strings.Contains(err.Error(), `bad.yaml:1: orchestrate::dependencies_met: want true or false, got the string "maybe"`) {
		t.Fatalf("a non-boolean dependencies_met: %v, want it named at its line without a Go type", err)
	}
	// A device that never ends (or a FIFO that would block) is no hiera
	// data; a file beyond the limit is refused at the limit, not read
	// until memory runs out.
	if _, _, err := readDependencies("/dev/zero"); err == nil || !strings.Contains(err.Error(), "/dev/zero is not a regular file") {
		t.Fatalf("/dev/zero: %v", err)
	}
	huge := write("huge.yaml", "")
	if err := os.Truncate(huge, maxHieraData+1); err != nil {
		t.Fatal(err)
	}
	if _, _, err := readDependencies(huge); !errors.Is(err, fileutil.ErrTooLarge) || !strings.Contains(err.Error(), huge) {
		t.Fatalf("a file over the limit: %v", err)
	}
}
