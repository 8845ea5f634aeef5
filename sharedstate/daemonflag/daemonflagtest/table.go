package daemonflagtest

import (
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/spf13/pflag"

	"github.com/fusebox-dev/fusebox/sharedstate/daemonflag"
)

// A flag whose default is computed at run time, or whose empty default
// means something (off, none, derived from another flag), states it in its
// usage as "(default: WHAT)"; the README table shows that text instead of
// the flag's literal default value, and the help shows the usage as is.
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

// clientVariables are the FUSEBOX_* variables the clients read, by flag
// name: clientlib's FUSEBOX_AGENT and FUSEBOX_SERVICE, fuseboxctl's
// FUSEBOX_COORDINATOR and FUSEBOX_TOKEN. No daemon may have a flag of these
// names, so that a variable exported for a client never configures a
// daemon.
var clientVariables = []string{"agent", "service", "coordinator", "token"}

// Table returns the flags of fs as a Markdown table: flag, environment
// variable, file key, default, meaning. It refuses a flag whose default is
// empty and whose usage does not state what that means, and a flag whose
// variable a client reads.
func Table(fs *pflag.FlagSet) (string, error) {
	var b strings.Builder
	b.WriteString("| flag | environment variable | file key | default | meaning |\n| --- | --- | --- | --- | --- |\n")
	var errs []error
	fs.VisitAll(func(f *pflag.Flag) {
		env := daemonflag.EnvName(f.Name)
		if slices.Contains(clientVariables, f.Name) {
			errs = append(errs, fmt.Errorf("--%s: its variable %s is read by clientlib or fuseboxctl", f.Name, env))
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
		if f.Name == daemonflag.ConfigFlag {
			key = "—"
		}
		cell := func(s string) string { return strings.ReplaceAll(s, "|", `\|`) }
		fmt.Fprintf(&b, "| `--%s` | `%s` | %s | %s | %s |\n", f.Name, env, key, cell(def), cell(meaning))
	})
	return b.String(), errors.Join(errs...)
}
