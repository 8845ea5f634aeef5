package agent

import (
	"net"
	"os"
	"strconv"
	"strings"
	"testing"
)

// The proxy takes the socket named "proxy", or the one bound to
// --proxy-addr, and refuses one bound elsewhere; the others are closed.
func TestProxySocketPicksTheProxys(t *testing.T) {
	listen := func() net.Listener {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { ln.Close() })
		return ln
	}
	open := func(ln net.Listener) bool {
		c, err := net.Dial("tcp", ln.Addr().String())
		if err == nil {
			c.Close()
		}
		return err == nil
	}
	a, b := listen(), listen()
	got, err := proxySocket([]inheritedSocket{{"other", a}, {ProxySocketName, b}}, b.Addr().String())
	if err != nil || got != b || open(a) {
		t.Errorf("by name: %v, %v; the other still open: %v", got, err, open(a))
	}
	c, d := listen(), listen()
	if got, err := proxySocket([]inheritedSocket{{"", c}, {"", d}}, d.Addr().String()); err != nil || got != d {
		t.Errorf("by address: %v, %v", got, err)
	}
	e := listen()
	_, err = proxySocket([]inheritedSocket{{ProxySocketName, e}}, "127.0.0.1:1")
	if err == nil || !strings.Contains(err.Error(), "not --proxy-addr 127.0.0.1:1") || open(e) {
		t.Errorf("bound elsewhere: %v (closed: %v)", err, !open(e))
	}
	f := listen()
	if _, err := proxySocket([]inheritedSocket{{ProxySocketName, f}}, ""); err == nil || !strings.Contains(err.Error(), "--proxy-addr is not set") {
		t.Errorf("proxy off: %v", err)
	}
	if got, err := proxySocket(nil, "127.0.0.1:7952"); got != nil || err != nil {
		t.Errorf("nothing handed: %v, %v", got, err)
	}
}

// Sockets are taken only when LISTEN_PID names this process.
func TestInheritedSocketsAreThisProcesss(t *testing.T) {
	env := map[string]string{"LISTEN_PID": strconv.Itoa(os.Getpid() + 1), "LISTEN_FDS": "1", "LISTEN_FDNAMES": "proxy"}
	if ss, err := inheritedSockets(func(k string) string { return env[k] }); ss != nil || err != nil {
		t.Errorf("another process's sockets: %v, %v", ss, err)
	}
	if ss, err := inheritedSockets(func(string) string { return "" }); ss != nil || err != nil {
		t.Errorf("no sockets: %v, %v", ss, err)
	}
}
