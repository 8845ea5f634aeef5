package sstest

import (
	"os"
	"regexp"
	"slices"
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
