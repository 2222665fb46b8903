package cli

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/spf13/pflag"

	"github.com/jiocloud/orchestrate/internal/testutil"
)

// hostileHelp is a help whose texts hold what roff and terminals read as
// commands: a leading dot and quote, backslashes, quotes, hyphens, an
// escape sequence, and a word longer than any line.
func hostileHelp() *Help {
	fs := pflag.NewFlagSet("x", pflag.ContinueOnError)
	fs.String("dir", `C:\temp`, ".so /etc/passwd at the start, \\fB not bold")
	fs.Bool("dry-run", false, `'quoted "twice" at the start`)
	return &Help{
		Name: "prog sub", Summary: `a "summary" with a \ backslash`,
		Synopsis:    []string{"prog sub [flags] ARG"},
		Description: []string{".TH at the start of a paragraph", "an escape \x1b[31mred\x1b[0m and " + strings.Repeat("x", 130)},
		Flags:       fs,
		Exit:        map[int]string{1: "'no"},
		Examples:    []Example{{Comment: ".nf comment", Command: `prog sub --dir 'C:\temp' -- -x`}},
		SeeAlso:     []string{"prog(1)", "/usr/share/doc/prog/x.md.gz"},
	}
}

// No line of the help is wider than the width, whatever the text, and no
// control character reaches the terminal.
func TestWriteHelpWidth(t *testing.T) {
	for _, width := range []int{40, 60, 80, 120} {
		var b bytes.Buffer
		if err := WriteHelp(&b, hostileHelp(), width); err != nil {
			t.Fatal(err)
		}
		for _, l := range strings.Split(b.String(), "\n") {
			if n := len([]rune(l)); n > width {
				t.Errorf("width %d: line of %d: %q", width, n, l)
			}
		}
		if strings.ContainsRune(b.String(), '\x1b') {
			t.Errorf("width %d: an escape character reached the output", width)
		}
	}
}

// Roff escapes the characters roff reads as commands.
func TestRoff(t *testing.T) {
	for in, want := range map[string]string{
		`.TH x`:      `\&.TH x`,
		`'x`:         `\&'x`,
		`a\b`:        `a\eb`,
		`--flag`:     `\-\-flag`,
		"two\nlines": "two lines",
		"esc\x1b[0m": "esc?[0m",
		`say "it"`:   `say "it"`,
	} {
		if got := Roff(in); got != want {
			t.Errorf("Roff(%q) = %q, want %q", in, got, want)
		}
	}
}

// man renders the hostile page without a warning, and every text comes
// out as written.
func TestWriteManRenders(t *testing.T) {
	man := testutil.RequireTool(t, "man", "man-db")
	page := filepath.Join(t.TempDir(), "prog-sub.1")
	var b bytes.Buffer
	if err := WriteMan(&b, hostileHelp(), "orchestrate test"); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(page, b.Bytes(), 0o644); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(man, "--warnings", "-E", "ascii", "-l", page)
	cmd.Env = append(os.Environ(), "MANWIDTH=200")
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil || stderr.Len() > 0 {
		t.Fatalf("man -l: %v\n%s\n%s", err, stderr.String(), b.String())
	}
	out := stdout.String()
	for _, want := range []string{"prog-sub - a \"summary\" with a \\ backslash", ".TH at the start", ".so /etc/passwd at the start, \\fB not bold",
		"'quoted \"twice\"", `--dir 'C:\temp' -- -x`, ".nf comment", "--dry-run", "EXIT STATUS", "'no", "SEE ALSO"} {
		if !strings.Contains(out, want) {
			t.Errorf("the rendered page lacks %q:\n%s", want, out)
		}
	}
}

// A flag value that a script could not hold unquoted is refused, not
// written.
func TestCompletionRefusesUnsafeWords(t *testing.T) {
	for _, bad := range []string{"a b", "$(reboot)", "x;y", "it's"} {
		fs := pflag.NewFlagSet("x", pflag.ContinueOnError)
		fs.String("mode", "", "mode")
		SetValues(fs, "mode", "ok", bad)
		p := &Program{Name: "prog", Help: func(string) (*Help, bool) { return &Help{Name: "prog", Flags: fs}, true }}
		var b bytes.Buffer
		if err := WriteCompletion(&b, p, "bash"); err == nil || b.Len() > 0 {
			t.Errorf("value %q: err %v, wrote %d bytes; want an error and nothing", bad, err, b.Len())
		}
	}
}

// TestPrintableEscapesControlAndFormat: a name from outside (a mistyped
// subcommand, a value from Consul) can neither drive the terminal nor
// reorder the line with a bidirectional override, as in term.OneLine.
func TestPrintableEscapesControlAndFormat(t *testing.T) {
	for in, want := range map[string]string{
		"scale":                  "scale",
		"a\x1b[2Jb":              "a?[2Jb",
		"line\nforged":           "line?forged",
		"c1\u009bcsi":            "c1?csi",
		"evil\u202etxt.exe":      "evil?txt.exe",
		"zero\u200bwidth":        "zero?width",
		"caf\u00e9 \u4e16\u754c": "caf\u00e9 \u4e16\u754c",
	} {
		if got := Printable(in); got != want {
			t.Errorf("Printable(%q) = %q, want %q", in, got, want)
		}
	}
}
