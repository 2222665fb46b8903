package cli

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/spf13/pflag"

	"github.com/jiocloud/orchestrate/internal/exitcode"
	"github.com/jiocloud/orchestrate/internal/term"
)

// Program is a binary as its help, man pages and completion scripts see
// it. Every binary answers these the same way, before its own parsing
// (Meta):
//
//	NAME help [SUBCOMMAND]          the help, as NAME [SUBCOMMAND] --help
//	NAME completion bash|zsh|fish   the shell completion script
//	NAME help --man [SUBCOMMAND]    the man page in roff (hidden: packaging)
//	NAME help --man-dir DIR         every man page of NAME into DIR (hidden)
type Program struct {
	// Name is the binary's name.
	Name string
	// Help returns the help of the program (sub "") or of one of its
	// subcommands; ok is false for a subcommand it does not have.
	Help func(sub string) (h *Help, ok bool)
	// Subcommands are the names Help answers for besides "".
	Subcommands []string
}

// The subcommands every Program has.
const (
	completionCmd = "completion"
	helpCmd       = "help"
)

// allSubcommands are the program's subcommands and the shared ones.
func (p *Program) allSubcommands() []string {
	return append(slices.Clone(p.Subcommands), completionCmd, helpCmd)
}

// help is the help of sub, the shared subcommands' included; the
// program's own lists them among its commands.
func (p *Program) help(sub string) (*Help, bool) {
	switch sub {
	case completionCmd:
		return completionHelp(p.Name), true
	case helpCmd:
		return helpHelp(p), true
	}
	h, ok := p.Help(sub)
	if !ok || sub != "" {
		return h, ok
	}
	top := *h
	top.Commands = append(slices.Clone(h.Commands),
		Item{Term: completionCmd, Text: completionHelp(p.Name).Summary},
		Item{Term: helpCmd, Text: helpHelp(p).Summary})
	return &top, true
}

// Meta answers `help` and `completion` when args start with one, and
// reports whether it did. Its error is a usage error (exit 2), written
// nothing, or a failed write.
func (p *Program) Meta(args []string, stdout io.Writer) (bool, error) {
	if len(args) == 0 {
		return false, nil
	}
	switch args[0] {
	case completionCmd:
		return true, p.runCompletion(args[1:], stdout)
	case helpCmd:
		return true, p.runHelp(args[1:], stdout)
	}
	return false, nil
}

// PrintHelp writes the help of sub ("" the program's) to w, wrapped to
// w's width (internal/term).
func (p *Program) PrintHelp(w io.Writer, sub string) error {
	h, ok := p.help(sub)
	if !ok {
		return exitcode.Usagef("unknown subcommand %q (see %s --help)", sub, p.Name)
	}
	return WriteHelp(w, h, term.Width(w))
}

func (p *Program) runCompletion(args []string, stdout io.Writer) error {
	fs := pflag.NewFlagSet(p.Name+" completion", pflag.ContinueOnError)
	fs.SetOutput(io.Discard)
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, pflag.ErrHelp) {
			return p.PrintHelp(stdout, completionCmd)
		}
		return exitcode.Usagef("completion: %v", err)
	}
	if fs.NArg() != 1 || !slices.Contains(Shells, fs.Arg(0)) {
		return exitcode.Usagef("completion: name the shell: %s completion bash|zsh|fish", p.Name)
	}
	var b bytes.Buffer
	if err := WriteCompletion(&b, p, fs.Arg(0)); err != nil {
		return err
	}
	_, err := stdout.Write(b.Bytes())
	return err
}

func (p *Program) runHelp(args []string, stdout io.Writer) error {
	fs := pflag.NewFlagSet(p.Name+" help", pflag.ContinueOnError)
	fs.SetOutput(io.Discard)
	man := fs.Bool("man", false, "print the man page (roff)")
	manDir := fs.String("man-dir", "", "write every man page into this directory")
	_ = fs.MarkHidden("man")
	_ = fs.MarkHidden("man-dir")
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, pflag.ErrHelp) {
			return p.PrintHelp(stdout, helpCmd)
		}
		return exitcode.Usagef("help: %v", err)
	}
	if fs.NArg() > 1 {
		return exitcode.Usagef("help: one subcommand at most, got %q", strings.Join(fs.Args(), " "))
	}
	sub := fs.Arg(0)
	if _, ok := p.help(sub); !ok {
		return exitcode.Usagef("help: unknown subcommand %q (see %s --help)", sub, p.Name)
	}
	switch {
	case *manDir != "":
		return p.writeManDir(*manDir)
	case *man:
		h, _ := p.help(sub)
		return WriteMan(stdout, h, p.source())
	}
	return p.PrintHelp(stdout, sub)
}

// source is the man pages' footer: the program and its version.
func (p *Program) source() string { return "orchestrate " + Build().Version }

// writeManDir writes NAME.1 and NAME-SUB.1 for every subcommand but help
// into dir, which must exist. Every page is rendered before the first is
// written.
func (p *Program) writeManDir(dir string) error {
	if fi, err := os.Stat(dir); err != nil || !fi.IsDir() {
		return exitcode.Usagef("help --man-dir %q: not a directory", dir)
	}
	pages := map[string][]byte{}
	for _, sub := range append([]string{""}, p.allSubcommands()...) {
		if sub == helpCmd {
			continue
		}
		h, _ := p.help(sub)
		var b bytes.Buffer
		if err := WriteMan(&b, h, p.source()); err != nil {
			return err
		}
		pages[ManName(h.Name)+".1"] = b.Bytes()
	}
	for name, b := range pages {
		if err := os.WriteFile(filepath.Join(dir, name), b, 0o644); err != nil {
			return fmt.Errorf("help --man-dir: %w", err)
		}
	}
	return nil
}

// completionHelp is the help of NAME completion.
func completionHelp(name string) *Help {
	return &Help{
		Name:     name + " " + completionCmd,
		Summary:  "print the shell completion script of " + name,
		Synopsis: []string{name + " completion bash|zsh|fish"},
		Description: []string{
			"Prints a script that completes " + name + "'s subcommands, flags and the values of flags that take a fixed set of them, for bash, zsh or fish. The Debian package installs all three where the shells look for them; this is for a shell that does not load those, or for " + name + " installed by hand.",
		},
		SeeAlso: []string{name + "(1)"},
		Examples: []Example{
			{"Complete " + name + " in the current bash", "source <(" + name + " completion bash)"},
			{"Install it for zsh, in a directory of $fpath", name + " completion zsh > ~/.zfunc/_" + name},
			{"Install it for fish", name + " completion fish > ~/.config/fish/completions/" + name + ".fish"},
		},
		Args: [][]string{Shells},
	}
}

// helpHelp is the help of NAME help.
func helpHelp(p *Program) *Help {
	syn := p.Name + " help"
	if len(p.Subcommands) > 0 {
		syn += " [SUBCOMMAND]"
	}
	return &Help{
		Name:     p.Name + " " + helpCmd,
		Summary:  "print the help of " + p.Name + " or of one of its subcommands",
		Synopsis: []string{syn},
		SeeAlso:  []string{p.Name + "(1)"},
		Examples: []Example{{"The help of " + p.Name, p.Name + " help"}},
		Args:     [][]string{slices.Concat(p.Subcommands, []string{completionCmd})},
	}
}
