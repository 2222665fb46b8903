package cli

import (
	"fmt"
	"io"
	"strings"
	"unicode/utf8"
)

// WriteHelp writes h as `--help` shows it, every line at most width
// columns: paragraphs filled, each flag's description beside it with a
// hanging indent (or under it, when the flag is wider than the column).
func WriteHelp(w io.Writer, h *Help, width int) error {
	var b strings.Builder
	section := func(title string) { fmt.Fprintf(&b, "\n%s:\n", title) }
	b.WriteString("Usage:\n")
	for _, s := range h.Synopsis {
		b.WriteString(hanging("  ", "      ", s, width))
	}
	if len(h.Description) > 0 {
		b.WriteString("\n")
		for i, p := range h.Description {
			if i > 0 {
				b.WriteString("\n")
			}
			b.WriteString(hanging("", "", p, width))
		}
	}
	if len(h.Commands) > 0 {
		section("Commands")
		writeColumns(&b, h.Commands, width)
	}
	if rows := h.helpRows(); len(rows) > 0 {
		section("Flags")
		items := make([]Item, len(rows))
		for i, r := range rows {
			items[i] = Item{Term: r.text(), Text: r.usage}
		}
		writeColumns(&b, items, width)
	}
	section("Exit status")
	writeColumns(&b, h.ExitStatus(), width)
	if len(h.Examples) > 0 {
		section("Examples")
		for i, e := range h.Examples {
			if i > 0 {
				b.WriteString("\n")
			}
			b.WriteString(hanging("  # ", "  # ", e.Comment, width))
			b.WriteString(commandLines(e.Command, width))
		}
	}
	if len(h.SeeAlso) > 0 {
		section("See also")
		b.WriteString(hanging("  ", "  ", strings.Join(h.SeeAlso, ", "), width))
	}
	// The texts are the program's, but flag defaults may come from the
	// environment.
	_, err := io.WriteString(w, printable(b.String(), true))
	return err
}

// text is the flag as the left column shows it: "  -o, --out string".
func (r flagRow) text() string {
	s := "      --" + r.long
	if r.short != "" {
		s = "  -" + r.short + ", --" + r.long
	}
	if r.arg != "" {
		s += " " + r.arg
	}
	return s
}

// writeColumns writes items as a two-column list: the term (indented two
// columns unless it brings its own indent), then its text filled to width
// with a hanging indent at the text's column. A term wider than the column
// puts its text on the next line.
func writeColumns(b *strings.Builder, items []Item, width int) {
	terms := make([]string, len(items))
	col := 0
	for i, it := range items {
		terms[i] = it.Term
		if !strings.HasPrefix(terms[i], " ") {
			terms[i] = "  " + terms[i]
		}
		col = max(col, utf8.RuneCountInString(terms[i])+2)
	}
	col = min(col, width*2/5)
	indent := strings.Repeat(" ", col)
	for i, it := range items {
		term := terms[i]
		n := utf8.RuneCountInString(term)
		if n+2 > col {
			body := strings.TrimLeft(term, " ")
			lead := term[:len(term)-len(body)]
			b.WriteString(hanging(lead, lead+"    ", body, width))
			b.WriteString(hanging(indent, indent, it.Text, width))
			continue
		}
		b.WriteString(hanging(term+strings.Repeat(" ", col-n), indent, it.Text, width))
	}
}

// hanging fills text to width: the first line after first, the others
// after rest. A word longer than a whole line is cut, so that no line is
// ever wider than width.
func hanging(first, rest, text string, width int) string {
	var b strings.Builder
	line, prefix := first, first
	empty := true
	for _, word := range strings.Fields(text) {
		for word != "" {
			avail := width - utf8.RuneCountInString(line)
			need := utf8.RuneCountInString(word)
			if !empty {
				need++
			}
			if need <= avail {
				if !empty {
					line += " "
				}
				line += word
				empty, word = false, ""
				continue
			}
			if empty && (line == rest || need > width-utf8.RuneCountInString(rest)) {
				// Not even a whole line holds it: cut it.
				head, tail := splitRunes(word, max(avail, 1))
				line += head
				word = tail
			}
			b.WriteString(strings.TrimRight(line, " ") + "\n")
			line, prefix, empty = rest, rest, true
		}
	}
	if !empty || line != prefix {
		b.WriteString(strings.TrimRight(line, " ") + "\n")
	} else if first != "" && strings.TrimSpace(first) != "" {
		b.WriteString(strings.TrimRight(first, " ") + "\n")
	}
	return b.String()
}

// commandLines writes a command indented two columns, broken between
// shell words (never inside quotes) with a trailing " \\" so that the
// lines still paste into a shell as one command.
func commandLines(cmd string, width int) string {
	var b strings.Builder
	line := "  "
	for i, w := range shellWords(cmd) {
		if i > 0 && utf8.RuneCountInString(line)+1+utf8.RuneCountInString(w)+2 > width {
			b.WriteString(line + " \\\n")
			line = "      "
		} else if i > 0 {
			line += " "
		}
		line += w
	}
	if utf8.RuneCountInString(line) > width {
		// One word wider than the screen: the width wins.
		return b.String() + hanging("  ", "  ", strings.TrimSpace(line), width)
	}
	return b.String() + line + "\n"
}

// shellWords splits cmd at spaces outside single and double quotes.
func shellWords(cmd string) []string {
	var words []string
	var cur strings.Builder
	var quote rune
	for _, r := range cmd {
		switch {
		case quote != 0:
			if r == quote {
				quote = 0
			}
		case r == '\'' || r == '"':
			quote = r
		case r == ' ':
			if cur.Len() > 0 {
				words = append(words, cur.String())
				cur.Reset()
			}
			continue
		}
		cur.WriteRune(r)
	}
	if cur.Len() > 0 {
		words = append(words, cur.String())
	}
	return words
}

// splitRunes cuts s after n runes.
func splitRunes(s string, n int) (string, string) {
	i := 0
	for j := range s {
		if i == n {
			return s[:j], s[j:]
		}
		i++
	}
	return s, ""
}
