package watch

import (
	"os/exec"
	"strings"
	"testing"
)

// ShellCommand's line, run by the real /bin/sh, passes each argument
// through unchanged, whatever it holds.
func TestShellCommandRoundTrip(t *testing.T) {
	args := []string{"printf", `%s\n`, "plain", "it's", `"double"`, "$(echo expanded)", "`id`", "a b\tc", "semi;colon", "new\nline", "back\\slash", ""}
	out, err := exec.Command("/bin/sh", "-c", ShellCommand(args)).Output()
	if err != nil {
		t.Fatal(err)
	}
	if got, want := string(out), strings.Join(args[2:], "\n")+"\n"; got != want {
		t.Fatalf("sh printed %q, want %q", got, want)
	}
}
