package cliflag

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"slices"
	"strings"
)

// A flag whose default is computed at run time, or whose empty default
// means something (off, none, derived from another flag), states it in its
// usage as "(default: WHAT)"; the help and the README table show that text
// instead of the flag's literal default value.
const statedPrefix = "(default: "

// statedDefault splits a usage text into its meaning and the default it
// states ("(default: WHAT)", parentheses inside WHAT allowed); ok is false
// when it states none.
func statedDefault(usage string) (meaning, def string, ok bool) {
	i := strings.Index(usage, statedPrefix)
	if i < 0 {
		return usage, "", false
	}
	depth := 0
	for j := i; j < len(usage); j++ {
		switch usage[j] {
		case '(':
			depth++
		case ')':
			depth--
			if depth == 0 {
				meaning = strings.TrimSpace(strings.TrimSpace(usage[:i]) + " " + strings.TrimSpace(usage[j+1:]))
				return strings.TrimRight(meaning, " ;,"), usage[i+len(statedPrefix) : j], true
			}
		}
	}
	return usage, "", false
}

// isString reports whether the flag holds a plain string (its default is
// shown quoted, as the flag package does).
func isString(f *flag.Flag) bool {
	g, ok := f.Value.(flag.Getter)
	if !ok {
		return false
	}
	_, s := g.Get().(string)
	return s
}

// typeName is the word after the flag's name in the help: the flag
// package's (string, int, duration…), "list" for a List, none for a bool.
func typeName(f *flag.Flag) string {
	if _, ok := f.Value.(*ListValue); ok {
		return "list"
	}
	name, _ := flag.UnquoteUsage(f)
	return name
}

// PrintDefaults writes the flags of fs the way flag.PrintDefaults does,
// except that every default is shown: a default the usage states
// ("(default: WHAT)") as written, any other, zero values and false
// included, after the usage as "(default VALUE)".
func PrintDefaults(w io.Writer, fs *flag.FlagSet) {
	fs.VisitAll(func(f *flag.Flag) {
		var b strings.Builder
		fmt.Fprintf(&b, "  -%s", f.Name)
		if name := typeName(f); name != "" {
			b.WriteString(" " + name)
		}
		if b.Len() <= 4 { // a one-letter flag: usage on the same line
			b.WriteString("\t")
		} else {
			b.WriteString("\n    \t")
		}
		_, usage := flag.UnquoteUsage(f)
		b.WriteString(strings.ReplaceAll(usage, "\n", "\n    \t"))
		if _, _, stated := statedDefault(usage); !stated && f.DefValue != "" {
			if isString(f) {
				fmt.Fprintf(&b, " (default %q)", f.DefValue)
			} else {
				fmt.Fprintf(&b, " (default %s)", f.DefValue)
			}
		}
		b.WriteString("\n")
		_, _ = io.WriteString(w, b.String())
	})
}

// WriteHelp writes a daemon's help: the usage line, about, how the
// environment and the --config file set the flags, and the flags.
func WriteHelp(w io.Writer, name, about string, fs *flag.FlagSet) {
	example := "gossip-addr" // both daemons have it
	if fs.Lookup(example) == nil {
		example = ""
		fs.VisitAll(func(f *flag.Flag) {
			if example == "" && f.Name != ConfigFlag {
				example = f.Name
			}
		})
	}
	var b strings.Builder
	fmt.Fprintf(&b, "Usage: %s [flags]\n\n", name)
	if about = strings.TrimSpace(about); about != "" {
		b.WriteString(about + "\n\n")
	}
	fmt.Fprintf(&b, `Every flag can also be set by the environment variable %s<FLAG>
(--%s: %s) and by the key <flag> in the YAML
file named by --config or %s. Flags win over the environment,
which wins over the file, which wins over the defaults.

Flags:
`, EnvPrefix, example, EnvName(example), EnvName(ConfigFlag))
	_, _ = io.WriteString(w, b.String())
	PrintDefaults(w, fs)
}

// Table returns the flags of fs as a Markdown table: flag, environment
// variable, file key, default, meaning. It refuses a flag whose default is
// empty and whose usage does not state what that means, and a flag whose
// variable a client reads (clientVariables).
func Table(fs *flag.FlagSet) (string, error) {
	var b strings.Builder
	b.WriteString("| flag | environment variable | file key | default | meaning |\n| --- | --- | --- | --- | --- |\n")
	var errs []error
	fs.VisitAll(func(f *flag.Flag) {
		if slices.Contains(clientVariables, f.Name) {
			errs = append(errs, fmt.Errorf("--%s: its variable %s is read by clientlib or fuseboxctl", f.Name, EnvName(f.Name)))
		}
		meaning, def, stated := statedDefault(f.Usage)
		switch {
		case stated:
		case f.DefValue == "":
			errs = append(errs, fmt.Errorf("--%s: its default is empty: say what that means in its usage, %sWHAT)", f.Name, statedPrefix))
		default:
			def = "`" + f.DefValue + "`"
		}
		key := "`" + f.Name + "`"
		if f.Name == ConfigFlag {
			key = "—"
		}
		cell := func(s string) string { return strings.ReplaceAll(s, "|", `\|`) }
		fmt.Fprintf(&b, "| `--%s` | `%s` | %s | %s | %s |\n", f.Name, EnvName(f.Name), key, cell(def), cell(meaning))
	})
	return b.String(), errors.Join(errs...)
}
