package cli

import (
	"sort"
	"strings"
	"unicode"

	"github.com/spf13/pflag"

	"github.com/jiocloud/orchestrate/internal/exitcode"
)

// Help is what a binary or one of its subcommands says about itself, held
// as data and rendered twice: as `--help` (WriteHelp, wrapped to the
// terminal) and as a man page (WriteMan, roff). Its options come from the
// FlagSet the command parses, so neither rendering drifts from the code.
type Help struct {
	// Name is the command as typed: "orchestrate", "orchestrate status",
	// "reaper identity".
	Name string
	// Summary is one line without a full stop: the man page's NAME line
	// and the command's line in its parent's list.
	Summary string
	// Synopsis are the usage lines, each starting with Name.
	Synopsis []string
	// Description is paragraphs of plain text.
	Description []string
	// Commands are the subcommands, each with its summary (orchestrate's).
	Commands []Item
	// Flags are the command's flags; hidden ones are left out.
	Flags *pflag.FlagSet
	// Exit overrides the meaning of an exit status where the command gives
	// it a specific one (verify-hosts: 1 = hosts not on the version); the
	// others keep the project's meaning (ExitStatus).
	Exit map[int]string
	// Examples are invocations an operator types, each with a comment.
	Examples []Example
	// SeeAlso names related man pages ("orchestrate(1)") and documents.
	SeeAlso []string
	// Args are the values each positional argument may take, for shell
	// completion; nil for an argument with no fixed set.
	Args [][]string
}

// Item is a term and its text: a subcommand, an exit status.
type Item struct {
	Term, Text string
}

// Example is one invocation with a one-line comment saying what it does.
type Example struct {
	Comment, Command string
}

// exitMeanings is the project's exit status table, every binary's.
var exitMeanings = map[int]string{
	exitcode.OK:          "done, or the answer is yes",
	exitcode.No:          "the answer is no",
	exitcode.Usage:       "usage or input error (bad flags, arguments or files), with a message naming what is wrong; nothing was written",
	exitcode.Unavailable: "Consul or the cloud could not be reached or refused the request",
}

// ExitStatus is the help's exit status table: the project's meanings with
// the command's own in their place.
func (h *Help) ExitStatus() []Item {
	codes := make([]int, 0, len(exitMeanings))
	for c := range exitMeanings {
		codes = append(codes, c)
	}
	sort.Ints(codes)
	out := make([]Item, 0, len(codes))
	for _, c := range codes {
		text := exitMeanings[c]
		if s, ok := h.Exit[c]; ok {
			text = s
		}
		out = append(out, Item{Term: string(rune('0' + c)), Text: text})
	}
	return out
}

// flagRow is one flag as both renderings show it.
type flagRow struct {
	// short and long are the names without dashes; arg names the value
	// ("" for a boolean flag).
	short, long, arg string
	usage            string
}

// flagRows lists fs's visible flags in its order (sorted unless the
// FlagSet says otherwise), with the default appended to the usage.
func flagRows(fs *pflag.FlagSet) []flagRow {
	if fs == nil {
		return nil
	}
	var rows []flagRow
	fs.VisitAll(func(f *pflag.Flag) {
		if f.Hidden {
			return
		}
		arg, usage := pflag.UnquoteUsage(f)
		if f.NoOptDefVal != "" && f.Value.Type() == "bool" {
			arg = ""
		}
		if d := defaultText(f); d != "" {
			usage += " (default " + d + ")"
		}
		rows = append(rows, flagRow{short: f.Shorthand, long: f.Name, arg: arg, usage: usage})
	})
	return rows
}

// helpRows are h's flags as both renderings list them: the FlagSet's, and
// --help and (for the program itself) --version, which every binary answers
// outside it.
func (h *Help) helpRows() []flagRow {
	rows := flagRows(h.Flags)
	rows = append(rows, flagRow{short: "h", long: "help", usage: "print this help"})
	if !strings.Contains(h.Name, " ") {
		rows = append(rows, flagRow{long: "version", usage: "print the version, the commit and the Go version it was built with"})
	}
	return rows
}

// defaultText is a flag's default as help shows it, "" when it is the
// zero value or the usage already says it.
func defaultText(f *pflag.Flag) string {
	switch f.DefValue {
	case "", "false", "0", "[]", "0s":
		return ""
	}
	if strings.Contains(f.Usage, "default") {
		return ""
	}
	if f.Value.Type() == "string" {
		return `"` + f.DefValue + `"`
	}
	return f.DefValue
}

// Printable replaces the control and format characters of s (a terminal
// escape sequence, a newline, a bidirectional override such as U+202E)
// with '?': text that came from outside the program (a default from the
// environment, a name from Consul, a mistyped subcommand) cannot drive
// the terminal, forge a line or reorder what the operator reads. It draws
// the line where term.OneLine does.
func Printable(s string) string { return printable(s, false) }

// printable is Printable, keeping newlines when keepNewlines.
func printable(s string, keepNewlines bool) string {
	return strings.Map(func(r rune) rune {
		if r == '\n' && keepNewlines {
			return r
		}
		if unicode.IsControl(r) || unicode.Is(unicode.Cf, r) {
			return '?'
		}
		return r
	}, s)
}
