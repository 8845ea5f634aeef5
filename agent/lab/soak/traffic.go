package soak

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/fusebox-dev/fusebox/clientlib"
)

// depMode is how a dependency server answers.
type depMode int32

const (
	modeHealthy depMode = iota // 200
	modeFailing                // no answer for failingHang (callers time out), then 503
	modeDead                   // connections refused (listener closed)
)

// failingHang is how long a failing dependency keeps a request before its
// 503: longer than the policy's per-attempt timeout (500 ms), so calls
// time out and their deadlines are put to the test.
const failingHang = 2 * time.Second

// depServer is one of the soak's dependencies: an HTTP server on the ctl
// namespace's loopback.
type depServer struct {
	name string
	url  string
	srv  *http.Server
	mode atomic.Int32
	hits atomic.Int64 // requests answered (any status)

	once sync.Once
}

func startDepServer(name string) (*depServer, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, fmt.Errorf("soak: dependency %s: %w", name, err)
	}
	d := &depServer{name: name, url: "http://" + ln.Addr().String() + "/"}
	d.srv = &http.Server{
		Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			d.hits.Add(1)
			if depMode(d.mode.Load()) != modeHealthy {
				t := time.NewTimer(failingHang)
				select {
				case <-t.C:
				case <-r.Context().Done():
				}
				t.Stop()
				http.Error(w, "failing", http.StatusServiceUnavailable)
				return
			}
			io.WriteString(w, "ok\n")
		}),
		ReadHeaderTimeout: 5 * time.Second,
	}
	go d.srv.Serve(ln)
	return d, nil
}

// set changes how d answers; modeDead closes the listener for good.
func (d *depServer) set(m depMode) {
	d.mode.Store(int32(m))
	if m == modeDead {
		d.close()
	}
}

func (d *depServer) close() { d.once.Do(func() { d.srv.Close() }) }

// callers are the soak's services: one clientlib client per agent (over
// the agent's unix socket), each calling every dependency at rate calls
// per second (jittered), with deadline per call.
type callers struct {
	cancel context.CancelFunc
	wg     sync.WaitGroup
	hc     *http.Client
	cls    []*clientlib.Client
}

// startCallers starts the clients and their call loops; results go to m.
func startCallers(ctx context.Context, m *monitor, sockets []string, deps []*depServer, rate float64, deadline time.Duration) (*callers, error) {
	ctx, cancel := context.WithCancel(ctx)
	c := &callers{cancel: cancel, hc: &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 64, IdleConnTimeout: 30 * time.Second}}}
	names := make([]string, len(deps))
	for i, d := range deps {
		names[i] = d.name
	}
	for i, sock := range sockets {
		cl, err := clientlib.New(clientlib.Config{
			AgentAddress: "unix://" + sock, Service: "soak-caller", Instance: fmt.Sprintf("caller-%d", i),
			Dependencies: names,
		})
		if err != nil {
			c.stop()
			return nil, fmt.Errorf("soak: client of agent-%d: %w", i, err)
		}
		c.cls = append(c.cls, cl)
		agent := fmt.Sprintf("agent-%d", i)
		for _, d := range deps {
			dep := cl.Dependency(d.name)
			c.wg.Add(1)
			go func() {
				defer c.wg.Done()
				c.loop(ctx, m, agent, dep, d.url, rate, deadline)
			}()
		}
	}
	return c, nil
}

// loop calls dep at about rate per second until ctx ends.
func (c *callers) loop(ctx context.Context, m *monitor, agent string, dep *clientlib.Dependency, url string, rate float64, deadline time.Duration) {
	mean := time.Duration(float64(time.Second) / rate)
	t := time.NewTimer(time.Duration(rand.Int64N(int64(mean))))
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		c.one(ctx, m, agent, dep, url, deadline)
		t.Reset(mean/2 + time.Duration(rand.Int64N(int64(mean))))
	}
}

// one makes one call and reports it.
func (c *callers) one(ctx context.Context, m *monitor, agent string, dep *clientlib.Dependency, url string, deadline time.Duration) {
	start := time.Now()
	cctx, cancel := context.WithTimeout(ctx, deadline)
	err := dep.Do(cctx, clientlib.Idempotent, func(ctx context.Context, _ clientlib.Attempt) error {
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
		if err != nil {
			return err
		}
		resp, err := c.hc.Do(req)
		if err != nil {
			return err
		}
		defer resp.Body.Close()
		io.Copy(io.Discard, io.LimitReader(resp.Body, 1<<16))
		return clientlib.CheckResponse(resp)
	})
	took := time.Since(start)
	cancel()
	if ctx.Err() != nil {
		return // the soak is stopping: not a call of the run
	}
	reason := ""
	var rej *clientlib.RejectedError
	if errors.As(err, &rej) && errors.Is(err, clientlib.ErrOpen) {
		reason = rej.Reason
	}
	status := ""
	if reason != "" {
		s := dep.Status()
		status = fmt.Sprintf("state %v, local %v, override %v, generation %d, from agent %v", s.State, s.LocalState, s.Override, s.Generation, s.FromAgent)
	}
	failure := ""
	if err != nil && reason == "" {
		failure = errorKind(err)
	}
	m.call(time.Now(), agent, dep.Name(), deadline, took, reason, failure, status)
}

// stop ends the call loops and closes the clients.
func (c *callers) stop() {
	c.cancel()
	c.wg.Wait()
	for _, cl := range c.cls {
		cl.Close()
	}
	c.hc.CloseIdleConnections()
}

// errorKind names a failed call's error for the summary's tally: the
// sentinels and causes that matter, else the message's start.
func errorKind(err error) string {
	var hs *clientlib.HTTPStatusError
	switch {
	case errors.Is(err, clientlib.ErrBudgetExhausted):
		return "retry budget exhausted"
	case errors.Is(err, context.DeadlineExceeded):
		return "deadline exceeded"
	case errors.As(err, &hs):
		return fmt.Sprintf("HTTP %d", hs.StatusCode)
	case errors.Is(err, syscall.ECONNREFUSED):
		return "connection refused"
	}
	msg := err.Error()
	if len(msg) > 60 {
		msg = msg[:60] + "…"
	}
	return msg
}
