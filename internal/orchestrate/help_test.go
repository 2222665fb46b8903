package orchestrate

import (
	"bytes"
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/jiocloud/orchestrate/internal/store"
	"github.com/jiocloud/orchestrate/internal/testutil"
)

// Every subcommand has its help entry (a short line and an example), and
// help.go names no command that does not exist.
func TestEveryCommandHasHelp(t *testing.T) {
	names := map[string]bool{}
	for _, c := range commands() {
		names[c.name] = true
		h, ok := helps[c.name]
		if !ok || h.short == "" || len(h.examples) == 0 {
			t.Errorf("%s: no help entry with a short line and an example in help.go", c.name)
		}
		if strings.HasSuffix(h.short, ".") {
			t.Errorf("%s: the short line %q ends in a full stop (it is the man page's NAME line)", c.name, h.short)
		}
	}
	for name := range helps {
		if !names[name] {
			t.Errorf("help.go has an entry for %q, which is no command", name)
		}
	}
}

// runHelp runs orchestrate with args and returns its stdout, failing on a
// non-zero exit.
func runHelp(t *testing.T, args ...string) string {
	t.Helper()
	var out, errb bytes.Buffer
	if code := Run(context.Background(), args, IO{Stdin: strings.NewReader(""), Stdout: &out, Stderr: &errb}); code != 0 {
		t.Fatalf("orchestrate %s: exit %d: %s", strings.Join(args, " "), code, errb.String())
	}
	return out.String()
}

// Every help, the program's and each subcommand's, fits the terminal: no
// line wider than $COLUMNS at 80 and at 60 columns, and each has its
// sections.
func TestHelpFitsWidth(t *testing.T) {
	subs := append([]string{""}, program().Subcommands...)
	subs = append(subs, "completion", "help")
	for _, width := range []string{"80", "60"} {
		t.Setenv("COLUMNS", width)
		for _, sub := range subs {
			args := []string{"--help"}
			if sub != "" {
				args = []string{sub, "--help"}
			}
			out := runHelp(t, args...)
			for _, l := range strings.Split(out, "\n") {
				if len([]rune(l)) > atoi(width) {
					t.Errorf("orchestrate %s --help at %s columns: line of %d: %q", sub, width, len([]rune(l)), l)
				}
			}
			for _, s := range []string{"Usage:", "Exit status:", "Examples:"} {
				if !strings.Contains(out, s) {
					t.Errorf("orchestrate %s --help lacks %q:\n%s", sub, s, out)
				}
			}
		}
	}
}

func atoi(s string) int {
	n := 0
	for _, r := range s {
		n = n*10 + int(r-'0')
	}
	return n
}

// A subcommand's help shows its flags (from its FlagSet), its own meaning
// of an exit status and its examples; `help SUB` is `SUB --help`.
func TestSubcommandHelp(t *testing.T) {
	t.Setenv("COLUMNS", "80")
	out := runHelp(t, "verify-hosts", "--help")
	for _, want := range []string{"orchestrate verify-hosts [flags] VERSION [HOST...]", "--from-file string", "--consul-addr string",
		"1  some hosts do not run VERSION", "orchestrate verify-hosts 2026-11-27.1 --from-file hosts.txt"} {
		if !strings.Contains(out, want) {
			t.Errorf("verify-hosts --help lacks %q:\n%s", want, out)
		}
	}
	if got := runHelp(t, "help", "verify-hosts"); got != out {
		t.Errorf("help verify-hosts differs from verify-hosts --help:\n%s", got)
	}
	if top := runHelp(t, "--help"); !strings.Contains(top, "completion") || strings.Contains(top, "--man") {
		t.Errorf("orchestrate --help must list completion and hide --man:\n%s", top)
	}
}

// Bad input to help and completion is a usage error that writes nothing.
func TestHelpBadInput(t *testing.T) {
	for _, args := range [][]string{
		{"completion"}, {"completion", "tcsh"}, {"completion", "bash", "zsh"},
		{"help", "nosuch"}, {"help", "--man", "status", "scale"}, {"help", "--man-dir", "/nonexistent/dir"},
		{"help", "--nosuchflag"},
	} {
		var out, errb bytes.Buffer
		code := Run(context.Background(), args, IO{Stdin: strings.NewReader(""), Stdout: &out, Stderr: &errb})
		if code != 2 || out.Len() != 0 || errb.Len() == 0 {
			t.Errorf("orchestrate %q: exit %d, stdout %q, stderr %q; want 2, nothing written, a message", args, code, out.String(), errb.String())
		}
	}
}

// Each example of a subcommand uses only flags it has.
func TestExamplesUseRealFlags(t *testing.T) {
	for _, c := range commands() {
		fs, _, _ := newFlagSet(c)
		for _, e := range helps[c.name].examples {
			words := strings.Fields(e.command)
			i := slices.Index(words, "orchestrate")
			if i < 0 || i+1 >= len(words) || words[i+1] != c.name {
				t.Errorf("%s: example %q does not run orchestrate %s", c.name, e.command, c.name)
				continue
			}
			for _, w := range shellFields(e.command)[i+2:] {
				if name, ok := strings.CutPrefix(w, "--"); ok {
					name, _, _ = strings.Cut(name, "=")
					if fs.Lookup(name) == nil {
						t.Errorf("%s: example %q uses --%s, which it does not have", c.name, e.command, name)
					}
				}
			}
		}
	}
}

// shellFields splits a command into words, a quoted string being one.
func shellFields(s string) []string {
	var out []string
	var cur strings.Builder
	var q rune
	for _, r := range s {
		switch {
		case q != 0 && r == q:
			q = 0
		case q != 0:
			cur.WriteRune(r)
		case r == '\'' || r == '"':
			q = r
		case r == ' ':
			if cur.Len() > 0 {
				out = append(out, cur.String())
				cur.Reset()
			}
		default:
			cur.WriteRune(r)
		}
	}
	return append(out, cur.String())
}

// The action words completion offers for a subcommand's first argument
// are the ones its usage names: completion cannot drift from the command.
func TestCompletionArgsMatchUsage(t *testing.T) {
	for _, c := range commands() {
		for i, vals := range helps[c.name].args {
			for _, v := range vals {
				known := slices.Contains(categories, v) || slices.Contains(store.States, v)
				if i == 0 && !known && !strings.Contains(" "+strings.NewReplacer("|", " ").Replace(c.usage)+" ", " "+v+" ") {
					t.Errorf("%s: completion offers %q, which its usage %q does not name", c.name, v, c.usage)
				}
			}
		}
	}
}

// writeManPages writes every man page of orchestrate into a directory.
func writeManPages(t *testing.T) string {
	t.Helper()
	dir := t.TempDir()
	runHelp(t, "help", "--man-dir", dir)
	return dir
}

// Every man page renders with man-db without a warning, and has each
// section; a hyphen and a backslash of the text survive as written.
func TestManPages(t *testing.T) {
	man := testutil.RequireTool(t, "man", "man-db")
	dir := writeManPages(t)
	pages, _ := filepath.Glob(filepath.Join(dir, "*.1"))
	if want := len(commands()) + 2; len(pages) != want {
		t.Fatalf("%d man pages, want %d (orchestrate, completion and one per subcommand)", len(pages), want)
	}
	for _, p := range pages {
		cmd := exec.Command(man, "--warnings", "-E", "UTF-8", "-l", p)
		cmd.Env = append(os.Environ(), "MANWIDTH=80")
		var stdout, stderr bytes.Buffer
		cmd.Stdout, cmd.Stderr = &stdout, &stderr
		if err := cmd.Run(); err != nil || stderr.Len() > 0 {
			t.Errorf("man -l %s: %v\n%s", filepath.Base(p), err, stderr.String())
		}
		for _, s := range []string{"NAME", "SYNOPSIS", "DESCRIPTION", "EXIT STATUS", "EXAMPLES", "SEE ALSO"} {
			if !strings.Contains(stdout.String(), "\n"+s+"\n") {
				t.Errorf("%s has no %s section:\n%s", filepath.Base(p), s, stdout.String())
			}
		}
	}
	out := manText(t, man, filepath.Join(dir, "orchestrate-verify-hosts.1"))
	for _, want := range []string{"orchestrate-verify-hosts - check that hosts run a version", "--from-file string", "--consul-addr"} {
		if !strings.Contains(out, want) {
			t.Errorf("orchestrate-verify-hosts(1) lacks %q:\n%s", want, out)
		}
	}
}

// manText is a man page as man renders it, in ASCII.
func manText(t *testing.T, man, page string) string {
	t.Helper()
	cmd := exec.Command(man, "-E", "ascii", "-l", page)
	cmd.Env = append(os.Environ(), "MANWIDTH=80", "MAN_KEEP_FORMATTING=")
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("man -l %s: %v", page, err)
	}
	return string(out)
}
