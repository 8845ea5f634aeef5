package agent

import (
	"testing"

	"github.com/fusebox-dev/fusebox/sharedstate/sstest"
)

// TestREADMEListsEveryMetric keeps the README's metric list and the code in
// step: every metric the agent exports is named there, and every
// fusebox_agent_ name there exists.
func TestREADMEListsEveryMetric(t *testing.T) {
	var code []string
	for _, d := range MetricDocs() {
		code = append(code, d.Name)
	}
	sstest.READMEListsMetrics(t, "README.md", "fusebox_agent_", "the agent", code)
}
