package main

import (
	"bytes"
	"fmt"
	"io"
	"unicode"
	"unicode/utf8"
)

// What fuseboxctl prints comes largely from elsewhere: an override's actor
// and reason, a transition's reason, a member's name, an error message are
// strings someone else chose. None of them may steer the terminal (clear
// it, recolour it, rewrite a line with a carriage return, hide text behind
// a bidirectional override), so every string goes out escaped: safeWriter
// escapes every control character on stdout and stderr, and safeText also
// the line breaks and tabs that would break a table row or a line.

// escapeRune writes the escape of one unsafe rune (or of an invalid byte,
// r == utf8.RuneError with size 1): \xNN for ASCII controls and invalid
// bytes, \uNNNN for the others (DEL, C1 controls, bidi controls), which is
// also a valid escape inside a JSON string.
func escapeRune(b *bytes.Buffer, r rune, raw []byte) {
	switch {
	case r == utf8.RuneError && len(raw) == 1:
		fmt.Fprintf(b, `\x%02x`, raw[0])
	case r < 0x20:
		fmt.Fprintf(b, `\x%02x`, r)
	default:
		fmt.Fprintf(b, `\u%04x`, r)
	}
}

// unsafeRune reports whether r must not reach a terminal as it is: a
// control character (C0, DEL, C1) or a bidirectional formatting character.
func unsafeRune(r rune) bool {
	return unicode.IsControl(r) || unicode.Is(unicode.Bidi_Control, r)
}

// escapeRunes returns p with every rune for which unsafe is true, and every
// byte that is not UTF-8, replaced by what esc writes for it; p itself when
// there is none.
func escapeRunes(p []byte, unsafe func(rune) bool, esc func(b *bytes.Buffer, r rune, raw []byte)) []byte {
	var b *bytes.Buffer // nil until the first rune to escape
	for i := 0; i < len(p); {
		r, size := utf8.DecodeRune(p[i:])
		switch {
		case (r == utf8.RuneError && size == 1) || unsafe(r):
			if b == nil {
				b = bytes.NewBuffer(make([]byte, 0, len(p)+16))
				b.Write(p[:i])
			}
			esc(b, r, p[i:i+size])
		case b != nil:
			b.Write(p[i : i+size])
		}
		i += size
	}
	if b == nil {
		return p
	}
	return b.Bytes()
}

// safeText returns s with every control character escaped, line breaks
// and tabs included, for a table cell or one line of text.
func safeText(s string) string {
	return string(escapeRunes([]byte(s), unsafeRune, escapeRune))
}

// safeWriter escapes, in everything written to it, the control characters
// other than line feed and tab, and the bytes that are not UTF-8. JSON and
// YAML go through unchanged (their encoders escape control characters in
// strings; a DEL or C1 control a JSON encoder leaves raw becomes its \u
// escape, the same string). Each Write must hold whole characters, as
// fmt, tabwriter and the encoders write.
type safeWriter struct{ w io.Writer }

func newSafeWriter(w io.Writer) io.Writer {
	if _, ok := w.(safeWriter); ok {
		return w
	}
	return safeWriter{w: w}
}

func (s safeWriter) Write(p []byte) (int, error) {
	if _, err := s.w.Write(escapeRunes(p, isWriterUnsafe, escapeRune)); err != nil {
		return 0, err
	}
	return len(p), nil
}

func isWriterUnsafe(r rune) bool { return r != '\n' && r != '\t' && unicode.IsControl(r) }

// jsonSafe rewrites a JSON document with every unsafe character (see
// unsafeRune) other than the line feeds of its layout as its \u escape,
// and every byte that is not UTF-8 as \ufffd: the same document, for
// encoding/json escapes C0 controls in strings but not DEL, C1 controls
// or bidirectional overrides, and copies a json.RawMessage's bytes as
// they are. Outside strings a JSON document holds no such character.
func jsonSafe(doc []byte) []byte {
	unsafe := func(r rune) bool { return r != '\n' && unsafeRune(r) }
	return escapeRunes(doc, unsafe, func(b *bytes.Buffer, r rune, _ []byte) {
		fmt.Fprintf(b, `\u%04x`, r) // an invalid byte reads as utf8.RuneError, U+FFFD
	})
}
