package cliflag

import (
	"slices"
	"testing"
)

func TestSplitList(t *testing.T) {
	for in, want := range map[string][]string{
		"":                        nil,
		" , ,":                    nil,
		"a":                       {"a"},
		" a, b,,c ":               {"a", "b", "c"},
		"127.0.0.1:1,[::1]:2379 ": {"127.0.0.1:1", "[::1]:2379"},
	} {
		if got := SplitList(in); !slices.Equal(got, want) || (want == nil) != (got == nil) {
			t.Errorf("SplitList(%q) = %q, want %q", in, got, want)
		}
	}
}
