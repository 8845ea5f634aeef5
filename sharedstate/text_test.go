package sharedstate

import (
	"errors"
	"strings"
	"testing"
	"unicode"
	"unicode/utf8"

	"pgregory.net/rapid"
)

func TestValidateText(t *testing.T) {
	for _, tc := range []struct {
		name, in string
		want     string // "" when valid, else a part of the error
	}{
		{"plain", "alice@laptop (ops-admin)", ""},
		{"accents and emoji", "Zoë ☕ on call", ""},
		{"empty", "", ""},
		{"escape", "bob\x1b[2J", "control character U+001B at byte 3"},
		{"carriage return", "bob\rEVIL", "control character U+000D at byte 3"},
		{"newline", "one\ntwo", "U+000A at byte 3"},
		{"tab", "a\tb", "U+0009 at byte 1"},
		{"DEL", "a\x7f", "U+007F"},
		{"C1 CSI", "a\u009b31m", "U+009B"},
		{"right-to-left override", "gnp.\u202eexe", "formatting character U+202E at byte 4"},
		{"line separator", "a\u2028b", "U+2028"},
		{"invalid UTF-8", "ab\xff", "invalid UTF-8 byte 0xff at byte 2"},
		{"replacement character", "a\ufffd", "U+FFFD"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := ValidateText("actor", tc.in)
			if tc.want == "" {
				if err != nil {
					t.Fatalf("ValidateText(%q) = %v, want nil", tc.in, err)
				}
				return
			}
			if err == nil || !errors.Is(err, ErrUnsafeText) || !strings.Contains(err.Error(), "actor: ") ||
				!strings.Contains(err.Error(), tc.want) {
				t.Fatalf("ValidateText(%q) = %v, want ErrUnsafeText naming the field and %q", tc.in, err, tc.want)
			}
		})
	}
}

func TestPrintableText(t *testing.T) {
	for in, want := range map[string]string{
		"alice":                         "alice",
		"bob\x1b[2J\x1b[31mEVIL\r":      `bob\x1b[2J\x1b[31mEVIL\r`,
		"one\ntwo\tthree":               `one\ntwo\tthree`,
		"gnp.\u202eexe":                 `gnp.\u202eexe`,
		"ab\xffc":                       `ab\xffc`,
		"Zoë \u0085":                    `Zoë \x85`,
		"\u2066isolated\u2069 reason ☕": `\u2066isolated\u2069 reason ☕`,
	} {
		if got := PrintableText(in); got != want {
			t.Errorf("PrintableText(%q) = %q, want %q", in, got, want)
		}
	}
}

// PrintableText's output is always safe and valid, changes exactly the
// text ValidateText refuses, and keeps every safe rune in order.
func TestPrintableTextProperties(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		s := rapid.OneOf(rapid.String(), rapid.StringOf(rapid.RuneFrom([]rune{0x202e, 0x2028, 0xfffd, 0x1b}, unicode.Cc, unicode.Bidi_Control, unicode.Latin, unicode.So)),
			rapid.Map(rapid.SliceOf(rapid.Byte()), func(b []byte) string { return string(b) })).Draw(t, "s")
		p := PrintableText(s)
		if !utf8.ValidString(p) {
			t.Fatalf("PrintableText(%q) = %q: invalid UTF-8", s, p)
		}
		if err := ValidateText("reason", p); err != nil {
			t.Fatalf("PrintableText(%q) = %q, which ValidateText refuses: %v", s, p, err)
		}
		if valid := ValidateText("reason", s) == nil; valid != (p == s) {
			t.Fatalf("ValidateText(%q) valid=%v but PrintableText changed it to %q", s, valid, p)
		}
	})
}
