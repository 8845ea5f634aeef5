package idempotency

import (
	"testing"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/fusebox-dev/fusebox/sharedstate/sstest"
)

// TestREADMEListsEveryMetric keeps the README's idempotency metrics and
// the code in step, both ways.
func TestREADMEListsEveryMetric(t *testing.T) {
	reg := prometheus.NewRegistry()
	if _, err := New(memStore(t, MemoryConfig{Registerer: reg}), WithRegisterer(reg)); err != nil {
		t.Fatal(err)
	}
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	var code []string
	for _, mf := range mfs {
		code = append(code, mf.GetName())
	}
	if len(code) != 8 {
		t.Fatalf("gathered %d metrics (%v), want all 8", len(code), code)
	}
	sstest.READMEListsMetrics(t, "../README.md", "fusebox_idempotency_", "the idempotency package", code)
}
