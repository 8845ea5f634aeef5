package daemonflag

import (
	"fmt"
	"strings"

	"github.com/spf13/pflag"
)

// EnvPrefix prefixes the environment variable of every daemon flag:
// --gossip-addr is FUSEBOX_GOSSIP_ADDR.
const EnvPrefix = "FUSEBOX_"

// ConfigFlag is the flag (and FUSEBOX_CONFIG the variable) that names the
// YAML file of settings; NewFlagSet registers it.
const ConfigFlag = "config"

// EnvName returns the environment variable that sets the flag name.
func EnvName(flagName string) string {
	return EnvPrefix + strings.ToUpper(strings.ReplaceAll(flagName, "-", "_"))
}

const envHelp = `Every flag can also be set by the environment variable FUSEBOX_<FLAG>
(--gossip-addr: FUSEBOX_GOSSIP_ADDR) and by the key <flag> in the YAML
file named by --config or FUSEBOX_CONFIG. Flags win over the environment,
which wins over the file, which wins over the defaults.
`

// NewFlagSet returns the flag set of the daemon name with --config
// registered. Parse errors are returned, not printed; -h and --help write
// the help to the set's output: the usage line, about, how the environment
// and the file set the flags, and the flags with their defaults.
func NewFlagSet(name, about string) *pflag.FlagSet {
	fs := pflag.NewFlagSet(name, pflag.ContinueOnError)
	fs.String(ConfigFlag, "", "YAML file of settings, keys named like the flags; flags and environment win (default: none)")
	fs.Usage = func() {
		fmt.Fprintf(fs.Output(), "Usage:\n  %s [flags]\n\n%s\n\n%s\nFlags:\n%s", name, strings.TrimSpace(about), envHelp, fs.FlagUsages())
	}
	return fs
}

// LogFlags registers --log-format and --log-level, bound to format and
// level (their defaults their current values), which sharedstate/logging
// checks and reads.
func LogFlags(fs *pflag.FlagSet, format, level *string) {
	fs.StringVar(format, "log-format", *format, "log format: text or json")
	fs.StringVar(level, "log-level", *level, "log level: debug, info, warn or error")
}

// List returns a comma-separated list flag bound to p, for FlagSet.Var,
// its default p's value. Its items are trimmed and empty ones dropped
// ("a, b,,c" is [a b c]); setting it replaces the whole list, so a later
// source wins, as for every flag.
func List(p *[]string) pflag.Value { return (*list)(p) }

type list []string

func (l *list) String() string { return strings.Join(*l, ",") }

func (l *list) Type() string { return "list" }

func (l *list) Set(s string) error {
	var items []string
	for _, it := range strings.Split(s, ",") {
		if it = strings.TrimSpace(it); it != "" {
			items = append(items, it)
		}
	}
	*l = items
	return nil
}
