// Package cliflag holds what both daemons (fusebox-agent and
// fusebox-coordinator) share about their command lines, so both read and
// judge a setting alike: the parsing of list values and listen addresses,
// the one loader of flags, FUSEBOX_* environment variables and a --config
// file (Load), the help listing and README table of those settings, and
// the bind error that names the flag of the address (ListenError). It
// imports the standard library only (the daemons pass in their file
// format's decoder).
//
// A daemon binds its flags to its Config, each flag's default the field's
// value in DefaultConfig, and Load applies the file, then the environment,
// then the command line:
//
//	func NewFlagSet(cfg *Config) *flag.FlagSet {
//		fs := cliflag.NewFlagSet("fusebox-x") // with --config
//		fs.StringVar(&cfg.Addr, "addr", cfg.Addr, "listen address")
//		fs.Var(cliflag.List(&cfg.Peers), "peers", "comma-separated peers (default: none)")
//		return fs
//	}
//
//	cfg, err := cliflag.Load(cliflag.Command[Config]{Name: "fusebox-x", Scope: "x config",
//		Defaults: DefaultConfig, Flags: NewFlagSet, FileToJSON: yaml.YAMLToJSON}, os.Args[1:], os.Getenv, os.Stderr)
package cliflag
