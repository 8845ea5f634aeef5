package procs

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"sync"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"

	"github.com/fusebox-dev/fusebox/protocol/fuseboxv1"
)

// metrics is one scrape of an agent's /metrics.
type metrics map[string]*dto.MetricFamily

// scrape reads p's /metrics.
func (f *fleet) scrape(ctx context.Context, p *proc) (metrics, error) {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+p.httpAt+"/metrics", nil)
	if err != nil {
		return nil, err
	}
	resp, err := f.http.Do(req)
	if err != nil {
		return nil, fmt.Errorf("%s: /metrics: %w", p.name, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		io.Copy(io.Discard, resp.Body)
		return nil, fmt.Errorf("%s: /metrics: %s", p.name, resp.Status)
	}
	parser := expfmt.NewTextParser(model.UTF8Validation)
	mfs, err := parser.TextToMetricFamilies(resp.Body)
	if err != nil {
		return nil, fmt.Errorf("%s: /metrics: %w", p.name, err)
	}
	return metrics(mfs), nil
}

// value returns the value of the series of family name whose labels
// include the given name, value pairs (0 when there is none).
func (m metrics) value(name string, labels ...string) float64 {
	mf := m[name]
	if mf == nil {
		return 0
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
		if c := s.GetCounter(); c != nil {
			return c.GetValue()
		}
		return s.GetGauge().GetValue()
	}
	return 0
}

// observers are one Session per agent, following one dependency: the
// snapshots an agent pushes to its clients, which clientlib decides from.
type observers struct {
	cancel context.CancelFunc
	wg     sync.WaitGroup

	mu    sync.Mutex
	first []time.Time // when each agent's snapshot first showed the breaker open
	errs  []error     // why each observer stopped early
	left  int
	done  chan struct{} // closed when every agent opened
}

// observe opens the sessions and waits for every agent's Welcome (after
// it, the agent pushes every change of dep's snapshot).
func (f *fleet) observe(ctx context.Context, dep string) (*observers, error) {
	ctx, cancel := context.WithCancel(ctx)
	o := &observers{cancel: cancel, first: make([]time.Time, len(f.procs)), errs: make([]error, len(f.procs)),
		left: len(f.procs), done: make(chan struct{})}
	welcomed := make(chan error, len(f.procs))
	for _, p := range f.procs {
		o.wg.Add(1)
		go func() {
			defer o.wg.Done()
			err := o.follow(ctx, p, dep, welcomed)
			if err != nil && ctx.Err() == nil {
				o.mu.Lock()
				o.errs[p.i] = fmt.Errorf("%s: session: %w", p.name, err)
				o.mu.Unlock()
			}
		}()
	}
	for range f.procs {
		if err := <-welcomed; err != nil {
			o.stop()
			return nil, fmt.Errorf("scale-procs: observer session: %w", err)
		}
	}
	return o, nil
}

// follow runs agent p's session until its snapshot of dep shows the
// breaker open or ctx ends. It sends one value to welcomed.
func (o *observers) follow(ctx context.Context, p *proc, dep string, welcomed chan<- error) (err error) {
	sent := false
	defer func() {
		if !sent {
			welcomed <- fmt.Errorf("%s: %w", p.name, err)
		}
	}()
	stream, err := p.api.Session(ctx)
	if err != nil {
		return err
	}
	hello := &fuseboxv1.SessionRequest{Msg: &fuseboxv1.SessionRequest_Hello{Hello: &fuseboxv1.Hello{
		Service: "scale-procs", Instance: "observer", Dependencies: []string{dep}}}}
	if err := stream.Send(hello); err != nil {
		return err
	}
	for {
		resp, err := stream.Recv()
		if err != nil {
			return err
		}
		now := time.Now()
		if resp.GetWelcome() != nil && !sent {
			sent = true
			welcomed <- nil
		}
		for _, s := range resp.GetUpdate().GetSnapshots() {
			if s.GetDependency() != dep {
				continue
			}
			if st := s.GetState(); st == fuseboxv1.BreakerState_BREAKER_STATE_OPEN || st == fuseboxv1.BreakerState_BREAKER_STATE_HALF_OPEN {
				o.markOpen(p.i, now)
				return nil
			}
		}
	}
}

func (o *observers) markOpen(i int, at time.Time) {
	o.mu.Lock()
	defer o.mu.Unlock()
	if !o.first[i].IsZero() {
		return
	}
	o.first[i] = at
	o.left--
	if o.left == 0 {
		close(o.done)
	}
}

// opened returns how many agents opened so far.
func (o *observers) opened() int {
	o.mu.Lock()
	defer o.mu.Unlock()
	return len(o.first) - o.left
}

// wait waits until every agent opened or ctx ends, and returns when each
// opened (zero: not yet).
func (o *observers) wait(ctx context.Context) ([]time.Time, error) {
	var err error
	select {
	case <-o.done:
	case <-ctx.Done():
		err = ctx.Err()
	}
	o.mu.Lock()
	defer o.mu.Unlock()
	first := append([]time.Time(nil), o.first...)
	if err != nil {
		for i, e := range o.errs {
			if e != nil && first[i].IsZero() {
				err = fmt.Errorf("%w; %v", err, e)
				break
			}
		}
		err = fmt.Errorf("%d agents never held the breaker open: %w", o.left, err)
	}
	return first, err
}

// stop ends the sessions and waits for them.
func (o *observers) stop() {
	o.cancel()
	o.wg.Wait()
}
