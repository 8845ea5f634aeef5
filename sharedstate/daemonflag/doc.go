// Package daemonflag reads the settings of the Fusebox daemons
// (fusebox-agent, fusebox-coordinator) alike: their flags, parsed by
// spf13/pflag as fuseboxctl's are (through cobra), the FUSEBOX_<FLAG>
// environment variables and the YAML file named by --config. It is a
// module of its own, so that no client links pflag or YAML.
//
// A daemon binds its flags to its Config, each flag's default the field's
// value in DefaultConfig, and Load applies the file, then the environment,
// then the command line:
//
//	func NewFlagSet(cfg *Config) *pflag.FlagSet {
//		fs := daemonflag.NewFlagSet("fusebox-x", "What fusebox-x does.") // with --config
//		fs.StringVar(&cfg.Addr, "addr", cfg.Addr, "listen address")
//		fs.Var(daemonflag.List(&cfg.Peers), "peers", "comma-separated peers (default: none)")
//		return fs
//	}
//
//	cfg := DefaultConfig()
//	err := daemonflag.Load(NewFlagSet(&cfg), os.Args[1:], os.Getenv, os.Stderr)
//
// Package daemonflagtest checks a README's table of the settings, and the
// defaults the help shows, against the flags.
package daemonflag
