package fleet

import (
	"github.com/spf13/pflag"

	"github.com/fusebox-dev/fusebox/agent"
)

// Args renders cfg as fusebox-agent's command line: a --flag=value for
// every flag (agent.NewFlagSet) whose value differs from
// agent.DefaultConfig()'s, so that the binary, loading them, runs with cfg
// (the settings without a flag are not rendered). One agent.Config thus
// configures an agent in process and as a process alike.
func Args(cfg agent.Config) []string {
	def := agent.DefaultConfig()
	defaults := agent.NewFlagSet(&def)
	var args []string
	agent.NewFlagSet(&cfg).VisitAll(func(f *pflag.Flag) {
		if d := defaults.Lookup(f.Name); d != nil && d.Value.String() == f.Value.String() {
			return
		}
		args = append(args, "--"+f.Name+"="+f.Value.String())
	})
	return args
}
