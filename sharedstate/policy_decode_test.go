package sharedstate

import (
	"errors"
	"strings"
	"testing"
)

// TestDecodeCollectsEveryProblem: one document with a wrong type, a bad
// duration, unknown fields and an out-of-range value is refused with every
// problem and its JSON path, on each entry point.
func TestDecodeCollectsEveryProblem(t *testing.T) {
	doc := `{"dependency": "shipping-api",
		"breaker": {"window": "abc", "minimumRequests": "20", "failureRateThreshold": 1.5, "colour": "red", "Mode": "shadow"},
		"retry": {"maxAttempts": 2.5, "backoff": {"base": 100, "cap": "1s"}, "budget": []},
		"extra": true}`
	wantDecode := []string{
		`breaker.Mode: unknown field (did you mean "breaker.mode"?)`,
		`breaker.colour: unknown field`,
		`breaker.minimumRequests: must be an integer, got "20"`,
		`breaker.window: invalid duration "abc"`,
		`retry.maxAttempts: must be an integer, got 2.5`,
		`retry.backoff.base: must be a duration string such as "500ms" or "2m", got 100`,
		`retry.backoff.cap: unknown field`,
		`retry.budget: must be a JSON object, got []`,
		`extra: unknown field`,
	}
	check := func(t *testing.T, err error, want []string) {
		t.Helper()
		var verr *ValidationError
		if !errors.As(err, &verr) || !errors.Is(err, ErrInvalidPolicy) {
			t.Fatalf("error %v (%T), want a *ValidationError matching ErrInvalidPolicy", err, err)
		}
		msg := err.Error()
		for _, w := range want {
			if !strings.Contains(msg, w) {
				t.Errorf("refusal lacks %q:\n%s", w, msg)
			}
		}
		if len(verr.Violations) != len(want) {
			t.Errorf("%d violations, want %d:\n%s", len(verr.Violations), len(want), msg)
		}
	}
	t.Run("DecodePolicy", func(t *testing.T) {
		_, err := DecodePolicy(DefaultPolicy(), []byte(doc))
		check(t, err, wantDecode)
	})
	withRule := append([]string{"breaker.failureRateThreshold: must be in (0,1], got 1.5"}, wantDecode...)
	t.Run("ParsePolicyOver", func(t *testing.T) {
		_, err := ParsePolicyOver(DefaultPolicy(), "shipping-api", []byte(doc))
		check(t, err, withRule)
	})
	t.Run("CheckPolicyDocument", func(t *testing.T) {
		vs, _ := CheckPolicyDocument([]byte(doc), DefaultPolicy(), 0)
		check(t, &ValidationError{Violations: vs}, withRule)
	})
	t.Run("ParsePolicy reports the missing fields too", func(t *testing.T) {
		_, err := ParsePolicy([]byte(strings.Replace(doc, "shipping-api", DefaultPolicyName, 1)))
		var verr *ValidationError
		if !errors.As(err, &verr) {
			t.Fatalf("error %v, want a *ValidationError", err)
		}
		for _, w := range append(withRule, "breaker.slowCallDuration: is required") {
			if !strings.Contains(err.Error(), w) {
				t.Errorf("refusal lacks %q:\n%s", w, err)
			}
		}
		// A field that did not decode is reported once, not also as missing.
		if n := strings.Count(err.Error(), "breaker.window:"); n != 1 {
			t.Errorf("breaker.window reported %d times:\n%s", n, err)
		}
	})
}

func TestDecodeRefusesMalformedDocuments(t *testing.T) {
	for _, doc := range []string{`{"breaker": `, `{} {}`, `[]`, `"x"`, `null`} {
		if _, err := DecodePolicy(DefaultPolicy(), []byte(doc)); !errors.Is(err, ErrInvalidPolicy) {
			t.Errorf("DecodePolicy(%s) = %v, want ErrInvalidPolicy", doc, err)
		}
	}
	// null sections and fields mean "inherit", as before.
	p, err := DecodePolicy(DefaultPolicy(), []byte(`{"breaker": null, "retry": {"maxAttempts": null, "budget": {"ratio": 0.2}}}`))
	want := DefaultPolicy()
	want.Retry.Budget.Ratio = 0.2
	if err != nil || p != want {
		t.Fatalf("DecodePolicy with nulls = %+v, %v", p, err)
	}
}

// TestMalformedJSONNamesLineAndColumn: a document that is not well-formed
// JSON is refused with the line and column of the problem, so that an
// operator finds it in a file of many lines.
func TestMalformedJSONNamesLineAndColumn(t *testing.T) {
	for _, tc := range []struct{ doc, want string }{
		{"{\n  \"breaker\": {\n    \"minimumRequests\": 5,\n  }\n}", "line 4, column 3: invalid character '}'"},
		{"{\"retry\": {\"maxAttempts\": 3x}}", "line 1, column 28: invalid character 'x'"},
		{"{\n  \"breaker\": {\"window\": \"10s\"\n", "line 2, column 30: the document ends before its JSON value does"},
		{"{\"breaker\": {}}\n  {\"retry\": {}}", "trailing data after the policy object at line 2, column 3"},
		{"{\"reason\": \"é\" ,, }", "line 1, column 17: invalid character ','"},
		{"   ", "the document is empty"},
	} {
		_, err := DecodePolicy(DefaultPolicy(), []byte(tc.doc))
		if !errors.Is(err, ErrInvalidPolicy) || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("DecodePolicy(%q) = %v, want an ErrInvalidPolicy saying %q", tc.doc, err, tc.want)
		}
		vs, _ := CheckPolicyDocument([]byte(tc.doc), DefaultPolicy(), 0)
		if len(vs) != 1 || !strings.Contains(vs[0].Message, tc.want) {
			t.Errorf("CheckPolicyDocument(%q) = %+v, want one violation saying %q", tc.doc, vs, tc.want)
		}
	}
}

// TestCheckPolicyDocumentAs: a document checked for the name it is to be
// written under gets the write's refusals: a bad name, a "dependency" field
// naming another dependency, an incomplete fleet default.
func TestCheckPolicyDocumentAs(t *testing.T) {
	for _, tc := range []struct {
		name, doc string
		want      []string
	}{
		{"shipping", `{"dependency":"shipping","retry":{"maxAttempts":3}}`, nil},
		{"shipping", `{"retry":{"maxAttempts":3}}`, nil},
		{"billing", `{"dependency":"shipping","retry":{"maxAttempts":0}}`,
			[]string{`dependency: must be billing in policies/billing, got "shipping"`, "retry.maxAttempts: must be between 1 and 100"}},
		{"bad name!", `{}`, []string{"dependency: fusebox: invalid dependency name"}},
		{DefaultPolicyName, `{"breaker":{"minimumRequests":5}}`, []string{"dependency: is required", "breaker.window: is required"}},
	} {
		vs, _ := CheckPolicyDocumentAs(tc.name, []byte(tc.doc), DefaultPolicy(), 0)
		var got []string
		for _, v := range vs {
			got = append(got, v.String())
		}
		all := strings.Join(got, "\n")
		if len(tc.want) == 0 && len(vs) > 0 {
			t.Errorf("%s %s: violations %s", tc.name, tc.doc, all)
		}
		for _, w := range tc.want {
			if !strings.Contains(all, w) {
				t.Errorf("%s %s: violations lack %q:\n%s", tc.name, tc.doc, w, all)
			}
		}
	}
}
