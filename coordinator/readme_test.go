package coordinator

import (
	"testing"

	"github.com/fusebox-dev/fusebox/sharedstate/daemonflag/daemonflagtest"
	"github.com/fusebox-dev/fusebox/sharedstate/sstest"
)

// TestREADMEListsEveryMetric keeps the README's metric list and MetricNames
// in step, both ways.
func TestREADMEListsEveryMetric(t *testing.T) {
	sstest.READMEListsMetrics(t, "README.md", "fusebox_coordinator_", "the coordinator", MetricNames)
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

// TestHelpShowsEveryDefault: fusebox-coordinator --help shows each flag's
// real default, the one DefaultConfig holds.
func TestHelpShowsEveryDefault(t *testing.T) {
	if err := daemonflagtest.CheckDefaults(DefaultConfig, NewFlagSet); err != nil {
		t.Error(err)
	}
}
