package sharedstate

import (
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"time"
)

const designExample = `{"dependency": "shipping-api",
 "breaker": {"failureRateThreshold": 0.5, "slowCallRateThreshold": 1.0, "slowCallDuration": "2s",
             "minimumRequests": 20, "minFailingNodes": 2, "window": "10s", "openDuration": "2s", "maxOpenDuration": "2m",
             "halfOpenProbes": 3, "probeSuccessThreshold": 3, "probeTimeout": "5s",
             "scope": "fleet", "mode": "enforce"},
 "retry":   {"maxAttempts": 3, "perAttemptTimeout": "500ms",
             "backoff": {"base": "100ms", "max": "5s", "jitter": "full"},
             "budget": {"ratio": 0.1, "minRetriesPerSecond": 10}}}`

func TestParsePolicyDesignExample(t *testing.T) {
	for _, tc := range []struct {
		name string
		json string
	}{
		{"without schema", designExample},
		{"with schema", strings.Replace(designExample, `{"dependency"`, `{"schema": 1, "dependency"`, 1)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p, err := ParsePolicy([]byte(tc.json))
			if err != nil {
				t.Fatalf("ParsePolicy: %v", err)
			}
			want := DefaultPolicy()
			want.Dependency = "shipping-api"
			if p != want {
				t.Fatalf("got %+v\nwant %+v", p, want)
			}
		})
	}
}

func TestPolicyJSONRoundTrip(t *testing.T) {
	p := DefaultPolicy()
	data, err := json.Marshal(p)
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{`"schema":1`, `"perAttemptTimeout":"500ms"`, `"maxOpenDuration":"2m0s"`, `"dependency":"_default"`} {
		if !strings.Contains(string(data), want) {
			t.Errorf("marshalled policy lacks %s: %s", want, data)
		}
	}
	back, err := ParsePolicy(data)
	if err != nil {
		t.Fatalf("ParsePolicy(Marshal(default)): %v", err)
	}
	if back != p {
		t.Fatalf("round trip changed the policy:\n%+v\n%+v", back, p)
	}
}

func TestParsePolicyStrict(t *testing.T) {
	for _, tc := range []struct {
		name, json, want string
	}{
		{"unknown top-level field", strings.Replace(designExample, `"dependency"`, `"colour": "red", "dependency"`, 1), "unknown field"},
		{"unknown nested field", strings.Replace(designExample, `"jitter": "full"`, `"jitter": "full", "cap": "1s"`, 1), "unknown field"},
		{"number for a duration", strings.Replace(designExample, `"window": "10s"`, `"window": 10`, 1), `breaker.window: must be a duration string such as "500ms" or "2m", got 10`},
		{"bad duration string", strings.Replace(designExample, `"window": "10s"`, `"window": "ten seconds"`, 1), "invalid duration"},
		{"trailing data", designExample + ` {}`, "trailing data"},
		{"schema 2", strings.Replace(designExample, `{"dependency"`, `{"schema": 2, "dependency"`, 1), "schema: must be 1, got 2"},
		{"missing field", strings.Replace(designExample, `"minimumRequests": 20, `, ``, 1), "breaker.minimumRequests: is required"},
		{"missing dependency", strings.Replace(designExample, `"dependency": "shipping-api",`, ``, 1), "dependency: is required"},
		{"not an object", `[1,2]`, "must be a JSON object, got [1,2]"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := ParsePolicy([]byte(tc.json))
			if err == nil {
				t.Fatal("ParsePolicy accepted it")
			}
			if !errors.Is(err, ErrInvalidPolicy) {
				t.Errorf("error %v does not match ErrInvalidPolicy", err)
			}
			if !strings.Contains(err.Error(), tc.want) {
				t.Errorf("error %q does not mention %q", err, tc.want)
			}
		})
	}
}

func TestPolicyValidateRules(t *testing.T) {
	for _, tc := range []struct {
		name   string
		mutate func(p *Policy)
		want   string // one line of the error
	}{
		{"schema", func(p *Policy) { p.Schema = 0 }, "schema: must be 1, got 0"},
		{"dependency empty", func(p *Policy) { p.Dependency = "" }, `dependency: must be _default or a dependency name`},
		{"dependency invalid", func(p *Policy) { p.Dependency = "a b" }, `dependency: must be _default or a dependency name (1–128 characters of [A-Za-z0-9._:/-]), got "a b"`},
		{"failure rate above 1", func(p *Policy) { p.Breaker.FailureRateThreshold = 1.5 }, "breaker.failureRateThreshold: must be in (0,1], got 1.5"},
		{"failure rate zero", func(p *Policy) { p.Breaker.FailureRateThreshold = 0 }, "breaker.failureRateThreshold: must be in (0,1], got 0"},
		{"slow rate negative", func(p *Policy) { p.Breaker.SlowCallRateThreshold = -0.1 }, "breaker.slowCallRateThreshold: must be in (0,1], got -0.1"},
		{"slow call duration", func(p *Policy) { p.Breaker.SlowCallDuration = 0 }, "breaker.slowCallDuration: must be positive, got 0s"},
		{"minimum requests", func(p *Policy) { p.Breaker.MinimumRequests = 0 }, "breaker.minimumRequests: must be between 1 and 1000000, got 0"},
		{"min failing nodes", func(p *Policy) { p.Breaker.MinFailingNodes = 0 }, "breaker.minFailingNodes: must be between 1 and 100000, got 0"},
		{"window too short", func(p *Policy) { p.Breaker.Window = Duration(500 * time.Millisecond) }, "breaker.window: must be between 1s and 1h0m0s, got 500ms"},
		{"window too long", func(p *Policy) { p.Breaker.Window = Duration(2 * time.Hour) }, "breaker.window: must be between 1s and 1h0m0s, got 2h0m0s"},
		{"open duration", func(p *Policy) { p.Breaker.OpenDuration = -1 }, "breaker.openDuration: must be positive, got -1ns"},
		{"max open duration below open duration", func(p *Policy) { p.Breaker.MaxOpenDuration = Duration(time.Second) }, "breaker.maxOpenDuration: must be at least breaker.openDuration (2s), got 1s"},
		{"max open duration too long", func(p *Policy) { p.Breaker.MaxOpenDuration = Duration(48 * time.Hour) }, "breaker.maxOpenDuration: must be at most 24h0m0s, got 48h0m0s"},
		{"half-open probes", func(p *Policy) { p.Breaker.HalfOpenProbes = 0 }, "breaker.halfOpenProbes: must be between 1 and 1000, got 0"},
		{"probe success threshold", func(p *Policy) { p.Breaker.ProbeSuccessThreshold = 1001 }, "breaker.probeSuccessThreshold: must be between 1 and 1000, got 1001"},
		{"probe timeout", func(p *Policy) { p.Breaker.ProbeTimeout = 0 }, "breaker.probeTimeout: must be positive, got 0s"},
		{"probe timeout below attempt timeout", func(p *Policy) { p.Breaker.ProbeTimeout = Duration(100 * time.Millisecond) }, "breaker.probeTimeout: must be at least retry.perAttemptTimeout (500ms)"},
		{"scope", func(p *Policy) { p.Breaker.Scope = "region" }, `breaker.scope: must be one of fleet, zone, node, got "region"`},
		{"mode", func(p *Policy) { p.Breaker.Mode = "" }, `breaker.mode: must be one of enforce, shadow, got ""`},
		{"fleet max open duration", func(p *Policy) { p.Breaker.FleetMaxOpenDuration = 0 }, "breaker.fleetMaxOpenDuration: must be positive, got 0s"},
		{"ramp duration negative", func(p *Policy) { p.Breaker.RampDuration = -1 }, "breaker.rampDuration: must be between 0s (no ramp) and 1h0m0s, got -1ns"},
		{"ramp duration too long", func(p *Policy) { p.Breaker.RampDuration = Duration(2 * time.Hour) }, "breaker.rampDuration: must be between 0s (no ramp) and 1h0m0s, got 2h0m0s"},
		{"ramp start", func(p *Policy) { p.Breaker.RampStart = 0 }, "breaker.rampStart: must be in (0,1], got 0"},
		{"max attempts", func(p *Policy) { p.Retry.MaxAttempts = 0 }, "retry.maxAttempts: must be between 1 and 100, got 0"},
		{"per-attempt timeout", func(p *Policy) { p.Retry.PerAttemptTimeout = 0 }, "retry.perAttemptTimeout: must be positive, got 0s"},
		{"backoff base", func(p *Policy) { p.Retry.Backoff.Base = -1 }, "retry.backoff.base: must be between 0s and 1h0m0s, got -1ns"},
		{"backoff max below base", func(p *Policy) { p.Retry.Backoff.Max = Duration(time.Millisecond) }, "retry.backoff.max: must be between retry.backoff.base (100ms) and 1h0m0s, got 1ms"},
		{"jitter", func(p *Policy) { p.Retry.Backoff.Jitter = "random" }, `retry.backoff.jitter: must be one of full, equal, decorrelated, none, got "random"`},
		{"budget ratio", func(p *Policy) { p.Retry.Budget.Ratio = 2 }, "retry.budget.ratio: must be in [0,1], got 2"},
		{"budget floor", func(p *Policy) { p.Retry.Budget.MinRetriesPerSecond = -1 }, "retry.budget.minRetriesPerSecond: must be between 0 and 1000000, got -1"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := DefaultPolicy()
			tc.mutate(&p)
			err := p.Validate()
			var ve *ValidationError
			if !errors.As(err, &ve) {
				t.Fatalf("Validate() = %v, want a *ValidationError", err)
			}
			if !errors.Is(err, ErrInvalidPolicy) {
				t.Errorf("error does not match ErrInvalidPolicy")
			}
			found := false
			for _, line := range strings.Split(err.Error(), "\n") {
				if strings.HasPrefix(line, tc.want) {
					found = true
				}
			}
			if !found {
				t.Errorf("error lines:\n%v\nwant a line starting %q", err, tc.want)
			}
		})
	}
}

func TestPolicyValidateListsEveryViolation(t *testing.T) {
	p := DefaultPolicy()
	p.Breaker.FailureRateThreshold = 1.5
	p.Retry.MaxAttempts = 0
	p.Breaker.Scope = "galaxy"
	err := p.Validate()
	var ve *ValidationError
	if !errors.As(err, &ve) {
		t.Fatalf("Validate() = %v", err)
	}
	if len(ve.Violations) != 3 {
		t.Fatalf("got %d violations, want 3: %v", len(ve.Violations), err)
	}
	want := "breaker.failureRateThreshold: must be in (0,1], got 1.5\n" +
		"breaker.scope: must be one of fleet, zone, node, got \"galaxy\"\n" +
		"retry.maxAttempts: must be between 1 and 100, got 0"
	if err.Error() != want {
		t.Fatalf("Error() =\n%s\nwant\n%s", err, want)
	}
	if v := ve.Violations[0]; v.Field != "breaker.failureRateThreshold" || v.Value != "1.5" {
		t.Errorf("first violation = %+v", v)
	}
	if DefaultPolicy().Validate() != nil {
		t.Errorf("DefaultPolicy is invalid: %v", DefaultPolicy().Validate())
	}
}

func TestDecodePolicyOverDefault(t *testing.T) {
	def := DefaultPolicy()
	for _, tc := range []struct {
		name  string
		patch string
		want  func(p *Policy)
	}{
		{"empty patch", `{}`, func(p *Policy) {}},
		{"dependency only", `{"dependency": "shipping-api"}`, func(p *Policy) { p.Dependency = "shipping-api" }},
		{"one breaker field", `{"dependency": "x", "breaker": {"minimumRequests": 5}}`, func(p *Policy) {
			p.Dependency = "x"
			p.Breaker.MinimumRequests = 5
		}},
		{"nested backoff field", `{"retry": {"backoff": {"jitter": "none"}}}`, func(p *Policy) { p.Retry.Backoff.Jitter = JitterNone }},
		{"budget and mode", `{"retry": {"budget": {"ratio": 0.2}}, "breaker": {"mode": "shadow", "window": "30s"}}`, func(p *Policy) {
			p.Retry.Budget.Ratio = 0.2
			p.Breaker.Mode = ModeShadow
			p.Breaker.Window = Duration(30 * time.Second)
		}},
		{"zero values are values", `{"retry": {"budget": {"minRetriesPerSecond": 0}}}`, func(p *Policy) { p.Retry.Budget.MinRetriesPerSecond = 0 }},
		{"schema", `{"schema": 1, "retry": {"maxAttempts": 1}}`, func(p *Policy) { p.Retry.MaxAttempts = 1 }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := DecodePolicy(def, []byte(tc.patch))
			if err != nil {
				t.Fatalf("DecodePolicy: %v", err)
			}
			want := def
			tc.want(&want)
			if got != want {
				t.Fatalf("got  %+v\nwant %+v", got, want)
			}
			if err := got.Validate(); err != nil {
				t.Fatalf("merged policy invalid: %v", err)
			}
		})
	}
	t.Run("a full policy's JSON over anything reproduces it", func(t *testing.T) {
		p := DefaultPolicy()
		p.Dependency = "d"
		p.Breaker.HalfOpenProbes = 7
		doc, _ := json.Marshal(p)
		if got, err := DecodePolicy(Policy{}, doc); err != nil || got != p {
			t.Fatalf("got %+v, %v", got, err)
		}
	})
	t.Run("unknown fields and schema 2 are refused", func(t *testing.T) {
		for _, bad := range []string{`{"breaker": {"minRequests": 1}}`, `{"schema": 2}`, `{"retry": {"perAttemptTimeout": 5}}`} {
			if _, err := DecodePolicy(def, []byte(bad)); !errors.Is(err, ErrInvalidPolicy) {
				t.Errorf("DecodePolicy(%s) = %v, want ErrInvalidPolicy", bad, err)
			}
		}
	})
}

func TestOpenDurationFor(t *testing.T) {
	b := DefaultPolicy().Breaker // 2s, max 2m
	for _, tc := range []struct {
		openCount uint32
		want      time.Duration
	}{
		{0, 2 * time.Second}, {1, 2 * time.Second}, {2, 4 * time.Second}, {3, 8 * time.Second},
		{4, 16 * time.Second}, {5, 32 * time.Second}, {6, 64 * time.Second}, {7, 2 * time.Minute}, {1 << 31, 2 * time.Minute},
	} {
		if got := b.OpenDurationFor(tc.openCount); got != tc.want {
			t.Errorf("OpenDurationFor(%d) = %v, want %v", tc.openCount, got, tc.want)
		}
	}
}

func TestWorstCaseBackoffAndLint(t *testing.T) {
	p := DefaultPolicy() // 3 × 500ms, backoff 100ms then 200ms
	if got := p.Retry.WorstCaseBackoff(); got != 300*time.Millisecond {
		t.Fatalf("WorstCaseBackoff = %v, want 300ms", got)
	}
	dec := p
	dec.Retry.Backoff.Jitter = JitterDecorrelated // 100ms then 300ms
	if got := dec.Retry.WorstCaseBackoff(); got != 400*time.Millisecond {
		t.Fatalf("decorrelated WorstCaseBackoff = %v, want 400ms", got)
	}
	capped := p
	capped.Retry.MaxAttempts = 5
	capped.Retry.Backoff.Max = Duration(150 * time.Millisecond) // 100 + 150 + 150 + 150
	if got := capped.Retry.WorstCaseBackoff(); got != 550*time.Millisecond {
		t.Fatalf("capped WorstCaseBackoff = %v, want 550ms", got)
	}

	noBudget := p
	noBudget.Retry.Budget = BudgetPolicy{}
	shadow := p
	shadow.Breaker.Mode = ModeShadow
	for _, tc := range []struct {
		name     string
		p        Policy
		deadline time.Duration
		want     []string // substrings, one per warning, in order
	}{
		{"fits", p, 2 * time.Second, nil},
		{"exactly fits", p, 1800 * time.Millisecond, nil},
		{"no deadline", p, 0, nil},
		{"does not fit", p, time.Second, []string{"3 × 500ms + 300ms = 1.8s exceeds the deadline 1s; only 1 attempt(s) fit"}},
		{"attempt longer than deadline", p, 400 * time.Millisecond, []string{"a single attempt can outlive its caller", "only 0 attempt(s) fit"}},
		{"budget admits nothing", noBudget, 0, []string{"no retry is ever admitted"}},
		{"shadow", shadow, 0, []string{"no call is ever rejected"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := tc.p.Lint(tc.deadline)
			if len(got) != len(tc.want) {
				t.Fatalf("Lint = %q, want %d warnings", got, len(tc.want))
			}
			for i := range got {
				if !strings.Contains(got[i], tc.want[i]) {
					t.Errorf("warning %d = %q, want it to contain %q", i, got[i], tc.want[i])
				}
			}
		})
	}
}
