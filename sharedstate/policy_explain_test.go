package sharedstate

import (
	"encoding/json"
	"reflect"
	"testing"
)

func TestDiffDocuments(t *testing.T) {
	for _, tc := range []struct {
		name          string
		before, after string
		want          []FieldChange
	}{
		{"created", ``, `{"schema":1,"dependency":"db","retry":{"maxAttempts":3}}`,
			[]FieldChange{{Field: "retry.maxAttempts", To: "3"}}},
		{"deleted", `{"dependency":"db","breaker":{"window":"5s"}}`, `null`,
			[]FieldChange{{Field: "breaker.window", From: `"5s"`}}},
		{"changed, in field order", `{"retry":{"maxAttempts":3},"breaker":{"minimumRequests":20,"mode":"shadow"}}`,
			`{"retry":{"maxAttempts":5},"breaker":{"minimumRequests":20,"window":"5s"}}`,
			[]FieldChange{{Field: "breaker.window", To: `"5s"`}, {Field: "breaker.mode", From: `"shadow"`},
				{Field: "retry.maxAttempts", From: "3", To: "5"}}},
		{"same", `{"schema":1,"breaker":{"mode":"shadow"}}`, `{"breaker":{"mode":"shadow"},"dependency":"x"}`, nil},
		{"any object: an override", `{"state":"forced-closed","reason":"noisy"}`, `{"state":"forced-open","reason":"noisy","tags":["a"]}`,
			[]FieldChange{{Field: "state", From: `"forced-closed"`, To: `"forced-open"`}, {Field: "tags", To: `["a"]`}}},
		{"not objects", `[1]`, `"x"`, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := DiffDocuments([]byte(tc.before), []byte(tc.after)); !reflect.DeepEqual(got, tc.want) {
				t.Errorf("DiffDocuments = %+v, want %+v", got, tc.want)
			}
		})
	}
}

func TestExplainPolicy(t *testing.T) {
	def := DefaultPolicy()
	def.Breaker.MinimumRequests = 30
	def.Breaker.FailureRateThreshold = 0.4
	defDoc, err := json.Marshal(def)
	if err != nil {
		t.Fatal(err)
	}
	// A stored default written before throttle existed leaves it out.
	var m map[string]any
	_ = json.Unmarshal(defDoc, &m)
	delete(m, "throttle")
	defDoc, _ = json.Marshal(m)
	own := []byte(`{"dependency":"db","breaker":{"minimumRequests":50},"throttle":{"enabled":true}}`)

	source := func(fs []ExplainedField, path string) ExplainedField {
		t.Helper()
		for _, f := range fs {
			if f.Field == path {
				return f
			}
		}
		t.Fatalf("no field %s in %+v", path, fs)
		return ExplainedField{}
	}
	t.Run("own over the fleet default over the built-in default", func(t *testing.T) {
		p, fs, err := ExplainPolicy("db", defDoc, own)
		if err != nil {
			t.Fatal(err)
		}
		if p.Dependency != "db" || p.Breaker.MinimumRequests != 50 || p.Breaker.FailureRateThreshold != 0.4 || !p.Throttle.Enabled {
			t.Fatalf("effective policy %+v", p)
		}
		if n := len(policyLeaves(p)) - 2; len(fs) != n { // all but schema and dependency
			t.Fatalf("%d fields, want every one of the policy's %d", len(fs), n)
		}
		for path, want := range map[string]ExplainedField{
			"breaker.minimumRequests":      {Value: "50", Source: SourceOwn, Inherited: "30"},
			"throttle.enabled":             {Value: "true", Source: SourceOwn, Inherited: "false"},
			"breaker.failureRateThreshold": {Value: "0.4", Source: SourceFleetDefault, Inherited: "0.5"},
			"breaker.window":               {Value: `"10s"`, Source: SourceFleetDefault, Inherited: `"10s"`},
			"throttle.k":                   {Value: "2", Source: SourceBuiltIn},
		} {
			want.Field = path
			if got := source(fs, path); got != want {
				t.Errorf("%s = %+v, want %+v", path, got, want)
			}
		}
	})
	t.Run("no policy of its own", func(t *testing.T) {
		p, fs, err := ExplainPolicy("db", defDoc, nil)
		if err != nil || p.Dependency != "db" || p.Breaker.MinimumRequests != 30 {
			t.Fatalf("ExplainPolicy = %+v, %v", p, err)
		}
		for _, f := range fs {
			if f.Source == SourceOwn {
				t.Errorf("%+v: from its own policy, which it has not", f)
			}
		}
	})
	t.Run("nothing stored", func(t *testing.T) {
		p, fs, err := ExplainPolicy("db", nil, nil)
		if err != nil || !reflect.DeepEqual(p.Breaker, DefaultPolicy().Breaker) {
			t.Fatalf("ExplainPolicy = %+v, %v", p, err)
		}
		for _, f := range fs {
			if f.Source != SourceBuiltIn || f.Inherited != "" {
				t.Errorf("%+v, want the built-in default", f)
			}
		}
	})
	t.Run("the fleet default itself", func(t *testing.T) {
		p, fs, err := ExplainPolicy(DefaultPolicyName, defDoc, own)
		if err != nil || p.Dependency != DefaultPolicyName || p.Breaker.MinimumRequests != 30 {
			t.Fatalf("ExplainPolicy = %+v, %v", p, err)
		}
		if f := source(fs, "breaker.minimumRequests"); f.Source != SourceFleetDefault || f.Inherited != "20" {
			t.Errorf("breaker.minimumRequests = %+v", f)
		}
	})
	t.Run("a document that does not parse", func(t *testing.T) {
		if _, _, err := ExplainPolicy("db", defDoc, []byte(`{"breaker":`)); err == nil {
			t.Error("a broken own policy was explained")
		}
		if _, _, err := ExplainPolicy("db", []byte(`{"breaker":{}}`), nil); err == nil {
			t.Error("an incomplete fleet default was explained")
		}
	})
}
