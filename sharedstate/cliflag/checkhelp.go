package cliflag

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"reflect"
	"slices"
	"strconv"
	"strings"
)

// HelpDefaults reads a help that WriteHelp wrote: flag name → the default
// the help shows for it, the value (a string unquoted) after "(default
// VALUE)", or the words of a stated "(default: WHAT)" with stated true. A
// flag that shows no default is absent.
func HelpDefaults(help string) (shown map[string]string, stated map[string]bool) {
	shown, stated = map[string]string{}, map[string]bool{}
	var name string
	var usage []string
	done := func() {
		if name == "" {
			return
		}
		u := strings.Join(usage, " ")
		if _, def, ok := statedDefault(u); ok {
			shown[name], stated[name] = def, true
		} else if i := strings.LastIndex(u, " (default "); i >= 0 && strings.HasSuffix(u, ")") {
			v := u[i+len(" (default ") : len(u)-1]
			if s, err := strconv.Unquote(v); err == nil {
				v = s
			}
			shown[name] = v
		}
		name, usage = "", nil
	}
	for _, l := range strings.Split(help, "\n") {
		switch {
		case strings.HasPrefix(l, "  -"):
			done()
			f := strings.Fields(l[3:])
			name = f[0]
			if len(f) > 1 && strings.Contains(l, "\t") { // a one-letter flag, usage on its line
				usage = append(usage, strings.TrimSpace(l[strings.Index(l, "\t"):]))
			}
		case name != "" && strings.HasPrefix(l, "    \t"):
			usage = append(usage, strings.TrimSpace(l))
		default:
			done()
		}
	}
	done()
	return shown, stated
}

// CheckHelp writes cmd's help and checks that it shows every flag's real
// default. Registering the flags must leave cmd.Defaults() as it is (each
// flag's default is its field's value), and for each flag, setting it to
// the value the help shows (the empty value where the help states the
// default in words: off, none, from another flag) must leave the
// configuration unchanged. A flag named in computed has a default computed
// at run time (the host name) and only has to state it in words. The error
// names every field and flag that is wrong; the environment is not read.
func CheckHelp[C any](cmd Command[C], computed ...string) error {
	var help strings.Builder
	noEnv := func(string) string { return "" }
	if _, err := Load(cmd, []string{"-h"}, noEnv, &help); !errors.Is(err, flag.ErrHelp) {
		return fmt.Errorf("-h did not print the help: %v", err)
	}
	shown, stated := HelpDefaults(help.String())
	var errs []error
	base, err := Load(cmd, nil, noEnv, io.Discard)
	if err != nil {
		return fmt.Errorf("no settings: %v", err)
	}
	for _, d := range fieldDiffs("", reflect.ValueOf(cmd.Defaults()), reflect.ValueOf(base)) {
		errs = append(errs, fmt.Errorf("registering the flags changes the default of %s", d))
	}
	cfg := cmd.Defaults()
	cmd.Flags(&cfg).VisitAll(func(f *flag.Flag) {
		def, ok := shown[f.Name]
		switch {
		case !ok:
			errs = append(errs, fmt.Errorf("--%s: the help shows no default", f.Name))
			return
		case slices.Contains(computed, f.Name):
			if !stated[f.Name] {
				errs = append(errs, fmt.Errorf("--%s: a default computed at run time must be stated in words, (default: WHAT)", f.Name))
			}
			return
		case stated[f.Name] && f.DefValue != "":
			errs = append(errs, fmt.Errorf("--%s: the help states the default %q, but the default is %q", f.Name, def, f.DefValue))
			return
		case stated[f.Name]:
			def = ""
		}
		got, err := Load(cmd, []string{"-" + f.Name + "=" + def}, noEnv, io.Discard)
		switch {
		case err != nil:
			errs = append(errs, fmt.Errorf("--%s: the default the help shows, %q, is refused: %v", f.Name, def, err))
		case !reflect.DeepEqual(got, base):
			errs = append(errs, fmt.Errorf("--%s: the help shows the default %q, but the default is %q", f.Name, def, f.DefValue))
		}
	})
	return errors.Join(errs...)
}

// fieldDiffs names the fields (Proxy.Addr for a nested struct's) where a
// and b differ, with both values.
func fieldDiffs(prefix string, a, b reflect.Value) []string {
	if a.Kind() != reflect.Struct {
		if reflect.DeepEqual(a.Interface(), b.Interface()) {
			return nil
		}
		return []string{fmt.Sprintf("%s: %v, now %v", strings.TrimSuffix(prefix, "."), a.Interface(), b.Interface())}
	}
	var out []string
	for i := range a.NumField() {
		if !a.Type().Field(i).IsExported() {
			continue
		}
		out = append(out, fieldDiffs(prefix+a.Type().Field(i).Name+".", a.Field(i), b.Field(i))...)
	}
	return out
}
