package daemonflag

import (
	"errors"
	"fmt"
	"io"
	"os"
	"strings"

	"github.com/spf13/pflag"
	"go.yaml.in/yaml/v3"
)

// Load sets the flags of fs (a NewFlagSet bound to the daemon's Config)
// from, lowest precedence first: the YAML file named by --config (or
// FUSEBOX_CONFIG), the FUSEBOX_<FLAG> environment variables (read through
// getenv, os.Getenv when nil; an empty value counts as unset) and args.
// Every unknown file key, bad file value and bad variable is refused, each
// error naming the file and line or the variable, and the flag. -h and
// --help write the help to usage (os.Stderr when nil) and return
// pflag.ErrHelp. Load does not validate the result.
func Load(fs *pflag.FlagSet, args []string, getenv func(string) string, usage io.Writer) error {
	if getenv == nil {
		getenv = os.Getenv
	}
	if usage == nil {
		usage = os.Stderr
	}
	fs.SetOutput(usage)
	if err := fs.Parse(args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("unexpected arguments %q", fs.Args())
	}
	// The file and the environment go under the command line: keep what
	// it gave, apply them, then give it again.
	given := map[*pflag.Flag]string{}
	fs.Visit(func(f *pflag.Flag) { given[f] = f.Value.String() })
	path := fs.Lookup(ConfigFlag).Value.String()
	if path == "" {
		path = getenv(EnvName(ConfigFlag))
	}
	var errs []error
	if path != "" {
		errs = append(errs, applyFile(fs, path))
	}
	fs.VisitAll(func(f *pflag.Flag) {
		name := EnvName(f.Name)
		if v := getenv(name); v != "" && f.Name != ConfigFlag {
			if err := f.Value.Set(v); err != nil {
				errs = append(errs, fmt.Errorf("%s=%q: --%s: %w", name, v, f.Name, err))
			}
		}
	})
	for f, v := range given {
		if err := f.Value.Set(v); err != nil {
			errs = append(errs, fmt.Errorf("--%s: %w", f.Name, err))
		}
	}
	return errors.Join(errs...)
}

// applyFile sets the flags named by the keys of the file's mapping, in the
// file's order. A list is a sequence or a comma-separated string.
func applyFile(fs *pflag.FlagSet, path string) error {
	data, err := os.ReadFile(path)
	if err != nil {
		return fmt.Errorf("--%s: %w", ConfigFlag, err)
	}
	var doc yaml.Node
	if err := yaml.Unmarshal(data, &doc); err != nil {
		return fmt.Errorf("%s: %w", path, err)
	}
	if len(doc.Content) == 0 {
		return nil // an empty file
	}
	m := doc.Content[0]
	if m.Kind != yaml.MappingNode {
		return fmt.Errorf("%s:%d: not a mapping of flag names to values", path, m.Line)
	}
	var errs []error
	bad := func(at *yaml.Node, format string, args ...any) {
		errs = append(errs, fmt.Errorf("%s:%d: "+format, append([]any{path, at.Line}, args...)...))
	}
	seen := map[string]int{}
	for i := 0; i+1 < len(m.Content); i += 2 {
		k, v := m.Content[i], m.Content[i+1]
		f := fs.Lookup(k.Value)
		switch {
		case seen[k.Value] > 0:
			bad(k, "key %q again: it is on line %d", k.Value, seen[k.Value])
			continue
		case k.Value == ConfigFlag:
			bad(k, "key %q: a file cannot name another file", k.Value)
			continue
		case f == nil:
			bad(k, "unknown key %q: %s has no flag --%s", k.Value, fs.Name(), k.Value)
			continue
		}
		seen[k.Value] = k.Line
		if s, err := text(v); err != nil {
			bad(v, "key %q: %v", k.Value, err)
		} else if err := f.Value.Set(s); err != nil {
			bad(v, "key %q: %q: %v", k.Value, s, err)
		}
	}
	return errors.Join(errs...)
}

// text is a file value as a flag's text: a scalar as written (null as ""),
// a sequence of scalars joined with commas.
func text(v *yaml.Node) (string, error) {
	if v.Kind == yaml.AliasNode {
		v = v.Alias
	}
	switch {
	case v.Kind == yaml.ScalarNode && v.ShortTag() == "!!null":
		return "", nil
	case v.Kind == yaml.ScalarNode:
		return v.Value, nil
	case v.Kind == yaml.SequenceNode:
		items := make([]string, len(v.Content))
		for i, e := range v.Content {
			if e.Kind != yaml.ScalarNode {
				return "", errors.New("a list holds strings, numbers and booleans only")
			}
			items[i] = e.Value
		}
		return strings.Join(items, ","), nil
	}
	return "", errors.New("want a string, number, boolean or list")
}
