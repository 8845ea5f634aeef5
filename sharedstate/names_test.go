package sharedstate

import (
	"errors"
	"fmt"
	"strings"
	"testing"
)

func TestValidateDependencyName(t *testing.T) {
	for _, tc := range []struct {
		name string
		ok   bool
	}{
		{"shipping-api", true},
		{"a", true},
		{"payments.svc.cluster.local:443/v1_x", true},
		{strings.Repeat("a", 128), true},
		{strings.Repeat("a", 129), false},
		{"", false},
		{"has space", false},
		{"tab\t", false},
		{"ümlaut", false},
		{"semi;colon", false},
		{DefaultPolicyName, false},
	} {
		t.Run(fmt.Sprintf("%.20q", tc.name), func(t *testing.T) {
			err := ValidateDependencyName(tc.name)
			if (err == nil) != tc.ok {
				t.Fatalf("ValidateDependencyName = %v, want ok=%v", err, tc.ok)
			}
			if err != nil && !errors.Is(err, ErrInvalidDependencyName) {
				t.Fatalf("error %v does not match ErrInvalidDependencyName", err)
			}
		})
	}
}

func TestMaxDependencies(t *testing.T) {
	e := newTestEngine(t, "a", "", NewManualClock(t0), func(c *EngineConfig) { c.MaxDependencies = 3 })
	for i := range 3 {
		if err := e.Record(fmt.Sprintf("dep-%d", i), FirstAttempt, Success); err != nil {
			t.Fatalf("Record dep-%d: %v", i, err)
		}
	}
	err := e.Record("dep-3", FirstAttempt, Success)
	var tm *TooManyDependenciesError
	if !errors.Is(err, ErrTooManyDependencies) || !errors.As(err, &tm) || tm.Limit != 3 || tm.Dependency != "dep-3" {
		t.Fatalf("Record past the cap = %v", err)
	}
	if e.Record("dep-0", FirstAttempt, Failure) != nil {
		t.Fatal("a known dependency was refused")
	}
	if e.ApplyRow(NodeWindow{Node: "b", Dependency: "dep-4", Seq: 1}) {
		t.Error("ApplyRow created a dependency past the cap")
	}
	if e.ApplyRecord(BreakerRecord{Dependency: "dep-5", Generation: 1, State: Open}) {
		t.Error("ApplyRecord created a dependency past the cap")
	}
	if err := e.SetOverride("dep-6", &Override{State: ForcedOpen}); !errors.Is(err, ErrTooManyDependencies) {
		t.Errorf("SetOverride past the cap = %v", err)
	}
	if d := e.Decide("dep-7", FirstAttempt); d != allow {
		t.Errorf("Decide on an untracked dependency = %v, want allow", d)
	}
	if d := e.AcquireRetry("dep-7"); d != allow {
		t.Errorf("AcquireRetry on an untracked dependency = %v, want allow", d)
	}
	if err := e.Record("bad name", FirstAttempt, Success); !errors.Is(err, ErrInvalidDependencyName) {
		t.Errorf("Record(bad name) = %v", err)
	}
	st := e.Stats()
	if st.Dependencies != 3 || st.RefusedDependencies < 4 {
		t.Errorf("Stats = %+v", st)
	}
	if got := e.Dependencies(); len(got) != 3 {
		t.Errorf("Dependencies = %v", got)
	}
}

func TestHostDependencyName(t *testing.T) {
	for in, want := range map[string]string{
		"":                       "unknown-host",
		"shipping.internal":      "shipping.internal",
		"127.0.0.1:8080":         "127.0.0.1:8080",
		"[::1]:8080":             "_::1_:8080",
		"héllo":                  "h__llo",
		strings.Repeat("a", 200): strings.Repeat("a", MaxDependencyNameLen),
	} {
		got := HostDependencyName(in)
		if got != want {
			t.Errorf("HostDependencyName(%q) = %q, want %q", in, got, want)
		}
		if in != "" && ValidateDependencyName(got) != nil {
			t.Errorf("HostDependencyName(%q) = %q, which is not a valid name", in, got)
		}
	}
}
