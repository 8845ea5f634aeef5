package sharedstate

import (
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"time"

	"pgregory.net/rapid"
)

var t0 = time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)

func TestMergeTable(t *testing.T) {
	rec := func(gen uint64, st BreakerState, origin string) BreakerRecord {
		return BreakerRecord{Dependency: "d", Generation: gen, State: st, Origin: origin, Since: t0}
	}
	for _, tc := range []struct {
		name string
		a, b BreakerRecord
		want BreakerRecord
	}{
		{"higher generation wins", rec(2, Closed, "z"), rec(1, Open, "a"), rec(2, Closed, "z")},
		{"open beats closed on a tie", rec(3, Closed, "a"), rec(3, Open, "z"), rec(3, Open, "z")},
		{"lower origin wins on a tie", rec(3, Open, "b"), rec(3, Open, "a"), rec(3, Open, "a")},
		{"identical", rec(1, Open, "a"), rec(1, Open, "a"), rec(1, Open, "a")},
	} {
		t.Run(tc.name, func(t *testing.T) {
			for _, got := range []BreakerRecord{Merge(tc.a, tc.b), Merge(tc.b, tc.a)} {
				if !SameRecord(got, tc.want) {
					t.Errorf("Merge = %+v, want %+v", got, tc.want)
				}
			}
		})
	}
}

// genRecord draws records from small domains, so that ties on every field happen.
func genRecord() *rapid.Generator[BreakerRecord] {
	return rapid.Custom(func(t *rapid.T) BreakerRecord {
		return BreakerRecord{
			Dependency: "d",
			Generation: rapid.Uint64Range(0, 3).Draw(t, "gen"),
			State:      rapid.SampledFrom([]BreakerState{Closed, Open}).Draw(t, "state"),
			Since:      t0.Add(time.Duration(rapid.IntRange(0, 2).Draw(t, "since")) * time.Second),
			OpenCount:  uint32(rapid.IntRange(0, 2).Draw(t, "openCount")),
			Origin:     rapid.SampledFrom([]string{"a", "b", "c"}).Draw(t, "origin"),
			Reason:     rapid.SampledFrom([]string{"", "x", "y"}).Draw(t, "reason"),
		}
	})
}

// genNear draws a record unrelated to r, or r with one field redrawn, so that
// records tying on all fields but one are common.
func genNear(t *rapid.T, r BreakerRecord, label string) BreakerRecord {
	fresh := genRecord().Draw(t, label)
	switch rapid.IntRange(0, 7).Draw(t, label+"-field") {
	case 0:
		return fresh
	case 1:
		r.Generation = fresh.Generation
	case 2:
		r.State = fresh.State
	case 3:
		r.Since = fresh.Since
	case 4:
		r.OpenCount = fresh.OpenCount
	case 5:
		r.Origin = fresh.Origin
	case 6:
		r.Reason = fresh.Reason
	case 7:
		r.Since = r.Since.In(time.FixedZone("elsewhere", 3600)) // same instant, other location
	}
	return r
}

func TestMergeLaws(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		a := genRecord().Draw(t, "a")
		b := genNear(t, a, "b")
		c := genNear(t, rapid.SampledFrom([]BreakerRecord{a, b}).Draw(t, "base"), "c")
		if !SameRecord(Merge(a, b), Merge(b, a)) {
			t.Fatalf("not commutative: %+v vs %+v", Merge(a, b), Merge(b, a))
		}
		if !SameRecord(Merge(Merge(a, b), c), Merge(a, Merge(b, c))) {
			t.Fatalf("not associative")
		}
		if !SameRecord(Merge(a, a), a) {
			t.Fatalf("not idempotent")
		}
		m := Merge(a, b)
		if !SameRecord(m, a) && !SameRecord(m, b) {
			t.Fatalf("Merge invented a record")
		}
		if m.Generation != max(a.Generation, b.Generation) {
			t.Fatalf("Merge lost the higher generation")
		}
	})
}

func TestBreakerRecordValidate(t *testing.T) {
	good := BreakerRecord{Dependency: "d", Generation: 1, State: Open, Origin: "n"}
	for _, tc := range []struct {
		name   string
		mutate func(r *BreakerRecord)
		ok     bool
	}{
		{"good", func(r *BreakerRecord) {}, true},
		{"bad dependency", func(r *BreakerRecord) { r.Dependency = "" }, false},
		{"half-open is derived, never gossiped", func(r *BreakerRecord) { r.State = HalfOpen }, false},
		{"long reason", func(r *BreakerRecord) { r.Reason = strings.Repeat("x", MaxReasonLen+1) }, false},
		{"long origin", func(r *BreakerRecord) { r.Origin = strings.Repeat("x", MaxNodeNameLen+1) }, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := good
			tc.mutate(&r)
			if err := r.Validate(); (err == nil) != tc.ok {
				t.Fatalf("Validate() = %v, want ok=%v", err, tc.ok)
			}
		})
	}
}

func TestOverrideJSONAndValidate(t *testing.T) {
	o, err := ParseOverride([]byte(`{"state": "forced-open", "reason": "incident 42", "actor": "alice",
		"created": "2030-01-01T00:00:00Z", "expires": "2030-01-01T01:00:00Z"}`))
	if err != nil {
		t.Fatalf("ParseOverride: %v", err)
	}
	if o.State != ForcedOpen || o.Actor != "alice" || !o.Expires.Equal(t0.Add(time.Hour)) {
		t.Fatalf("parsed %+v", o)
	}
	if !o.ActiveAt(t0) || o.ActiveAt(t0.Add(time.Hour)) {
		t.Errorf("ActiveAt wrong around expiry")
	}
	data, _ := json.Marshal(Override{State: ForcedClosed, Created: t0})
	if !strings.Contains(string(data), `"state":"forced-closed"`) || strings.Contains(string(data), "expires") {
		t.Errorf("Marshal = %s", data)
	}
	for _, bad := range []string{
		`{"state": "open"}`,
		`{"state": "forced-open", "colour": 1}`,
		`{"state": "none"}`,
		`{"state": "forced-open", "created": "2030-01-01T00:00:00Z", "expires": "2029-01-01T00:00:00Z"}`,
	} {
		if _, err := ParseOverride([]byte(bad)); !errors.Is(err, ErrInvalidOverride) {
			t.Errorf("ParseOverride(%s) = %v, want ErrInvalidOverride", bad, err)
		}
	}
}

func TestEnumStrings(t *testing.T) {
	for _, tc := range []struct{ got, want string }{
		{ReasonNone.String(), "none"},
		{ReasonOpen.String(), "open"},
		{ReasonForcedOpen.String(), "forced-open"},
		{ReasonHalfOpenNoPermit.String(), "half-open-no-permit"},
		{ReasonBudgetExhausted.String(), "budget-exhausted"},
		{Allow.String(), "allow"},
		{AllowProbe.String(), "allow-as-probe"},
		{Reject.String(), "reject"},
		{reject(ReasonOpen).String(), "reject(open)"},
		{FirstAttempt.String(), "first-attempt"},
		{Retry.String(), "retry"},
		{Probe.String(), "probe"},
		{Slow.String(), "slow"},
		{HalfOpen.String(), "half-open"},
		{ForcedClosed.String(), "forced-closed"},
		// Every name, label and the form of a value out of range.
		{ReasonThrottled.String() + " " + ReasonRamp.String() + " " + Reason(7).String(), "throttled ramp reason(7)"},
		{ReasonHalfOpenNoPermit.LabelValue() + " " + ReasonNone.LabelValue() + " " + Reason(7).LabelValue(), "half_open_no_permit none unknown"},
		{Success.String() + " " + Failure.String() + " " + SlowFailure.String() + " " + Rejected.String() + " " + Outcome(5).String(),
			"success failure slow-failure rejected outcome(5)"},
		{AttemptKind(3).String() + " " + Verdict(3).String(), "attempt-kind(3) verdict(3)"},
		{Allow.LabelValue() + " " + AllowProbe.LabelValue() + " " + Reject.LabelValue() + " " + Verdict(3).LabelValue(), "allow allow_probe reject unknown"},
		{Closed.String() + " " + Open.String() + " " + BreakerState(3).String(), "closed open breaker-state(3)"},
		{Closed.LabelValue() + " " + HalfOpen.LabelValue() + " " + BreakerState(3).LabelValue(), "closed half_open unknown"},
		{OverrideNone.String() + " " + ForcedOpen.String() + " " + OverrideState(3).String(), "none forced-open override-state(3)"},
		{OverrideNone.LabelValue() + " " + ForcedClosed.LabelValue() + " " + OverrideState(3).LabelValue(), "none forced_closed unknown"},
	} {
		if tc.got != tc.want {
			t.Errorf("got %q, want %q", tc.got, tc.want)
		}
	}
}
