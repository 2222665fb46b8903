package cli

import (
	"fmt"
	"io"
	"strings"
)

// ManName is the man page name of a command: "orchestrate status" is
// orchestrate-status(1), git's way.
func ManName(command string) string { return strings.Join(strings.Fields(command), "-") }

// WriteMan writes h as a man page in section 1 (roff, the man macros):
// NAME, SYNOPSIS, DESCRIPTION, COMMANDS, OPTIONS (one .TP per flag), EXIT
// STATUS, EXAMPLES, SEE ALSO. source is the footer's source, e.g.
// "orchestrate v1.2.3". Every text is escaped (Roff), so a backslash, a
// leading dot or quote and a hyphen come out as written.
func WriteMan(w io.Writer, h *Help, source string) error {
	var b strings.Builder
	name := ManName(h.Name)
	fmt.Fprintf(&b, ".TH %s 1 \"\" %s \"User Commands\"\n", roffArg(strings.ToUpper(name)), roffArg(source))
	// No hyphenation, ragged right: a flag or $VARIABLE is never cut in
	// two, so what the page shows can be copied.
	b.WriteString(".nh\n.ad l\n")
	b.WriteString(".SH NAME\n" + Roff(name) + " \\- " + Roff(h.Summary) + "\n")
	b.WriteString(".SH SYNOPSIS\n")
	for i, s := range h.Synopsis {
		if i > 0 {
			b.WriteString(".br\n")
		}
		rest, _ := strings.CutPrefix(s, h.Name)
		b.WriteString("\\fB" + Roff(h.Name) + "\\fR" + Roff(rest) + "\n")
	}
	manParagraphs(&b, "DESCRIPTION", h.Description)
	manList(&b, "COMMANDS", h.Commands, true)
	if rows := h.helpRows(); len(rows) > 0 {
		b.WriteString(".SH OPTIONS\n")
		for _, r := range rows {
			term := "\\fB\\-\\-" + Roff(r.long) + "\\fR"
			if r.short != "" {
				term = "\\fB\\-" + Roff(r.short) + "\\fR, " + term
			}
			if r.arg != "" {
				term += " \\fI" + Roff(r.arg) + "\\fR"
			}
			// .br: the description under the flag even when the flag is
			// narrower than the indent (--auto).
			b.WriteString(".TP\n" + term + "\n.br\n" + Roff(r.usage) + "\n")
		}
	}
	manList(&b, "EXIT STATUS", h.ExitStatus(), false)
	if len(h.Examples) > 0 {
		b.WriteString(".SH EXAMPLES\n")
		for _, e := range h.Examples {
			b.WriteString(".PP\n" + Roff(e.Comment) + "\n.PP\n.RS 4\n.nf\n" + Roff(e.Command) + "\n.fi\n.RE\n")
		}
	}
	if len(h.SeeAlso) > 0 {
		b.WriteString(".SH SEE ALSO\n")
		refs := make([]string, len(h.SeeAlso))
		for i, s := range h.SeeAlso {
			refs[i] = manRef(s)
		}
		b.WriteString(strings.Join(refs, ",\n") + "\n")
	}
	_, err := io.WriteString(w, b.String())
	return err
}

// manParagraphs writes a section of filled paragraphs.
func manParagraphs(b *strings.Builder, title string, paras []string) {
	if len(paras) == 0 {
		return
	}
	b.WriteString(".SH " + title + "\n")
	for i, p := range paras {
		if i > 0 {
			b.WriteString(".PP\n")
		}
		b.WriteString(Roff(p) + "\n")
	}
}

// manList writes a section of tagged paragraphs, the terms in bold when
// bold.
func manList(b *strings.Builder, title string, items []Item, bold bool) {
	if len(items) == 0 {
		return
	}
	b.WriteString(".SH " + title + "\n")
	for _, it := range items {
		term := Roff(it.Term)
		if bold {
			term = "\\fB" + term + "\\fR"
		}
		b.WriteString(".TP\n" + term + "\n" + Roff(it.Text) + "\n")
	}
}

// manRef is a SEE ALSO entry: "orchestrate-status(1)" with the name in
// bold, a path or anything else as it is.
func manRef(s string) string {
	if name, sec, ok := strings.Cut(s, "("); ok && strings.HasSuffix(sec, ")") && !strings.ContainsAny(name, " /") {
		return "\\fB" + Roff(name) + "\\fR(" + Roff(sec)
	}
	return Roff(s)
}

// Roff escapes text for a roff text line: a backslash is \e, a hyphen \-
// (so a flag can be searched for and copied), a line starting with a dot
// or a quote (a request) starts with \& instead, and control characters
// (a terminal escape from the environment) become '?'. Newlines are
// spaces: the man macros fill paragraphs anyway.
func Roff(s string) string {
	s = strings.ReplaceAll(s, "\n", " ")
	s = strings.NewReplacer(`\`, `\e`, "-", `\-`).Replace(printable(s, false))
	if strings.HasPrefix(s, ".") || strings.HasPrefix(s, "'") {
		s = `\&` + s
	}
	return s
}

// roffArg is s as a quoted macro argument: Roff's escapes, and a double
// quote doubled, as groff reads it inside quotes.
func roffArg(s string) string {
	return `"` + strings.ReplaceAll(Roff(s), `"`, `""`) + `"`
}
