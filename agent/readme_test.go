package agent

import (
	"os"
	"regexp"
	"slices"
	"testing"
)

// TestREADMEListsEveryMetric keeps the README's metric list and the code in
// step: every metric the agent exports is named there, and every
// fusebox_agent_ name there exists.
func TestREADMEListsEveryMetric(t *testing.T) {
	readme, err := os.ReadFile("../README.md")
	if err != nil {
		t.Fatal(err)
	}
	var code []string
	for _, d := range MetricDocs() {
		code = append(code, d.Name)
	}
	documented := regexp.MustCompile(`fusebox_agent_[a-z_]+`).FindAllString(string(readme), -1)
	for _, n := range code {
		if !slices.Contains(documented, n) {
			t.Errorf("README.md does not list %s", n)
		}
	}
	for _, n := range documented {
		if !slices.Contains(code, n) {
			t.Errorf("README.md names %s, which the agent does not export", n)
		}
	}
}
