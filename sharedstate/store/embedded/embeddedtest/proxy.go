package embeddedtest

import (
	"io"
	"net"
	"strings"
	"sync"
	"testing"
	"time"
)

// Proxy is a TCP proxy on a loopback port in front of an etcd server, for
// tests that partition one client from etcd while etcd keeps running:
// SetCut(true) closes every connection and refuses new ones, SetCut(false)
// lets clients reconnect; SetTarget moves them to another etcd. Its
// methods are safe for concurrent use.
type Proxy struct {
	l net.Listener

	mu     sync.Mutex
	target string
	cut    bool
	conns  map[net.Conn]struct{}
	wg     sync.WaitGroup
}

// NewProxy starts a proxy to target ("host:port" or "http://host:port",
// e.g. srv.Endpoints()[0]); t.Cleanup closes it and waits for its goroutines.
func NewProxy(t testing.TB, target string) *Proxy {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &Proxy{l: l, target: strings.TrimPrefix(target, "http://"), conns: map[net.Conn]struct{}{}}
	p.wg.Add(1)
	go p.accept()
	t.Cleanup(p.Close)
	return p
}

// Endpoint is the client URL that reaches etcd through the proxy.
func (p *Proxy) Endpoint() string { return "http://" + p.l.Addr().String() }

// SetTarget closes every connection and sends the next ones to target
// ("host:port" or "http://host:port"): clients reconnect to another etcd
// at the same address, as when a load balancer's backend is replaced.
func (p *Proxy) SetTarget(target string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.target = strings.TrimPrefix(target, "http://")
	for c := range p.conns {
		c.Close()
	}
}

// SetCut cuts (true) or restores (false) the proxy.
func (p *Proxy) SetCut(cut bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.cut = cut
	if cut {
		for c := range p.conns {
			c.Close()
		}
	}
}

// Close cuts the proxy, stops listening and waits for its goroutines.
// Calling it again is harmless.
func (p *Proxy) Close() {
	p.SetCut(true)
	p.l.Close()
	p.wg.Wait()
}

func (p *Proxy) accept() {
	defer p.wg.Done()
	for {
		c, err := p.l.Accept()
		if err != nil {
			return
		}
		if !p.track(c) {
			continue
		}
		p.wg.Add(1)
		go p.serve(c)
	}
}

func (p *Proxy) serve(c net.Conn) {
	defer p.wg.Done()
	defer p.forget(c)
	p.mu.Lock()
	target := p.target
	p.mu.Unlock()
	u, err := net.DialTimeout("tcp", target, 2*time.Second)
	if err != nil {
		return
	}
	if !p.track(u) {
		return
	}
	defer p.forget(u)
	done := make(chan struct{}, 2)
	go func() { _, _ = io.Copy(u, c); done <- struct{}{} }()
	go func() { _, _ = io.Copy(c, u); done <- struct{}{} }()
	<-done
	c.Close()
	u.Close()
	<-done
}

// track remembers c, or closes it and says false while the proxy is cut.
func (p *Proxy) track(c net.Conn) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.cut {
		c.Close()
		return false
	}
	p.conns[c] = struct{}{}
	return true
}

func (p *Proxy) forget(c net.Conn) {
	p.mu.Lock()
	delete(p.conns, c)
	p.mu.Unlock()
	c.Close()
}
