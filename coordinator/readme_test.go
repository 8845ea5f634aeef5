package coordinator

import (
	"os"
	"regexp"
	"slices"
	"testing"
)

// TestREADMEListsEveryMetric keeps the README's metric list and MetricNames
// in step, both ways.
func TestREADMEListsEveryMetric(t *testing.T) {
	readme, err := os.ReadFile("../README.md")
	if err != nil {
		t.Fatal(err)
	}
	documented := regexp.MustCompile(`fusebox_coordinator_[a-z_]+`).FindAllString(string(readme), -1)
	for _, n := range MetricNames {
		if !slices.Contains(documented, n) {
			t.Errorf("README.md does not list %s", n)
		}
	}
	for _, n := range documented {
		if !slices.Contains(MetricNames, n) {
			t.Errorf("README.md names %s, which the coordinator does not export", n)
		}
	}
}
