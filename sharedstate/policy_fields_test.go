package sharedstate

import (
	"encoding/json"
	"math"
	"reflect"
	"slices"
	"strings"
	"testing"
)

// TestPolicyPaths: every leaf of the Policy struct, found through the paths
// derived from its JSON tags, has a real default (or is optional), is set
// by a document that names it and by nothing else, is stored alone by
// PolicyDocument, and has a rule in Validate that names it.
func TestPolicyPaths(t *testing.T) {
	def := DefaultPolicy()
	if err := def.Validate(); err != nil {
		t.Fatalf("DefaultPolicy is invalid: %v", err)
	}
	var leaves []string
	for _, f := range policyPaths {
		if !f.section {
			leaves = append(leaves, f.path)
		}
	}
	b, _ := json.Marshal(def)
	if want := slices.Sorted(func(yield func(string) bool) {
		for k := range leavesOfJSON(b) {
			if !yield(k) {
				return
			}
		}
	}); !slices.Equal(slices.Sorted(slices.Values(leaves)), want) {
		t.Fatalf("policyPaths' leaves %v, the JSON of a Policy %v", leaves, want)
	}
	for _, f := range policyPaths {
		if f.section || f.path == "schema" || f.path == "dependency" {
			continue
		}
		t.Run(f.path, func(t *testing.T) {
			changed := def
			fv := reflect.ValueOf(&changed).Elem().FieldByIndex(f.index)
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
			if reflect.ValueOf(def).FieldByIndex(f.index).IsZero() && canBeInvalid && !f.optional {
				t.Errorf("DefaultPolicy leaves %s at its zero value", f.path)
			}
			val, _ := json.Marshal(fv.Interface())
			doc := string(val)
			for _, name := range slices.Backward(strings.Split(f.path, ".")) {
				doc = `{"` + name + `":` + doc + `}`
			}
			got, set, vs, err := decodePolicy(def, []byte(doc))
			if err != nil || len(vs) > 0 || got != changed {
				t.Errorf("decodePolicy(default, %s) = %+v, %v, %v; want %+v", doc, got, vs, err, changed)
			}
			if !reflect.DeepEqual(set, map[string]bool{f.path: true}) {
				t.Errorf("%s sets %v", doc, set)
			}
			stored, err := PolicyDocument("x", []byte(doc))
			if want := `{"schema":1,"dependency":"x",` + doc[1:]; err != nil || string(stored) != want {
				t.Errorf("PolicyDocument(%s) = %s, %v; want %s", doc, stored, err, want)
			}

			// Validate has a rule for the field and names it.
			if !canBeInvalid {
				return
			}
			invalid := def
			reflect.ValueOf(&invalid).Elem().FieldByIndex(f.index).Set(bad)
			var named bool
			if verr, ok := invalid.Validate().(*ValidationError); ok {
				for _, v := range verr.Violations {
					named = named || v.Field == f.path
				}
			}
			if !named {
				t.Errorf("Validate does not name %s when it is %v: %v", f.path, bad, invalid.Validate())
			}
		})
	}
}
