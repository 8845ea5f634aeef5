// Package cliflag holds the flag-value parsing both daemons share (the
// agent's flags and fusebox-coordinator's), so both read a flag's value
// alike. It imports the standard library only.
package cliflag

import "strings"

// SplitList splits a comma-separated flag value ("a, b,,c") into its
// non-empty, trimmed items (["a" "b" "c"]); nil when there are none.
func SplitList(s string) []string {
	var out []string
	for _, p := range strings.Split(s, ",") {
		if p = strings.TrimSpace(p); p != "" {
			out = append(out, p)
		}
	}
	return out
}
