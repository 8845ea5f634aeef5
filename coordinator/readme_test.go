package coordinator

import (
	"testing"

	"github.com/fusebox-dev/fusebox/sharedstate/sstest"
)

// TestREADMEListsEveryMetric keeps the README's metric list and MetricNames
// in step, both ways.
func TestREADMEListsEveryMetric(t *testing.T) {
	sstest.READMEListsMetrics(t, "README.md", "fusebox_coordinator_", "the coordinator", MetricNames)
}
