package sharedstate

import (
	"math"
	"reflect"
	"slices"
	"strings"
	"testing"
)

// jsonLeaves lists the JSON paths of the leaf fields of struct type t (with
// their types), following pointers to structs; Duration and the other named
// scalar types are leaves.
func jsonLeaves(t reflect.Type, prefix string) (paths []string, types []reflect.Type) {
	for i := range t.NumField() {
		f := t.Field(i)
		name, _, _ := strings.Cut(f.Tag.Get("json"), ",")
		ft := f.Type
		if ft.Kind() == reflect.Pointer && ft.Elem().Kind() == reflect.Struct {
			ft = ft.Elem()
		}
		if ft.Kind() == reflect.Struct {
			p, ty := jsonLeaves(ft, prefix+name+".")
			paths, types = append(paths, p...), append(types, ty...)
			continue
		}
		paths, types = append(paths, prefix+name), append(types, ft)
	}
	return paths, types
}

// fieldByPath returns the addressable field of the Policy v at a JSON path.
func fieldByPath(t *testing.T, v reflect.Value, path string) reflect.Value {
	t.Helper()
	for _, name := range strings.Split(path, ".") {
		found := false
		for i := range v.NumField() {
			if tag, _, _ := strings.Cut(v.Type().Field(i).Tag.Get("json"), ","); tag == name {
				v, found = v.Field(i), true
				break
			}
		}
		if !found {
			t.Fatalf("no field %q in %s", path, v.Type())
		}
	}
	return v
}

// TestPolicyFieldTable keeps the places that list the policy's fields in
// agreement: the Policy structs, the patch structs, policyFields (from which
// MergePolicy, Patch, clone and ParsePolicy are derived) and Validate.
func TestPolicyFieldTable(t *testing.T) {
	polPaths, polTypes := jsonLeaves(reflect.TypeOf(Policy{}), "")
	patPaths, patTypes := jsonLeaves(reflect.TypeOf(PolicyPatch{}), "")
	if !slices.Equal(polPaths, patPaths) {
		t.Fatalf("Policy and PolicyPatch disagree:\n policy %v\n patch  %v", polPaths, patPaths)
	}
	for i := range polTypes {
		want := polTypes[i]
		if polPaths[i] == "dependency" {
			continue // a string in both: "" means inherit
		}
		if patTypes[i] != reflect.PointerTo(want) {
			t.Errorf("%s: the patch's type is %s, want *%s", polPaths[i], patTypes[i], want)
		}
	}
	var tablePaths []string
	for _, f := range policyFields {
		tablePaths = append(tablePaths, f.path)
	}
	if want := polPaths[2:]; !slices.Equal(tablePaths, want) { // all but schema and dependency
		t.Fatalf("policyFields disagrees with the Policy struct:\n table  %v\n struct %v", tablePaths, want)
	}

	def := DefaultPolicy()
	if err := def.Validate(); err != nil {
		t.Fatalf("DefaultPolicy is invalid: %v", err)
	}
	for _, f := range policyFields {
		path := f.path
		t.Run(path, func(t *testing.T) {
			// A patch that sets only this field, to a value other than the default.
			changed := def
			fv := fieldByPath(t, reflect.ValueOf(&changed).Elem(), path)
			bad := reflect.New(fv.Type()).Elem()
			canBeInvalid := true
			switch fv.Kind() {
			case reflect.Bool:
				fv.SetBool(!fv.Bool())
				canBeInvalid = false
			case reflect.Float64:
				fv.SetFloat(fv.Float() + 0.125)
				bad.SetFloat(math.NaN())
			case reflect.Int, reflect.Int64:
				fv.SetInt(fv.Int() + 1)
				bad.SetInt(-1)
			case reflect.String:
				fv.SetString(fv.String() + "x")
				bad.SetString("bogus")
			default:
				t.Fatalf("no test values for kind %s: extend this test", fv.Kind())
			}
			// An optional field may be off by default at its zero value
			// (retry.hedge, concurrency.maxInFlight); the others need a real default.
			if fieldByPath(t, reflect.ValueOf(&def).Elem(), path).IsZero() && canBeInvalid && !f.optional {
				t.Errorf("DefaultPolicy leaves %s at its zero value", path)
			}
			full := changed.Patch()
			var only PolicyPatch
			for _, f := range policyFields {
				if f.path == path {
					f.copy(&only, &full)
				}
			}
			var set []string
			for _, f := range policyFields {
				if f.isSet(&only) {
					set = append(set, f.path)
				}
			}
			if !slices.Equal(set, []string{path}) {
				t.Errorf("a patch of %s reports %v set", path, set)
			}
			if got := MergePolicy(def, only); got != changed {
				t.Errorf("MergePolicy(default, patch of %s) = %+v, want %+v", path, got, changed)
			}
			if got := MergePolicy(Policy{}, full); got != changed {
				t.Errorf("MergePolicy(zero, Patch()) = %+v, want %+v", got, changed)
			}
			c := only.clone()
			if got := MergePolicy(def, c); got != changed {
				t.Errorf("clone lost %s: %+v", path, got)
			}
			// The clone shares no memory: changing it leaves the original alone.
			for _, f := range policyFields {
				f.fill(&c, &def)
			}
			if got := MergePolicy(def, only); got != changed {
				t.Errorf("changing a clone changed the original's %s", path)
			}

			// Validate has a rule for the field and names it.
			if !canBeInvalid {
				return
			}
			invalid := def
			fieldByPath(t, reflect.ValueOf(&invalid).Elem(), path).Set(bad)
			var named bool
			if verr, ok := invalid.Validate().(*ValidationError); ok {
				for _, v := range verr.Violations {
					named = named || v.Field == path
				}
			}
			if !named {
				t.Errorf("Validate does not name %s when it is %v: %v", path, bad, invalid.Validate())
			}
		})
	}
}
