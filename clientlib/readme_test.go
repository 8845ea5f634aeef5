package clientlib

import (
	"os"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
)

// TestREADMEListsEveryMetric keeps the README's metric list and the
// client's collector in step, both ways.
func TestREADMEListsEveryMetric(t *testing.T) {
	readme, err := os.ReadFile("../README.md")
	if err != nil {
		t.Fatal(err)
	}
	ch := make(chan *prometheus.Desc, 64)
	newMetrics(&Client{}).Describe(ch)
	close(ch)
	var code []string
	for d := range ch {
		s := d.String() // Desc{fqName: "name", …}
		name := s[strings.Index(s, `"`)+1:]
		code = append(code, name[:strings.Index(name, `"`)])
	}
	documented := regexp.MustCompile(`fusebox_client_[a-z_]+`).FindAllString(string(readme), -1)
	for _, n := range code {
		if !slices.Contains(documented, n) {
			t.Errorf("README.md does not list %s", n)
		}
	}
	for _, n := range documented {
		if !slices.Contains(code, n) {
			t.Errorf("README.md names %s, which clientlib does not export", n)
		}
	}
}
