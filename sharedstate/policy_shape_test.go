package sharedstate

import (
	"strings"
	"testing"
	"time"
)

// designExampleShape is designExample (the policy of schema 1 as first
// released) with the sections added since: retry.hedge, throttle,
// concurrency.
var designExampleShape = strings.TrimSuffix(designExample, "}}") + `,
             "hedge": {"delay": "50ms", "maxHedges": 1}},
 "throttle":    {"enabled": true, "k": 1.5, "minRequests": 40},
 "concurrency": {"maxInFlight": 200}}`

func TestParsePolicyShapeSections(t *testing.T) {
	p, err := ParsePolicy([]byte(designExampleShape))
	if err != nil {
		t.Fatalf("ParsePolicy: %v", err)
	}
	want := DefaultPolicy()
	want.Dependency = "shipping-api"
	want.Retry.Hedge = HedgePolicy{Delay: Duration(50 * time.Millisecond), MaxHedges: 1}
	want.Throttle = ThrottlePolicy{Enabled: true, K: 1.5, MinRequests: 40}
	want.Concurrency = ConcurrencyPolicy{MaxInFlight: 200}
	if p != want {
		t.Fatalf("got %+v\nwant %+v", p, want)
	}
	if !p.Retry.Hedge.Enabled() || DefaultPolicy().Retry.Hedge.Enabled() {
		t.Errorf("HedgePolicy.Enabled: %v for the example, %v for the default", p.Retry.Hedge.Enabled(), DefaultPolicy().Retry.Hedge.Enabled())
	}
	if ws := p.Lint(2 * time.Second); len(ws) != 0 {
		t.Errorf("Lint warns about the example: %q", ws)
	}

	// A complete policy written before the sections existed still parses,
	// with the sections off.
	old, err := ParsePolicy([]byte(designExample))
	if err != nil {
		t.Fatalf("ParsePolicy(without the new sections): %v", err)
	}
	if old.Throttle != DefaultPolicy().Throttle || old.Concurrency.MaxInFlight != 0 || old.Retry.Hedge.Enabled() {
		t.Errorf("missing sections: got throttle %+v concurrency %+v hedge %+v", old.Throttle, old.Concurrency, old.Retry.Hedge)
	}
	// A section given in part is merged over the default's values.
	part, err := ParsePolicy([]byte(strings.Replace(designExample, `"dependency"`, `"throttle": {"enabled": true}, "dependency"`, 1)))
	if err != nil {
		t.Fatalf("ParsePolicy(throttle.enabled only): %v", err)
	}
	if part.Throttle != (ThrottlePolicy{Enabled: true, K: 2, MinRequests: 20}) {
		t.Errorf("throttle.enabled only: got %+v", part.Throttle)
	}
}

func TestShapeSectionsRefusedWithFieldPath(t *testing.T) {
	for _, tc := range []struct {
		name, from, to, want string
	}{
		{"k below 1", `"k": 1.5`, `"k": 0.5`, "throttle.k: must be between 1 and 100"},
		{"k NaN-like huge", `"k": 1.5`, `"k": 1000`, "throttle.k: must be between 1 and 100"},
		{"negative minRequests", `"minRequests": 40`, `"minRequests": -1`, "throttle.minRequests: must be between 0 and"},
		{"negative maxInFlight", `"maxInFlight": 200`, `"maxInFlight": -3`, "concurrency.maxInFlight: must be between 0 and"},
		{"too many hedges", `"maxHedges": 1`, `"maxHedges": 11`, "retry.hedge.maxHedges: must be between 0 and 10"},
		{"negative hedge delay", `"delay": "50ms"`, `"delay": "-5ms"`, "retry.hedge.delay: must be between 0s and 1h0m0s"},
		{"hedges without delay", `"delay": "50ms"`, `"delay": "0s"`, "retry.hedge.delay: must be positive when retry.hedge.maxHedges is set"},
		{"enabled not a bool", `"enabled": true`, `"enabled": "yes"`, "throttle.enabled: must be true or false"},
		{"unknown throttle field", `"k": 1.5`, `"k": 1.5, "p": 0.1`, "throttle.p: unknown field"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			doc := strings.Replace(designExampleShape, tc.from, tc.to, 1)
			if doc == designExampleShape {
				t.Fatalf("%q not in the example", tc.from)
			}
			vs, _ := CheckPolicyDocument([]byte(doc), DefaultPolicy(), 0)
			var lines []string
			found := false
			for _, v := range vs {
				lines = append(lines, v.String())
				found = found || strings.HasPrefix(v.String(), tc.want) || v.Field == "" && strings.Contains(v.Message, tc.want)
			}
			if !found {
				t.Fatalf("violations %q, want one starting %q", lines, tc.want)
			}
		})
	}
}

func TestShapeLint(t *testing.T) {
	p := DefaultPolicy()
	p.Retry.Hedge = HedgePolicy{Delay: p.Retry.PerAttemptTimeout, MaxHedges: 1}
	p.Retry.Budget = BudgetPolicy{}
	p.Throttle = ThrottlePolicy{Enabled: true, K: 1.05}
	ws := strings.Join(p.Lint(0), "\n")
	for _, want := range []string{"retry.hedge.delay: 500ms is not shorter than retry.perAttemptTimeout",
		"retry.hedge: the retry budget", "throttle.k: 1.05"} {
		if !strings.Contains(ws, want) {
			t.Errorf("Lint = %q, want a warning containing %q", ws, want)
		}
	}
}
