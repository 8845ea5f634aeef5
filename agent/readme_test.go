package agent

import (
	"testing"

	"github.com/fusebox-dev/fusebox/sharedstate/daemonflag/daemonflagtest"
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

// TestREADMEListsEveryFlag keeps the table of README.md's "Settings"
// equal to the one generated from the flags: every flag, its variable,
// file key, default and meaning (daemonflagtest.Table also refuses an unstated
// empty default and a flag whose variable a client reads).
func TestREADMEListsEveryFlag(t *testing.T) {
	def := DefaultConfig()
	table, err := daemonflagtest.Table(NewFlagSet(&def))
	if err != nil {
		t.Error(err)
	}
	sstest.READMEHasTable(t, "README.md", "## Settings", table)
}

// TestHelpShowsEveryDefault: fusebox-agent --help shows each flag's real
// default, the one DefaultConfig holds (--name's, the host name, in words).
func TestHelpShowsEveryDefault(t *testing.T) {
	if err := daemonflagtest.CheckDefaults(DefaultConfig, NewFlagSet, "name"); err != nil {
		t.Error(err)
	}
}
