package sharedstate

import (
	"errors"
	"fmt"
	"strings"
	"unicode"
	"unicode/utf8"
)

// Free text that people write (an override's reason, the actor of a
// change) ends up on operators' terminals and pages: fuseboxctl's tables,
// the audit, the dashboard. A control character in it can rewrite a
// terminal (ESC starts a sequence that clears the screen or recolours what
// follows, CR overwrites the line), and a bidirectional formatting
// character reorders what is shown. Writers refuse such text
// (ValidateText); whatever prints text it did not check itself, such as
// audit entries written before writers refused it, prints it through
// PrintableText.

// ErrUnsafeText is matched (errors.Is) by the errors of ValidateText.
var ErrUnsafeText = errors.New("fusebox: text holds a control character")

// UnsafeRune reports whether r must not appear in text shown to
// operators: control characters (C0 including tab and newline, DEL, C1),
// Unicode line and paragraph separators, bidirectional formatting
// characters (U+061C, U+200E, U+200F, U+202A–U+202E, U+2066–U+2069) and
// utf8.RuneError, which is also what invalid UTF-8 decodes to.
func UnsafeRune(r rune) bool {
	switch {
	case unicode.IsControl(r), r == utf8.RuneError:
		return true
	case r == 0x061C, r == 0x200E, r == 0x200F, r == 0x2028, r == 0x2029:
		return true
	case 0x202A <= r && r <= 0x202E, 0x2066 <= r && r <= 0x2069:
		return true
	}
	return false
}

// ValidateText checks that s, the value of field, is valid UTF-8 without
// an unsafe rune (UnsafeRune). The error names the field, the character
// and its byte offset, and matches ErrUnsafeText.
func ValidateText(field, s string) error {
	for i := 0; i < len(s); {
		r, size := utf8.DecodeRuneInString(s[i:])
		if !UnsafeRune(r) {
			i += size
			continue
		}
		what := fmt.Sprintf("formatting character %U", r)
		switch {
		case r == utf8.RuneError && size <= 1:
			what = fmt.Sprintf("invalid UTF-8 byte %#02x", s[i])
		case unicode.IsControl(r):
			what = fmt.Sprintf("control character %U", r)
		}
		return fmt.Errorf("%w: %s: %s at byte %d (write printable text: no tab, newline, escape or direction mark)", ErrUnsafeText, field, what, i)
	}
	return nil
}

// PrintableText returns s with every unsafe rune (UnsafeRune) written as
// an escape a terminal shows as text: \x1b, \r, \n, \t, \u202e; a byte of
// invalid UTF-8 as \xff. Text without one is returned as it is.
func PrintableText(s string) string {
	if !hasUnsafe(s) {
		return s
	}
	var b strings.Builder
	b.Grow(len(s) + 8)
	for i := 0; i < len(s); {
		r, size := utf8.DecodeRuneInString(s[i:])
		switch {
		case r == utf8.RuneError && size <= 1:
			fmt.Fprintf(&b, `\x%02x`, s[i])
		case !UnsafeRune(r):
			b.WriteString(s[i : i+size])
		case r == '\n':
			b.WriteString(`\n`)
		case r == '\r':
			b.WriteString(`\r`)
		case r == '\t':
			b.WriteString(`\t`)
		case r < 0x100:
			fmt.Fprintf(&b, `\x%02x`, r)
		default:
			fmt.Fprintf(&b, `\u%04x`, r)
		}
		i += size
	}
	return b.String()
}

func hasUnsafe(s string) bool {
	for _, r := range s {
		if UnsafeRune(r) {
			return true
		}
	}
	return false
}
