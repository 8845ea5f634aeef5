package conformance

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/url"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/fusebox-dev/fusebox/agent"
	"github.com/fusebox-dev/fusebox/agent/proxy"
	"github.com/fusebox-dev/fusebox/clientlib"
	"github.com/fusebox-dev/fusebox/sharedstate"
)

// agentWait is the callers' bound on a question to the agent. The suite
// checks what the fleet decides, so it is generous: on a loaded machine
// the 50 ms default would now and then hand a retry or a probe to the
// caller's local fallback (the killed-agent scenario checks that path).
const agentWait = 5 * time.Second

// callTimeout bounds one call through any caller, retries included.
const callTimeout = 20 * time.Second

// Kinds of caller, as the upstream sees them in headerCaller.
const (
	kindGo     = "go"
	kindProxy  = "proxy"
	kindPython = "python"
)

// batch is a run of HTTP calls through a caller: n calls, concurrency at
// a time, each worker pausing pace between its calls. Call i carries
// headerCall: call-i when call is set, and Idempotency-Key: key-i when
// key is set.
type batch struct {
	method      string
	url         string
	n           int
	concurrency int
	pace        time.Duration
	call, key   string
}

// tally is what the calls of a batch came to: answered below 500 (ok),
// answered 500 or more (failed, the last attempt's answer when retries
// ended), refused by Fusebox before any attempt (rejected, by reason) and
// without an answer (errors, their messages in errs).
type tally struct {
	OK       int            `json:"ok"`
	Failed   int            `json:"failed"`
	Errors   int            `json:"errors"`
	Rejected map[string]int `json:"rejected"`
	Errs     []string       `json:"errs"`
}

func (t tally) rejected() int {
	n := 0
	for _, v := range t.Rejected {
		n += v
	}
	return n
}

func (t tally) String() string {
	return fmt.Sprintf("ok %d, failed %d, errors %d %q, rejected %v", t.OK, t.Failed, t.Errors, t.Errs, t.Rejected)
}

// view is what a caller decides a dependency by now.
type view struct {
	Rejecting bool   // a first attempt is refused
	FromAgent bool   // the agent's snapshot decides (not a local fallback)
	Override  string // "none", "forced-open", "forced-closed"
	State     string // the governing breaker: "closed", "open", "half-open"
}

// caller is one way a service calls its dependencies through Fusebox.
type caller interface {
	kind() string
	// agent is the agent the caller goes through.
	agent() *agent.Agent
	// calls runs b and tallies it. It fails t only when the caller itself
	// broke (the Python process died), never for what the calls came to.
	calls(t *testing.T, b batch) tally
	// view says how the caller decides dep now; it starts following dep.
	view(t *testing.T, dep string) view
}

// result is one call's end, for callers that make calls one by one.
type result struct {
	status int    // the answer's status (0: none)
	reason string // refused before any attempt: why
	err    error  // no answer
}

func (r result) add(t *tally) {
	switch {
	case r.reason != "":
		if t.Rejected == nil {
			t.Rejected = map[string]int{}
		}
		t.Rejected[r.reason]++
	case r.err != nil:
		t.Errors++
		if len(t.Errs) < 5 {
			t.Errs = append(t.Errs, r.err.Error())
		}
	case r.status >= 500:
		t.Failed++
	default:
		t.OK++
	}
}

// runBatch makes b's calls with one, concurrency at a time, and tallies them.
func runBatch(b batch, one func(ctx context.Context, i int) result) tally {
	var (
		mu  sync.Mutex
		out tally
		wg  sync.WaitGroup
		nxt int
	)
	for range max(b.concurrency, 1) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for first := true; ; first = false {
				mu.Lock()
				i := nxt
				nxt++
				mu.Unlock()
				if i >= b.n {
					return
				}
				if !first && b.pace > 0 {
					time.Sleep(b.pace) // pacing the load, not waiting for a state
				}
				ctx, cancel := context.WithTimeout(context.Background(), callTimeout)
				r := one(ctx, i)
				cancel()
				mu.Lock()
				r.add(&out)
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	return out
}

// newRequest is call i of b, marked with the caller's kind.
func newRequest(ctx context.Context, kind string, b batch, i int) (*http.Request, error) {
	method := b.method
	if method == "" {
		method = http.MethodGet
	}
	req, err := http.NewRequestWithContext(ctx, method, b.url, nil)
	if err != nil {
		return nil, err
	}
	req.Header.Set(headerCaller, kind)
	if b.call != "" {
		req.Header.Set(headerCall, b.call+"-"+strconv.Itoa(i))
	}
	if b.key != "" {
		req.Header.Set(clientlib.HeaderIdempotencyKey, b.key+"-"+strconv.Itoa(i))
	}
	return req, nil
}

// answered reads and closes resp's body.
func answered(resp *http.Response) result {
	_, _ = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	return result{status: resp.StatusCode}
}

// goCaller is a Go service: clientlib's RoundTripper, its client connected
// to an agent's socket.
type goCaller struct {
	a  *agent.Agent
	c  *clientlib.Client
	hc *http.Client
}

func newGoCaller(t *testing.T, a *agent.Agent, service string) *goCaller {
	t.Helper()
	return newGoCallerAt(t, a, "unix://"+a.SocketPath(), service)
}

// newGoCallerAt is a Go caller whose agent listens at addr (a is nil when
// the agent is not in process).
func newGoCallerAt(t *testing.T, a *agent.Agent, addr, service string) *goCaller {
	t.Helper()
	c, err := clientlib.New(clientlib.Config{AgentAddress: addr, Service: service, AgentWait: agentWait,
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		t.Fatal(err)
	}
	tr := &http.Transport{}
	g := &goCaller{a: a, c: c, hc: &http.Client{Transport: c.RoundTripper(tr)}}
	t.Cleanup(func() {
		tr.CloseIdleConnections()
		_ = c.Close()
	})
	return g
}

func (g *goCaller) kind() string        { return kindGo }
func (g *goCaller) agent() *agent.Agent { return g.a }

func (g *goCaller) calls(t *testing.T, b batch) tally {
	return runBatch(b, func(ctx context.Context, i int) result {
		req, err := newRequest(ctx, kindGo, b, i)
		if err != nil {
			return result{err: err}
		}
		resp, err := g.hc.Do(req)
		var rej *clientlib.RejectedError
		switch {
		case errors.As(err, &rej):
			return result{reason: rej.Reason}
		case err != nil:
			return result{err: err}
		}
		return answered(resp)
	})
}

func (g *goCaller) view(t *testing.T, dep string) view {
	s := g.c.Dependency(dep).Status()
	return view{Rejecting: s.Rejecting(), FromAgent: s.FromAgent, Override: s.Override.String(), State: s.State.String()}
}

// proxyCaller is a service without a Fusebox client: plain net/http with
// an agent's egress proxy as its HTTP proxy.
type proxyCaller struct {
	a    *agent.Agent
	addr string
	hc   *http.Client
}

func newProxyCaller(t *testing.T, a *agent.Agent) *proxyCaller {
	t.Helper()
	return newProxyCallerAt(t, a, a.ProxyAddr())
}

// newProxyCallerAt is a proxy caller of the proxy at addr (a is nil when
// its agent is not in process).
func newProxyCallerAt(t *testing.T, a *agent.Agent, addr string) *proxyCaller {
	t.Helper()
	u, err := url.Parse("http://" + addr)
	if err != nil {
		t.Fatal(err)
	}
	// http.ProxyURL, not ProxyFromEnvironment: the latter never proxies
	// loopback upstreams.
	tr := &http.Transport{Proxy: http.ProxyURL(u)}
	t.Cleanup(tr.CloseIdleConnections)
	return &proxyCaller{a: a, addr: addr, hc: &http.Client{Transport: tr}}
}

func (p *proxyCaller) kind() string        { return kindProxy }
func (p *proxyCaller) agent() *agent.Agent { return p.a }

func (p *proxyCaller) calls(t *testing.T, b batch) tally {
	return runBatch(b, func(ctx context.Context, i int) result {
		req, err := newRequest(ctx, kindProxy, b, i)
		if err != nil {
			return result{err: err}
		}
		resp, err := p.hc.Do(req)
		if err != nil {
			return result{err: err}
		}
		if r := resp.Header.Get(proxy.HeaderRejected); r != "" && resp.Header.Get(proxy.HeaderAttempts) == "0" {
			answered(resp)
			return result{reason: r}
		}
		return answered(resp)
	})
}

// view is the proxy's agent's snapshot: the proxy decides from its
// agent's engine.
func (p *proxyCaller) view(t *testing.T, dep string) view {
	if p.a == nil {
		t.Fatalf("the proxy at %s has no agent in process to read the snapshot of %s from", p.addr, dep)
	}
	eng := p.a.Engine()
	s := eng.Snapshot(dep)
	if s == nil { // tracked from now on, as the proxy's first request would
		_ = eng.AddCounts(dep, sharedstate.Counts{})
		if s = eng.Snapshot(dep); s == nil {
			t.Fatalf("agent %s tracks no dependency %s", p.a.Name(), dep)
		}
	}
	return view{Rejecting: snapshotRejecting(s), FromAgent: true, Override: s.Override.String(), State: s.State.String()}
}

// snapshotRejecting is clientlib's Status.Rejecting of an engine snapshot.
func snapshotRejecting(s *sharedstate.Snapshot) bool {
	switch {
	case s.Override == sharedstate.ForcedOpen:
		return true
	case s.Override == sharedstate.ForcedClosed || s.Shadow():
		return false
	}
	return s.State != sharedstate.Closed || s.LocalState != sharedstate.Closed
}
