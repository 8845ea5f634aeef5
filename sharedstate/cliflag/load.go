package cliflag

import (
	"bytes"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"slices"
	"strings"
)

// EnvPrefix prefixes the environment variable of every daemon flag:
// --gossip-addr is FUSEBOX_GOSSIP_ADDR.
const EnvPrefix = "FUSEBOX_"

// ConfigFlag is the flag (and FUSEBOX_CONFIG the variable) that names the
// file of settings; NewFlagSet registers it.
const ConfigFlag = "config"

// clientVariables are the FUSEBOX_* variables the clients read, by flag
// name: clientlib's FUSEBOX_AGENT and FUSEBOX_SERVICE, fuseboxctl's
// FUSEBOX_COORDINATOR and FUSEBOX_TOKEN. No daemon has a flag of these
// names (Table refuses one), so a variable exported for a
// client never configures a daemon.
var clientVariables = []string{"agent", "service", "coordinator", "token"}

// EnvName returns the environment variable that sets the flag name.
func EnvName(flagName string) string {
	return EnvPrefix + strings.ToUpper(strings.ReplaceAll(flagName, "-", "_"))
}

// NewFlagSet returns an empty flag set for a daemon's flags, with
// --config registered. Parse errors are returned, not printed: Load
// prints the help.
func NewFlagSet(name string) *flag.FlagSet {
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	fs.Usage = func() {}
	fs.String(ConfigFlag, "", "YAML file of settings, keys named like the flags; flags and environment win (default: none)")
	return fs
}

// LogFlags registers --log-format and --log-level, bound to format and
// level (their defaults are their current values), as both daemons take
// them (sharedstate/logging reads them).
func LogFlags(fs *flag.FlagSet, format, level *string) {
	fs.StringVar(format, "log-format", *format, "log format: text or json")
	fs.StringVar(level, "log-level", *level, "log level: debug, info, warn or error")
}

// ListValue is a comma-separated list flag bound to a []string; setting it
// replaces the whole list (a later source wins, as for every flag).
type ListValue struct{ p *[]string }

// List returns the flag.Value of a comma-separated list bound to p, for
// flag.FlagSet.Var. Its default is p's value when the flag is registered.
func List(p *[]string) *ListValue { return &ListValue{p: p} }

func (l *ListValue) String() string {
	if l == nil || l.p == nil {
		return ""
	}
	return strings.Join(*l.p, ",")
}

// Set replaces the list with the items of s (SplitList).
func (l *ListValue) Set(s string) error {
	*l.p = SplitList(s)
	return nil
}

// Get returns the list (flag.Getter).
func (l *ListValue) Get() any { return slices.Clone(*l.p) }

// Command describes a daemon's settings for Load.
type Command[C any] struct {
	// Name is the program's name, e.g. "fusebox-agent" (required).
	Name string
	// Scope prefixes every error, e.g. "agent config" (required).
	Scope string
	// About is the help text between the usage line and the paragraph on
	// environment variables and the file (optional).
	About string
	// Defaults returns the configuration no setting has touched yet
	// (required).
	Defaults func() C
	// Flags returns the daemon's flags (NewFlagSet plus its own) bound to
	// cfg, each flag's default the field's value in cfg (required).
	Flags func(cfg *C) *flag.FlagSet
	// FileToJSON turns the --config file into JSON, e.g. sigs.k8s.io/yaml's
	// YAMLToJSON for YAML (required).
	FileToJSON func([]byte) ([]byte, error)
}

// Load builds a configuration from, lowest precedence first: Defaults, the
// file named by --config (or FUSEBOX_CONFIG), the FUSEBOX_<FLAG>
// environment variables (read through getenv, os.Getenv when nil; an empty
// value counts as unset) and the flags in args. Every unknown file key,
// bad file value and bad variable is refused, each error naming the key or
// variable, the flag and the file. -h prints the help to usage (os.Stderr
// when nil) and returns flag.ErrHelp. Load does not validate the result.
func Load[C any](cmd Command[C], args []string, getenv func(string) string, usage io.Writer) (C, error) {
	var zero C
	if getenv == nil {
		getenv = os.Getenv
	}
	if usage == nil {
		usage = os.Stderr
	}
	// Pass 1: find --config and check the command line, applying nothing.
	scratch := cmd.Defaults()
	pre := cmd.Flags(&scratch)
	if err := pre.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			def := cmd.Defaults()
			WriteHelp(usage, cmd.Name, cmd.About, cmd.Flags(&def))
		}
		return zero, err
	}
	path := pre.Lookup(ConfigFlag).Value.String()
	if path == "" {
		path = getenv(EnvName(ConfigFlag))
	}

	cfg := cmd.Defaults()
	fs := cmd.Flags(&cfg)
	if path != "" {
		if err := applyFile(cmd, fs, path); err != nil {
			return zero, err
		}
	}
	var errs []error
	fs.VisitAll(func(f *flag.Flag) {
		if f.Name == ConfigFlag {
			return
		}
		name := EnvName(f.Name)
		if v := getenv(name); v != "" {
			if err := fs.Set(f.Name, v); err != nil {
				errs = append(errs, fmt.Errorf("%s: %s=%q: --%s: %v", cmd.Scope, name, v, f.Name, err))
			}
		}
	})
	if len(errs) > 0 {
		return zero, errors.Join(errs...)
	}
	if err := fs.Parse(args); err != nil {
		return zero, err
	}
	if fs.NArg() > 0 {
		return zero, fmt.Errorf("%s: unexpected arguments %q", cmd.Scope, fs.Args())
	}
	return cfg, nil
}

// applyFile sets the flags named by the keys of the file's mapping, in key
// order. Lists may be sequences or comma-separated strings.
func applyFile[C any](cmd Command[C], fs *flag.FlagSet, path string) error {
	data, err := os.ReadFile(path)
	if err != nil {
		return fmt.Errorf("%s: --%s: %w", cmd.Scope, ConfigFlag, err)
	}
	js, err := cmd.FileToJSON(data)
	if err != nil {
		return fmt.Errorf("%s: %s: %w", cmd.Scope, path, err)
	}
	var m map[string]any
	dec := json.NewDecoder(bytes.NewReader(js))
	dec.UseNumber()
	if err := dec.Decode(&m); err != nil {
		return fmt.Errorf("%s: %s: not a mapping of flag names to values: %w", cmd.Scope, path, err)
	}
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	var errs []error
	bad := func(format string, args ...any) {
		errs = append(errs, fmt.Errorf("%s: %s: "+format, append([]any{cmd.Scope, path}, args...)...))
	}
	for _, k := range keys {
		switch {
		case k == ConfigFlag:
			bad("key %q: a file cannot name another file", k)
			continue
		case fs.Lookup(k) == nil:
			bad("unknown key %q: %s has no flag --%s", k, cmd.Name, k)
			continue
		}
		s, err := scalar(m[k])
		if err != nil {
			bad("key %q: %v", k, err)
			continue
		}
		if err := fs.Set(k, s); err != nil {
			bad("key %q: %q: %v", k, s, err)
		}
	}
	return errors.Join(errs...)
}

// scalar is a file value as a flag's text: a string, number or boolean as
// written, null as "", a list of those joined with commas.
func scalar(v any) (string, error) {
	switch x := v.(type) {
	case nil:
		return "", nil
	case string:
		return x, nil
	case bool:
		if x {
			return "true", nil
		}
		return "false", nil
	case json.Number:
		return x.String(), nil
	case []any:
		parts := make([]string, 0, len(x))
		for _, e := range x {
			if _, nested := e.([]any); nested {
				return "", errors.New("a list inside a list")
			}
			s, err := scalar(e)
			if err != nil {
				return "", err
			}
			parts = append(parts, s)
		}
		return strings.Join(parts, ","), nil
	case map[string]any:
		return "", errors.New("a mapping: want a string, number, boolean or list")
	default:
		return "", fmt.Errorf("a %T: want a string, number, boolean or list", v)
	}
}
