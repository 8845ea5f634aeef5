package coordinator

import (
	"io"
	"net/http"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/fusebox-dev/fusebox/protocol/fuseboxv1"
	"github.com/fusebox-dev/fusebox/sharedstate/sstest"
)

// TestNoTokensRefusesForwardedRequests: without a tokens file every loopback
// caller is an admin, so a request a local reverse proxy forwards (Forwarded,
// X-Forwarded-*) is refused, on HTTP and on the Admin API.
func TestNoTokensRefusesForwardedRequests(t *testing.T) {
	c := startCoordinator(t, testConfig(t))
	get := func(h map[string]string) *http.Response {
		t.Helper()
		req, err := http.NewRequest(http.MethodGet, "http://"+c.HTTPAddr()+"/api/v1/whoami", nil)
		if err != nil {
			t.Fatal(err)
		}
		for k, v := range h {
			req.Header.Set(k, v)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		return resp
	}
	if r := get(nil); r.StatusCode != http.StatusOK {
		t.Fatalf("plain loopback request: %s", r.Status)
	}
	for _, h := range []map[string]string{
		{"X-Forwarded-For": "203.0.113.7"}, {"Forwarded": "for=203.0.113.7"}, {"X-Forwarded-Host": "fusebox.example"}, {"X-Real-Ip": "203.0.113.7"},
	} {
		if r := get(h); r.StatusCode != http.StatusForbidden {
			t.Errorf("request with %v: %s, want 403", h, r.Status)
		}
	}

	admin := adminClient(t, c.GRPCAddr(), "")
	ctx := ctxFor(t, 20*time.Second)
	if _, err := admin.ListPolicies(ctx, &fuseboxv1.ListPoliciesRequest{}); err != nil {
		t.Fatalf("plain loopback call: %v", err)
	}
	fwd := metadata.AppendToOutgoingContext(ctx, "x-forwarded-for", "203.0.113.7")
	if _, err := admin.ListPolicies(fwd, &fuseboxv1.ListPoliciesRequest{}); status.Code(err) != codes.PermissionDenied {
		t.Fatalf("call with x-forwarded-for = %v, want PermissionDenied", err)
	}
}

// TestForwardedAllowedWithTokens: with tokens the caller is whoever the token
// says, so a proxy may forward.
func TestForwardedAllowedWithTokens(t *testing.T) {
	cfg := testConfig(t)
	cfg.TokensFile = writeTokens(t, testTokens)
	c := startCoordinator(t, cfg)
	req, _ := http.NewRequest(http.MethodGet, "http://"+c.HTTPAddr()+"/api/v1/whoami", nil)
	req.Header.Set("Authorization", "Bearer "+viewerToken)
	req.Header.Set("X-Forwarded-For", "203.0.113.7")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("forwarded request with a token: %s", resp.Status)
	}
}

// TestHTTPIdleConnectionClosed: an idle kept-alive connection is closed by
// the server.
func TestHTTPIdleConnectionClosed(t *testing.T) {
	c := startCoordinator(t, testConfig(t), WithHTTPTimeouts(HTTPTimeouts{ReadHeader: time.Second, Read: time.Second, Write: time.Second, Idle: 200 * time.Millisecond}))
	sstest.IdleConnectionClosed(t, c.HTTPAddr())
}
