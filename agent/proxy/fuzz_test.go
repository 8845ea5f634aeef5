package proxy

import (
	"bufio"
	"bytes"
	"cmp"
	"net"
	"net/http"
	"slices"
	"strings"
	"testing"

	"github.com/fusebox-dev/fusebox/sharedstate"
)

// fuzzProxy is a proxy that parses but does not listen.
func fuzzProxy(t testing.TB) *Proxy {
	cfg := DefaultConfig()
	cfg.MaxHeaderBytes = 8 << 10
	cfg.Routes = []string{"shipping.internal=shipping-api", "https://payments.example.com=payments", "h2c://[::1]:50051=grpc"}
	rt, err := newRouter(cfg.Routes)
	if err != nil {
		t.Fatal(err)
	}
	var allow []allowRule
	for _, a := range []string{"*.internal", "127.0.0.0/8", "payments.example.com", "::1"} {
		r, err := ParseAllowHost(a)
		if err != nil {
			t.Fatal(err)
		}
		allow = append(allow, r)
	}
	return &Proxy{cfg: cfg, rt: rt, allow: allow, guard: newGuard([]string{"127.0.0.1:7950", "0.0.0.0:7946"})}
}

// FuzzParseTarget feeds raw requests through net/http's parser and the
// proxy's: whatever comes, parseTarget answers a target or a named error,
// never panics, and a target it answers is one the proxy can dial and
// count under.
func FuzzParseTarget(f *testing.F) {
	for _, seed := range []string{
		"GET http://shipping.internal/x?y=1 HTTP/1.1\r\nHost: shipping.internal\r\n\r\n",
		"GET http://127.0.0.1:8080/ HTTP/1.1\r\nHost: 127.0.0.1:8080\r\nFusebox-Dependency: catalog\r\n\r\n",
		"GET http://[::1]:8080/ HTTP/1.1\r\nHost: [::1]:8080\r\n\r\n",
		"POST /orders HTTP/1.1\r\nHost: proxy\r\nFusebox-Upstream: https://payments.example.com\r\nContent-Length: 2\r\n\r\n{}",
		"GET /x HTTP/1.1\r\nHost: proxy\r\nFusebox-Dependency: grpc\r\n\r\n",
		"GET /x HTTP/1.1\r\nHost: proxy\r\nFusebox-Upstream: h2c://a.internal:1\r\n\r\n",
		"CONNECT a.internal:443 HTTP/1.1\r\nHost: a.internal:443\r\n\r\n",
		"CONNECT 127.0.0.1:7950 HTTP/1.1\r\nHost: 127.0.0.1:7950\r\n\r\n",
		"GET http://localhost:7946/ HTTP/1.1\r\nHost: localhost\r\n\r\n",
		"GET ftp://x/ HTTP/1.1\r\nHost: x\r\n\r\n",
		"GET http://u@x/ HTTP/1.1\r\nHost: x\r\n\r\n",
		"GET http://x:0/ HTTP/1.1\r\nHost: x\r\n\r\n",
		"GET http://[fe80::1%25eth0]:80/ HTTP/1.1\r\nHost: x\r\n\r\n",
		"GET /x HTTP/1.1\r\nHost: proxy\r\nFusebox-Upstream: http://h/p?q#f\r\n\r\n",
		"GET / HTTP/1.1\r\nHost: proxy\r\nFusebox-Dependency: " + strings.Repeat("d", 200) + "\r\n\r\n",
		"OPTIONS * HTTP/1.1\r\nHost: proxy\r\n\r\n",
		"GET http://evil.example.org/ HTTP/1.1\r\nHost: evil.example.org\r\n\r\n",
	} {
		f.Add([]byte(seed))
	}
	p := fuzzProxy(f)
	f.Fuzz(func(t *testing.T, raw []byte) {
		req, err := http.ReadRequest(bufio.NewReader(bytes.NewReader(raw)))
		if err != nil {
			return
		}
		tg, rerr := p.parseTarget(req)
		if rerr != nil {
			if rerr.status < 400 || rerr.status > 599 || !slices.Contains(invalidReasons, rerr.reason) || !strings.HasPrefix(rerr.msg, "fusebox proxy: ") {
				t.Fatalf("unnamed refusal %+v", rerr)
			}
			return
		}
		if err := sharedstate.ValidateDependencyName(tg.dep); err != nil {
			t.Fatalf("target %+v: %v", tg, err)
		}
		if _, _, err := net.SplitHostPort(tg.dialAddr()); err != nil || tg.host == "" || tg.port == "" {
			t.Fatalf("target %+v: dial address %q", tg, tg.dialAddr())
		}
		switch tg.scheme {
		case schemeHTTP, schemeHTTPS, schemeH2C:
		default:
			t.Fatalf("target %+v: scheme %q", tg, tg.scheme)
		}
	})
}

// FuzzParseRoute: a route entry parses or is refused with its text named;
// a parsed route's host splits again as an authority.
func FuzzParseRoute(f *testing.F) {
	for _, s := range []string{"a=b", "https://h:443=d", "h2c://[::1]:1=g", "x", "=d", "h=", "ftp://h=d", "h:99999=d", "[::1=d", "*.x=d"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		r, err := ParseRoute(s)
		if err != nil {
			if !strings.Contains(err.Error(), "route ") {
				t.Fatalf("ParseRoute(%q): %v does not name the route", s, err)
			}
			return
		}
		if _, _, err := splitAuthority(net.JoinHostPort(r.Host, cmp.Or(r.Port, "80")), ""); err != nil {
			t.Fatalf("ParseRoute(%q) = %+v, whose host does not split again: %v", s, r, err)
		}
		if err := sharedstate.ValidateDependencyName(r.Dependency); err != nil {
			t.Fatalf("ParseRoute(%q) = %+v: %v", s, r, err)
		}
		_, _ = ParseAllowHost(s)
	})
}
