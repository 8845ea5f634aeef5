package daemonflagtest

import (
	"errors"
	"fmt"
	"reflect"
	"slices"
	"strings"

	"github.com/spf13/pflag"
)

// CheckDefaults checks that the help (pflag's listing of the flags that
// flags binds to a configuration) shows every flag's real default: the
// value defaults() holds. Registering the flags must leave the
// configuration as it is (each flag's default is its field's value); a
// flag whose usage states its default in words, "(default: WHAT)", must
// have an empty default (a flag named in computed, whose default is
// computed at run time, such as the host name, must state it instead); and
// setting each flag to its default, as the help shows it, must leave the
// configuration unchanged. The error names every field and flag that is
// wrong.
func CheckDefaults[C any](defaults func() C, flags func(*C) *pflag.FlagSet, computed ...string) error {
	var errs []error
	cfg := defaults()
	fs := flags(&cfg)
	for _, d := range fieldDiffs("", reflect.ValueOf(defaults()), reflect.ValueOf(cfg)) {
		errs = append(errs, fmt.Errorf("registering the flags changes the default of %s", d))
	}
	fs.VisitAll(func(f *pflag.Flag) {
		_, def, stated := statedDefault(f.Usage)
		switch {
		case slices.Contains(computed, f.Name):
			if !stated {
				errs = append(errs, fmt.Errorf("--%s: a default computed at run time must be stated in words, %sWHAT)", f.Name, statedPrefix))
			}
			return
		case stated && f.DefValue != "":
			errs = append(errs, fmt.Errorf("--%s: the help states the default %q, but the default is %q", f.Name, def, f.DefValue))
			return
		}
		got := defaults()
		if err := flags(&got).Set(f.Name, f.DefValue); err != nil {
			errs = append(errs, fmt.Errorf("--%s: its default %q is refused: %v", f.Name, f.DefValue, err))
		} else if d := fieldDiffs("", reflect.ValueOf(cfg), reflect.ValueOf(got)); len(d) > 0 {
			errs = append(errs, fmt.Errorf("--%s: setting it to its default %q changes %s", f.Name, f.DefValue, strings.Join(d, "; ")))
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
		if a.Type().Field(i).IsExported() {
			out = append(out, fieldDiffs(prefix+a.Type().Field(i).Name+".", a.Field(i), b.Field(i))...)
		}
	}
	return out
}
