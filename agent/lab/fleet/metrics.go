package fleet

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
)

// Metrics is one reading of an agent's metrics, by family name.
type Metrics map[string]*dto.MetricFamily

// MetricsOf indexes gathered families (prometheus.Gatherer's result).
func MetricsOf(mfs []*dto.MetricFamily) Metrics {
	m := make(Metrics, len(mfs))
	for _, mf := range mfs {
		m[mf.GetName()] = mf
	}
	return m
}

// Value returns the value of the first series of family name whose labels
// include the given name, value pairs; false when there is none.
func (m Metrics) Value(name string, labels ...string) (float64, bool) {
	mf := m[name]
	if mf == nil {
		return 0, false
	}
next:
	for _, s := range mf.GetMetric() {
		have := map[string]string{}
		for _, lp := range s.GetLabel() {
			have[lp.GetName()] = lp.GetValue()
		}
		for i := 0; i+1 < len(labels); i += 2 {
			if have[labels[i]] != labels[i+1] {
				continue next
			}
		}
		switch {
		case s.GetGauge() != nil:
			return s.GetGauge().GetValue(), true
		case s.GetCounter() != nil:
			return s.GetCounter().GetValue(), true
		case s.GetUntyped() != nil:
			return s.GetUntyped().GetValue(), true
		}
	}
	return 0, false
}

// ScrapeTimeout bounds one Scrape.
const ScrapeTimeout = 10 * time.Second

// Scrape reads a /metrics page (Prometheus text format) at url.
func Scrape(ctx context.Context, hc *http.Client, url string) (Metrics, error) {
	ctx, cancel := context.WithTimeout(ctx, ScrapeTimeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return nil, err
	}
	resp, err := hc.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		io.Copy(io.Discard, io.LimitReader(resp.Body, 1<<20))
		return nil, fmt.Errorf("%s: %s", url, resp.Status)
	}
	parser := expfmt.NewTextParser(model.UTF8Validation)
	mfs, err := parser.TextToMetricFamilies(resp.Body)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", url, err)
	}
	return Metrics(mfs), nil
}
