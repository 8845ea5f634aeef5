package agent

import (
	"testing"

	"github.com/fusebox-dev/fusebox/sharedstate/cliflag"
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
	sstest.READMEListsMetrics(t, "../README.md", "fusebox_agent_", "the agent", code)
}

// TestREADMEListsEveryFlag keeps the README's table of the agent's
// settings equal to the one generated from its flags: every flag, its
// variable, file key, default and meaning. Every flag states its default,
// and none takes a variable clientlib or fuseboxctl reads.
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

// TestHelpShowsEveryDefault: fusebox-agent --help shows each flag's real
// default, the one DefaultConfig holds (--name's, the host name, in words).
func TestHelpShowsEveryDefault(t *testing.T) {
	if err := cliflag.CheckHelp(command, "name"); err != nil {
		t.Error(err)
	}
}
