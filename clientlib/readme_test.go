package clientlib

import (
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/fusebox-dev/fusebox/sharedstate/sstest"
)

// TestREADMEListsEveryMetric keeps the README's metric list and the
// client's collector in step, both ways.
func TestREADMEListsEveryMetric(t *testing.T) {
	ch := make(chan *prometheus.Desc, 64)
	newMetrics(&Client{}).Describe(ch)
	close(ch)
	var code []string
	for d := range ch {
		s := d.String() // Desc{fqName: "name", …}
		name := s[strings.Index(s, `"`)+1:]
		code = append(code, name[:strings.Index(name, `"`)])
	}
	sstest.READMEListsMetrics(t, "README.md", "fusebox_client_", "clientlib", code)
}
