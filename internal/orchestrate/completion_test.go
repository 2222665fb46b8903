package orchestrate

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/jiocloud/orchestrate/internal/testutil"
)

// completionScript writes `orchestrate completion SHELL` to a file.
func completionScript(t *testing.T, shell string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "orchestrate."+shell)
	if err := os.WriteFile(p, []byte(runHelp(t, "completion", shell)), 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

// shell runs script in the shell at path and returns its output.
func shell(t *testing.T, path string, args ...string) string {
	t.Helper()
	out, err := exec.Command(path, args...).CombinedOutput()
	if err != nil {
		t.Fatalf("%s %q: %v\n%s", path, args, err, out)
	}
	return strings.TrimSpace(string(out))
}

// The cases every shell answers: the words typed, the completions wanted.
var completionCases = []struct {
	name, line string
	want       []string
}{
	{"subcommand", "orchestrate sta", []string{"standby", "status"}},
	{"shared subcommand", "orchestrate comp", []string{"completion"}},
	{"flag", "orchestrate status --js", []string{"--json"}},
	{"flag value", "orchestrate status --log-format ", []string{"json", "text"}},
	{"first argument", "orchestrate update-status ", []string{"eventual", "provisioned", "puppet", "repair", "update", "validation"}},
	{"second argument after a flag's value", "orchestrate update-status --detail x puppet f", []string{"failed"}},
	{"action", "orchestrate reaper ", []string{"arm", "disarm", "history", "status"}},
	{"shell", "orchestrate completion ", []string{"bash", "fish", "zsh"}},
}

// Bash, with bash-completion loaded as on a Debian machine: the script
// registers _orchestrate, and the function answers COMP_WORDS.
func TestCompletionBash(t *testing.T) {
	bash := testutil.RequireTool(t, "bash", "bash")
	if _, err := os.Stat("/usr/share/bash-completion/bash_completion"); err != nil && os.Getenv("CI") == "true" {
		t.Fatalf("CI=true and no bash-completion (make test-deps installs it): %v", err)
	}
	script := completionScript(t, "bash")
	if got := shell(t, bash, "-c", "source "+script+"; complete -p orchestrate"); got != "complete -o default -F _orchestrate orchestrate" {
		t.Fatalf("complete -p orchestrate = %q", got)
	}
	for _, tc := range completionCases {
		t.Run(tc.name, func(t *testing.T) {
			words := strings.Fields(tc.line)
			if strings.HasSuffix(tc.line, " ") {
				words = append(words, "''")
			}
			prog := "[ -f /usr/share/bash-completion/bash_completion ] && source /usr/share/bash-completion/bash_completion; source " + script +
				"; COMP_WORDS=(" + strings.Join(words, " ") + "); COMP_CWORD=$((${#COMP_WORDS[@]} - 1)); _orchestrate; printf '%s\\n' \"${COMPREPLY[@]}\" | sort"
			got := shell(t, bash, "-c", prog)
			if got != strings.Join(tc.want, "\n") {
				t.Errorf("%q completes to %q, want %q", tc.line, got, tc.want)
			}
		})
	}
}

// Fish asks the script itself: complete -C.
func TestCompletionFish(t *testing.T) {
	fish := testutil.RequireTool(t, "fish", "fish")
	script := completionScript(t, "fish")
	for _, tc := range completionCases {
		t.Run(tc.name, func(t *testing.T) {
			got := shell(t, fish, "--no-config", "-c", "source "+script+"; complete -C '"+tc.line+"' | cut -f1 | sort")
			if got != strings.Join(tc.want, "\n") {
				t.Errorf("%q completes to %q, want %q", tc.line, got, tc.want)
			}
		})
	}
}

// Zsh: the script parses (zsh -n), loads under compinit and registers
// _orchestrate; its function, run with compadd and _describe standing in
// for the completion system's, offers the same words.
func TestCompletionZsh(t *testing.T) {
	zsh := testutil.RequireTool(t, "zsh", "zsh")
	script := completionScript(t, "zsh")
	shell(t, zsh, "-n", script)
	if got := shell(t, zsh, "-f", "-c", "autoload -U compinit; compinit -u -D; source "+script+"; print $_comps[orchestrate]"); got != "_orchestrate" {
		t.Fatalf("after compinit and source, $_comps[orchestrate] = %q", got)
	}
	stubs := `compadd() { [[ $1 == -a ]] && print -l -- ${(P)2}; }
_describe() { local d; for d in ${(P)4}; do print -- ${d%%:*}; done; }
_files() { :; }
`
	for _, tc := range completionCases {
		t.Run(tc.name, func(t *testing.T) {
			words := strings.Fields(tc.line)
			if strings.HasSuffix(tc.line, " ") {
				words = append(words, "''")
			}
			cur := words[len(words)-1]
			prog := "autoload -U compinit; compinit -u -D; source " + script + "\n" + stubs +
				"words=(" + strings.Join(words, " ") + "); CURRENT=${#words}\n_orchestrate | grep -- '^" + strings.Trim(cur, "'") + "' | sort"
			got := shell(t, zsh, "-f", "-c", prog)
			if got != strings.Join(tc.want, "\n") {
				t.Errorf("%q completes to %q, want %q", tc.line, got, tc.want)
			}
		})
	}
}
