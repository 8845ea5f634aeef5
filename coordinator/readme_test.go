package coordinator

import (
	"testing"

	"github.com/fusebox-dev/fusebox/sharedstate/cliflag"
	"github.com/fusebox-dev/fusebox/sharedstate/sstest"
)

// TestREADMEListsEveryMetric keeps the README's metric list and MetricNames
// in step, both ways.
func TestREADMEListsEveryMetric(t *testing.T) {
	sstest.READMEListsMetrics(t, "../README.md", "fusebox_coordinator_", "the coordinator", MetricNames)
}

// TestREADMEListsEveryFlag keeps the README's table of the coordinator's
// settings equal to the one generated from its flags. Every flag states
// its default, and none takes a variable clientlib or fuseboxctl reads.
func TestREADMEListsEveryFlag(t *testing.T) {
	def := DefaultConfig()
	fs := NewFlagSet(&def)
	table, err := cliflag.Table(fs)
	if err != nil {
		t.Error(err)
	}
	sstest.READMEHasTable(t, "README.md", "## Settings", table)
	for _, name := range cliflag.ClientVariables {
		if fs.Lookup(name) != nil {
			t.Errorf("--%s: its variable %s is read by clientlib or fuseboxctl", name, cliflag.EnvName(name))
		}
	}
}

// TestHelpShowsEveryDefault: fusebox-coordinator --help shows each flag's
// real default, the one DefaultConfig holds.
func TestHelpShowsEveryDefault(t *testing.T) {
	if err := cliflag.CheckHelp(command); err != nil {
		t.Error(err)
	}
}
