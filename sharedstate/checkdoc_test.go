package sharedstate

import (
	"strings"
	"testing"
	"time"
)

func TestCheckPolicyDocument(t *testing.T) {
	def := DefaultPolicy()
	tests := []struct {
		name           string
		doc            string
		deadline       time.Duration
		wantViolations []string // field of each violation
		wantWarning    string
	}{
		{"valid patch", `{"dependency":"shipping-api","retry":{"maxAttempts":2}}`, 0, nil, ""},
		{"patch with two violations", `{"dependency":"shipping-api","breaker":{"failureRateThreshold":1.5,"minimumRequests":0}}`, 0,
			[]string{"breaker.failureRateThreshold", "breaker.minimumRequests"}, ""},
		{"unknown field", `{"dependency":"x","breaker":{"nope":1}}`, 0, []string{""}, ""},
		{"lint against a deadline", `{"dependency":"x","retry":{"perAttemptTimeout":"900ms"}}`, time.Second, nil, "only 1 attempt(s) fit"},
		{"default must be complete", `{"dependency":"_default","retry":{"maxAttempts":2}}`, 0, []string{"?"}, ""},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			vs, ws := CheckPolicyDocument([]byte(tc.doc), def, tc.deadline)
			if len(vs) == 0 != (len(tc.wantViolations) == 0) {
				t.Fatalf("violations %+v, want %v", vs, tc.wantViolations)
			}
			if len(tc.wantViolations) > 0 && tc.wantViolations[0] != "?" {
				if len(vs) != len(tc.wantViolations) {
					t.Fatalf("violations %+v, want fields %v", vs, tc.wantViolations)
				}
				for i, f := range tc.wantViolations {
					if f != "" && vs[i].Field != f {
						t.Errorf("violation %d field %q, want %q", i, vs[i].Field, f)
					}
				}
			}
			if len(vs) > 0 && len(ws) != 0 {
				t.Errorf("warnings %v alongside violations", ws)
			}
			if tc.wantWarning != "" && !strings.Contains(strings.Join(ws, "\n"), tc.wantWarning) {
				t.Errorf("warnings %q, want one containing %q", ws, tc.wantWarning)
			}
		})
	}
}
