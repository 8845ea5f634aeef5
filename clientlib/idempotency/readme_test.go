package idempotency

import (
	"os"
	"regexp"
	"slices"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
)

// TestREADMEListsEveryMetric keeps the README's idempotency metrics and
// the code in step, both ways.
func TestREADMEListsEveryMetric(t *testing.T) {
	readme, err := os.ReadFile("../../README.md")
	if err != nil {
		t.Fatal(err)
	}
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
	documented := regexp.MustCompile(`fusebox_idempotency_[a-z_]+`).FindAllString(string(readme), -1)
	for _, n := range code {
		if !slices.Contains(documented, n) {
			t.Errorf("README.md does not list %s", n)
		}
	}
	for _, n := range documented {
		if !slices.Contains(code, n) {
			t.Errorf("README.md names %s, which the idempotency package does not export", n)
		}
	}
}
