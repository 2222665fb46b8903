package orchestrate

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"

	"github.com/jiocloud/orchestrate/internal/consultest"
)

// Every status and list command's --json has a stable shape (docs/json.md):
// with nothing to show, lists are [] and maps {}, never null, and the
// output is one JSON value.
func TestJSONEmptyHasNoNull(t *testing.T) {
	a := consultest.Start(t, consultest.Options{})
	for _, tc := range []struct {
		args []string
		code int
	}{
		{[]string{"reaper", "status"}, 0},
		{[]string{"reaper", "history"}, 0},
		{[]string{"pool", "status"}, 0},
		{[]string{"hook", "list"}, 0},
		{[]string{"hold", "list"}, 0},
		{[]string{"running-versions"}, 0},
		{[]string{"hosts-at-version", "v1"}, 0},
		{[]string{"get-failures"}, 0},
		{[]string{"verify-hosts", "v1", "web1"}, 1},
		{[]string{"current-version"}, 1},
		{[]string{"pending-update", "--host", "web1"}, 1},
	} {
		name := strings.Join(tc.args, " ")
		t.Run(name, func(t *testing.T) {
			r := cli(t, a, "", append(tc.args, "--json")...)
			if r.code != tc.code {
				t.Fatalf("exit %d, want %d\nstdout: %s\nstderr: %s", r.code, tc.code, r.stdout, r.stderr)
			}
			dec := json.NewDecoder(bytes.NewReader([]byte(r.stdout)))
			var v any
			if err := dec.Decode(&v); err != nil || dec.More() {
				t.Fatalf("stdout is not one JSON value (%v):\n%s", err, r.stdout)
			}
			if strings.Contains(r.stdout, "null") {
				t.Errorf("the empty case holds null:\n%s", r.stdout)
			}
		})
	}
}
