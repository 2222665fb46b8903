package term

import (
	"fmt"
	"strconv"
	"strings"
	"unicode"
	"unicode/utf8"
)

// OneLine makes a string safe for one line of a terminal: white space
// runs become one space, and every other control or format character (an
// escape sequence, a bidirectional override) is shown escaped, so text
// that came from elsewhere (a record a node wrote in Consul, a remote
// side's error) cannot move the cursor, hide text or redraw the
// operator's screen. Invalid UTF-8 is shown escaped too.
func OneLine(s string) string {
	var b strings.Builder
	for _, f := range strings.Fields(s) {
		if b.Len() > 0 {
			b.WriteByte(' ')
		}
		for i := 0; i < len(f); {
			r, n := utf8.DecodeRuneInString(f[i:])
			switch {
			case r == utf8.RuneError && n == 1:
				fmt.Fprintf(&b, "\\x%02x", f[i])
			case unicode.IsControl(r) || unicode.Is(unicode.Cf, r):
				q := strconv.QuoteRuneToASCII(r)
				b.WriteString(q[1 : len(q)-1])
			default:
				b.WriteString(f[i : i+n])
			}
			i += n
		}
	}
	return b.String()
}
