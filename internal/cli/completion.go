package cli

import (
	"fmt"
	"io"
	"regexp"
	"strings"

	"github.com/spf13/pflag"
)

// Shells are the shells `completion` writes a script for.
var Shells = []string{"bash", "zsh", "fish"}

// valuesAnnotation is the pflag annotation holding the values a flag
// takes, for completion (SetValues).
const valuesAnnotation = "orchestrate_values"

// SetValues records the values flag name of fs takes (--log-format text
// or json), which the completion scripts offer. It panics on a flag fs
// does not have: a programming error the tests of every binary meet.
func SetValues(fs *pflag.FlagSet, name string, values ...string) {
	if err := fs.SetAnnotation(name, valuesAnnotation, values); err != nil {
		panic(err)
	}
}

// compCmd is a command as a completion script sees it.
type compCmd struct {
	name, summary string // name is "" for the program itself
	flags         []compFlag
	args          [][]string
}

// compFlag is one flag: its names ("--out", "-o"), whether it takes a
// value, the values it takes when they are a fixed set, its description.
type compFlag struct {
	names  []string
	valued bool
	values []string
	usage  string
}

// shellWord is what a name or value may hold to be written into a script
// unquoted; the generator refuses anything else rather than quote it.
var shellWord = regexp.MustCompile(`^[A-Za-z0-9_.,/@%+-]+$`)

// compModel is the program's commands, the program itself first, with
// every word checked.
func compModel(p *Program) ([]compCmd, error) {
	var cmds []compCmd
	for _, sub := range append([]string{""}, p.allSubcommands()...) {
		h, ok := p.help(sub)
		if !ok {
			return nil, fmt.Errorf("completion: no help for %q", sub)
		}
		c := compCmd{name: sub, summary: h.Summary, args: h.Args, flags: compFlags(h)}
		if err := c.check(); err != nil {
			return nil, err
		}
		cmds = append(cmds, c)
	}
	return cmds, nil
}

// compFlags lists h's flags for completion.
func compFlags(h *Help) []compFlag {
	var out []compFlag
	for _, r := range h.helpRows() {
		f := compFlag{names: []string{"--" + r.long}, valued: r.arg != "", usage: r.usage}
		if r.short != "" {
			f.names = append(f.names, "-"+r.short)
		}
		if fl := lookup(h.Flags, r.long); fl != nil {
			f.values = fl.Annotations[valuesAnnotation]
		}
		out = append(out, f)
	}
	return out
}

// check refuses a word a script could not hold unquoted.
func (c compCmd) check() error {
	words := []string{}
	if c.name != "" {
		words = append(words, c.name)
	}
	for _, f := range c.flags {
		words = append(words, f.names...)
		words = append(words, f.values...)
	}
	for _, a := range c.args {
		words = append(words, a...)
	}
	for _, w := range words {
		if !shellWord.MatchString(w) {
			return fmt.Errorf("completion: %q cannot be completed (want letters, digits and _.,/@%%+-)", w)
		}
	}
	return nil
}

// valued lists the names of c's flags that take a value.
func (c compCmd) valued() []string {
	var out []string
	for _, f := range c.flags {
		if f.valued {
			out = append(out, f.names...)
		}
	}
	return out
}

// flagNames lists the names of all c's flags, long ones only.
func (c compCmd) flagNames() []string {
	out := make([]string, len(c.flags))
	for i, f := range c.flags {
		out[i] = f.names[0]
	}
	return out
}

// subNames lists the subcommands' names.
func subNames(cmds []compCmd) []string {
	var out []string
	for _, c := range cmds[1:] {
		out = append(out, c.name)
	}
	return out
}

// funcName is the shell function prefix of program name:
// hiera-services → _hiera_services.
func funcName(name string) string { return "_" + strings.ReplaceAll(name, "-", "_") }

// shortText is a description cut to one short line, for a menu.
func shortText(s string) string {
	s = strings.Join(strings.Fields(Printable(s)), " ")
	if len(s) <= 70 {
		return s
	}
	cut := strings.LastIndex(s[:67], " ")
	if cut < 20 {
		cut = 67
	}
	return s[:cut] + "..."
}

// WriteCompletion writes the completion script of p for shell (bash, zsh
// or fish).
func WriteCompletion(w io.Writer, p *Program, shell string) error {
	cmds, err := compModel(p)
	if err != nil {
		return err
	}
	var b strings.Builder
	switch shell {
	case "bash":
		writeBash(&b, p.Name, cmds)
	case "zsh":
		writeZsh(&b, p.Name, cmds)
	case "fish":
		writeFish(&b, p.Name, cmds)
	default:
		return fmt.Errorf("completion: unknown shell %q (want bash, zsh or fish)", shell)
	}
	_, err = io.WriteString(w, b.String())
	return err
}

// lookup is fs's flag name; nil when fs is nil or has none.
func lookup(fs *pflag.FlagSet, name string) *pflag.Flag {
	if fs == nil {
		return nil
	}
	return fs.Lookup(name)
}
