package orchestrate

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strconv"
	"strings"
	"unicode"
	"unicode/utf8"

	"github.com/spf13/pflag"

	"github.com/jiocloud/orchestrate/internal/exitcode"
	"github.com/jiocloud/orchestrate/internal/term"
)

// What every operator write command shares: the sentence (or JSON) that
// says what it changed, old -> new; and, for the destructive or
// fleet-wide ones, the --reason recorded with the action and the
// confirmation asked on a terminal unless --yes.

// Change is what a write command changed: one key, its value before and
// after. Its JSON is the same for every write command (docs/orchestrate.md,
// "What a write command prints").
type Change struct {
	// Changed is false when the key already held what was asked: nothing
	// was written.
	Changed bool `json:"changed"`
	// Key is the key the change is about (a command that writes companion
	// records in the same transaction, such as scale's override, names
	// its main key).
	Key string `json:"key"`
	// Old and New are the key's value before and after, as stored: a
	// record as its JSON object, a count as a number, a version as a
	// string; null when there was none, or when the key is removed.
	Old any `json:"old"`
	New any `json:"new"`
	// By and Reason are who made the change and why, when the record
	// holds them.
	By     string `json:"by,omitempty"`
	Reason string `json:"reason,omitempty"`

	// subject, oldText, newText and note make the sentence:
	// "<subject>: <old> → <new> (<note>)", or "nothing changed: <subject>
	// is already <new>".
	subject, oldText, newText, note string
}

// printChange prints c: a sentence on stdout, or with --json the Change.
// Everything in the sentence that came from Consul (a name, a reason) is
// made safe for a terminal.
func (e *env) printChange(c Change) error {
	if e.json {
		return e.printJSON(c)
	}
	var line string
	if c.Changed {
		line = fmt.Sprintf("%s: %s → %s", c.subject, c.oldText, c.newText)
	} else {
		line = fmt.Sprintf("nothing changed: %s is already %s", c.subject, c.newText)
	}
	if c.note != "" {
		line += " (" + c.note + ")"
	}
	_, err := fmt.Fprintln(e.Stdout, oneLine(line))
	return err
}

// storedValue is a stored value for Change.Old and New: a JSON record as
// its JSON, anything else (a value written by hand that is no record) as
// a string; nil for none.
func storedValue(data []byte) any {
	switch {
	case data == nil:
		return nil
	case json.Valid(data):
		return json.RawMessage(data)
	}
	return string(data)
}

// quoteReason is a reason as the sentences show it: quoted, so where it
// ends is plain, with anything a terminal would act on escaped.
func quoteReason(r string) string { return strconv.Quote(r) }

// maxReason bounds --reason: it is copied into records the reaper reads
// every cycle, its report and its history; 500 bytes, as a hold's reason,
// is a sentence and a ticket number.
const maxReason = 500

// confirmFlags are the flags of a destructive or fleet-wide command.
type confirmFlags struct {
	reason string
	yes    bool
}

// register adds --reason (what it is recorded with) and --yes to fs.
func (c *confirmFlags) register(fs *pflag.FlagSet, recorded string) {
	fs.StringVar(&c.reason, "reason", "", "why, recorded with "+recorded+" (one line, at most 500 bytes)")
	fs.BoolVar(&c.yes, "yes", false, "do not ask for confirmation (required when stdin is not a terminal)")
}

// checkReason refuses a --reason that is longer than maxReason, not UTF-8,
// or holds a control or format character (a newline, an escape sequence,
// a bidirectional override): it is shown to operators, on terminals, by
// status and the history. required: an empty reason is refused too.
func checkReason(cmd, reason string, required bool) error {
	switch {
	case required && strings.TrimSpace(reason) == "":
		return exitcode.Usagef("%s: --reason is required: who did it and why is what the record is for", cmd)
	case len(reason) > maxReason:
		return exitcode.Usagef("%s: --reason is %d bytes, more than %d: name a ticket instead", cmd, len(reason), maxReason)
	case !utf8.ValidString(reason):
		return exitcode.Usagef("%s: --reason is not valid UTF-8", cmd)
	}
	for i, r := range reason {
		if unicode.IsControl(r) || unicode.Is(unicode.Cf, r) {
			return exitcode.Usagef("%s: --reason holds a control character (%s) at byte %d: give it as one line of plain text", cmd, strconv.QuoteRune(r), i)
		}
	}
	return nil
}

// terminalReader is a stdin that says itself whether it is a terminal
// (tests); any other is asked of the operating system.
type terminalReader interface{ IsTerminal() bool }

// stdinIsTerminal reports whether r, a command's stdin, is a terminal a
// person can answer a question on.
func stdinIsTerminal(r io.Reader) bool {
	if t, ok := r.(terminalReader); ok {
		return t.IsTerminal()
	}
	return term.IsTerminal(r)
}

// errNotConfirmed: the person at the terminal did not confirm.
var errNotConfirmed = errors.New("not confirmed: nothing written")

// confirm asks before a destructive write, unless yes (--yes). On a
// terminal it prints prompt on stderr and reads one line: word, when
// given, must be typed exactly; else y or yes. Any other answer, or the
// end of input, is a no: exit 1, nothing written. Without a terminal (a
// script, Puppet) there is nobody to ask: exit 2 unless --yes.
func (e *env) confirm(cmd string, yes bool, prompt, word string) error {
	if yes {
		return nil
	}
	if !stdinIsTerminal(e.Stdin) {
		return exitcode.Usagef("%s: stdin is not a terminal, so nobody can confirm: add --yes to confirm without a terminal", cmd)
	}
	if word != "" {
		fmt.Fprintf(e.Stderr, "%s Type '%s' to go on: ", prompt, word)
	} else {
		fmt.Fprintf(e.Stderr, "%s Go on? [y/N] ", prompt)
	}
	answer, err := bufio.NewReader(e.Stdin).ReadString('\n')
	if err != nil && !errors.Is(err, io.EOF) {
		return fmt.Errorf("%s: read the answer: %w", cmd, err)
	}
	answer = strings.TrimSpace(answer)
	ok := answer == word
	if word == "" {
		ok = strings.EqualFold(answer, "y") || strings.EqualFold(answer, "yes")
	}
	if !ok {
		if errors.Is(err, io.EOF) && answer == "" {
			fmt.Fprintln(e.Stderr)
		}
		return exitcode.Wrap(exitcode.No, fmt.Errorf("%s: %w", cmd, errNotConfirmed))
	}
	return nil
}
