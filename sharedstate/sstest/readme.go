package sstest

import (
	"os"
	"regexp"
	"slices"
	"strings"
	"testing"
)

// READMEListsMetrics keeps a README's metric list and the code in step,
// both ways: every name in exported must appear in the file at readmePath,
// and every prefix+"[a-z_]+" name there must be in exported. who names the
// exporter in the error ("the agent", "clientlib").
func READMEListsMetrics(t testing.TB, readmePath, prefix, who string, exported []string) {
	t.Helper()
	readme, err := os.ReadFile(readmePath)
	if err != nil {
		t.Fatal(err)
	}
	documented := regexp.MustCompile(regexp.QuoteMeta(prefix)+`[a-z_]+`).FindAllString(string(readme), -1)
	for _, n := range exported {
		if !slices.Contains(documented, n) {
			t.Errorf("%s does not list %s", readmePath, n)
		}
	}
	for _, n := range documented {
		if !slices.Contains(exported, n) {
			t.Errorf("%s names %s, which %s does not export", readmePath, n, who)
		}
	}
}

// READMEHasTable checks that the first Markdown table after the line
// heading in the file at readmePath is exactly table (a generated one: the
// error prints it, to paste in).
func READMEHasTable(t testing.TB, readmePath, heading, table string) {
	t.Helper()
	readme, err := os.ReadFile(readmePath)
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(string(readme), "\n")
	at := slices.Index(lines, heading)
	if at < 0 {
		t.Fatalf("%s has no line %q; put this table under it:\n%s", readmePath, heading, table)
	}
	var got []string
	for _, l := range lines[at+1:] {
		if strings.HasPrefix(l, "|") {
			got = append(got, l)
		} else if len(got) > 0 || strings.HasPrefix(l, "#") {
			break
		}
	}
	if g := strings.Join(got, "\n") + "\n"; g != table {
		t.Errorf("%s: the table under %q is not the generated one; replace it with:\n%s", readmePath, heading, table)
	}
}
