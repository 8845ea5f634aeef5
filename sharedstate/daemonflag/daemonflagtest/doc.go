// Package daemonflagtest checks what a daemon's README and help say of its
// settings against its flags (package daemonflag): the README's table of
// the settings (Table) and the defaults the help shows (CheckDefaults).
// Only tests import it; no binary links it.
//
//	def := agent.DefaultConfig()
//	table, err := daemonflagtest.Table(agent.NewFlagSet(&def))
//	sstest.READMEHasTable(t, "README.md", "## Settings", table)
package daemonflagtest
