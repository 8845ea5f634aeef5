package coordinator

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/fusebox-dev/fusebox/protocol/fuseboxv1"
	"github.com/fusebox-dev/fusebox/sharedstate/sstest"
	"github.com/fusebox-dev/fusebox/sharedstate/store"
)

// httpDo sends one request and returns the status and body. hdr adds
// headers; a body is sent as application/json unless hdr says otherwise.
func httpDo(t *testing.T, method, url, token, body string, hdr map[string]string) (int, string) {
	t.Helper()
	var rd io.Reader
	if body != "" {
		rd = strings.NewReader(body)
	}
	req, err := http.NewRequest(method, url, rd)
	if err != nil {
		t.Fatal(err)
	}
	if body != "" {
		req.Header.Set("Content-Type", "application/json")
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	for k, v := range hdr {
		req.Header.Set(k, v)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// expect checks a status and that the body contains every one of want.
func expect(t *testing.T, what string, code int, body string, wantCode int, want ...string) {
	t.Helper()
	if code != wantCode {
		t.Errorf("%s: status %d, want %d: %s", what, code, wantCode, body)
		return
	}
	for _, w := range want {
		if !strings.Contains(body, w) {
			t.Errorf("%s: body %s does not contain %q", what, body, w)
		}
	}
}

func TestHTTPOverridesNeedAnAdminAndWriteTheAudit(t *testing.T) {
	cfg := testConfig(t)
	cfg.TokensFile = writeTokens(t, testTokens)
	c := startCoordinator(t, cfg)
	base := "http://" + c.HTTPAddr()
	const good = `{"state":"forced-open","ttl":"10m","reason":"vendor outage","actor":"alice"}`

	code, body := httpDo(t, "POST", base+"/api/v1/overrides/payments", "", good, nil)
	expect(t, "POST without a token", code, body, http.StatusUnauthorized, "missing or invalid bearer token")
	code, body = httpDo(t, "POST", base+"/api/v1/overrides/payments", "not-a-known-token-at-all", good, nil)
	expect(t, "POST with an unknown token", code, body, http.StatusUnauthorized)
	code, body = httpDo(t, "POST", base+"/api/v1/overrides/payments", viewerToken, good, nil)
	expect(t, "POST as a viewer", code, body, http.StatusForbidden, "permission denied", "needs role admin")
	// A token in the query string never authorizes anything.
	code, body = httpDo(t, "POST", base+"/api/v1/overrides/payments?access_token="+adminToken, "", good, nil)
	expect(t, "POST with ?access_token=", code, body, http.StatusBadRequest, "?access_token= is refused")
	code, body = httpDo(t, "DELETE", base+"/api/v1/overrides/payments", viewerToken, "", nil)
	expect(t, "DELETE as a viewer", code, body, http.StatusForbidden)
	// Nothing reached etcd.
	ctx := ctxFor(t, 20*time.Second)
	if entries, err := c.Store().ListAudit(ctx, store.AuditQuery{}); err != nil || len(entries) != 0 {
		t.Fatalf("audit after refused writes = %v, %v; want none", entries, err)
	}

	code, body = httpDo(t, "POST", base+"/api/v1/overrides/payments", adminToken, good, nil)
	expect(t, "POST as an admin", code, body, http.StatusOK,
		`"state":"forced-open"`, `"actor":"alice (ops-admin)"`, `"reason":"vendor outage"`, `"expires":`)
	var o overrideJSON
	if err := json.Unmarshal([]byte(body), &o); err != nil {
		t.Fatal(err)
	}
	if d := o.Expires.Sub(o.Created); d < 10*time.Minute || d > 10*time.Minute+2*time.Second {
		t.Errorf("override expires %v after creation, want 10m", d)
	}
	// The same store, audit and fleet view as the Admin API.
	e, err := c.Store().GetOverride(ctx, "payments")
	if err != nil || e.Actor != "alice (ops-admin)" || e.Reason != "vendor outage" {
		t.Fatalf("override in etcd = %+v, %v", e, err)
	}
	audit, err := adminClient(t, c.GRPCAddr(), viewerToken).ListAudit(ctx, &fuseboxv1.ListAuditRequest{Dependency: "payments"})
	if err != nil || len(audit.GetEntries()) != 1 || audit.GetEntries()[0].GetAction() != store.ActionOverrideSet ||
		audit.GetEntries()[0].GetActor() != "alice (ops-admin)" {
		t.Fatalf("gRPC ListAudit = %v, %v; want the HTTP write", audit, err)
	}
	sstest.Eventually(t, 10*time.Second, "the fleet view to show the override", func() bool {
		code, body := httpDo(t, "GET", base+"/api/v1/fleet?dependency=payments&compact=1", viewerToken, "", nil)
		return code == http.StatusOK && strings.Contains(body, `"override":"OVERRIDE_STATE_FORCED_OPEN"`)
	})

	code, body = httpDo(t, "GET", base+"/api/v1/audit?dependency=payments", viewerToken, "", nil)
	expect(t, "GET /api/v1/audit", code, body, http.StatusOK, `"action":"override.set"`, `"actor":"alice (ops-admin)"`,
		`"before":null`, `"after":{"state":"forced-open","reason":"vendor outage"`)
	code, body = httpDo(t, "GET", base+"/api/v1/overrides", viewerToken, "", nil)
	expect(t, "GET /api/v1/overrides", code, body, http.StatusOK, `"dependency":"payments"`, `"state":"forced-open"`)

	// forced-closed replaces it; a name with a slash works; no TTL means none.
	code, body = httpDo(t, "POST", base+"/api/v1/overrides/payments", adminToken, `{"state":"forced-closed"}`, nil)
	expect(t, "POST forced-closed", code, body, http.StatusOK, `"state":"forced-closed"`, `"actor":"ops-admin"`)
	if strings.Contains(body, "expires") {
		t.Errorf("an override without a TTL has an expiry: %s", body)
	}
	code, body = httpDo(t, "POST", base+"/api/v1/overrides/team/ledger", adminToken, `{"state":"forced-open","ttl":"0"}`, nil)
	expect(t, "POST on a name with a slash", code, body, http.StatusOK, `"dependency":"team/ledger"`)

	code, body = httpDo(t, "DELETE", base+"/api/v1/overrides/payments?actor=bob", adminToken, "", nil)
	expect(t, "DELETE as an admin", code, body, http.StatusOK, `"cleared":true`)
	code, body = httpDo(t, "DELETE", base+"/api/v1/overrides/payments", adminToken, "", nil)
	expect(t, "DELETE again", code, body, http.StatusOK, `"cleared":false`)
	code, body = httpDo(t, "GET", base+"/api/v1/audit?dependency=payments&limit=2", viewerToken, "", nil)
	expect(t, "the audit after the clear", code, body, http.StatusOK, `"action":"override.clear"`, `"actor":"bob (ops-admin)"`)
	var page struct {
		Entries []auditJSON `json:"entries"`
	}
	if err := json.Unmarshal([]byte(body), &page); err != nil || len(page.Entries) != 2 ||
		page.Entries[0].Action != store.ActionOverrideClear || string(page.Entries[0].After) != "null" {
		t.Errorf("audit page = %+v, %v; want the clear then the forced-closed, newest first", page.Entries, err)
	}

	// Cross-origin writes from a browser are refused, token or not.
	code, body = httpDo(t, "POST", base+"/api/v1/overrides/payments", adminToken, good,
		map[string]string{"Origin": "https://evil.example", "Sec-Fetch-Site": "cross-site"})
	expect(t, "a cross-origin POST", code, body, http.StatusForbidden, "cross-origin")

	if v := metricValue(t, c.reg, "fusebox_coordinator_http_requests_total", map[string]string{"handler": "override_set", "code": "403"}); v != 2 {
		t.Errorf("http_requests_total{override_set,403} = %v, want 2", v)
	}
	if v := metricValue(t, c.reg, "fusebox_coordinator_auth_failures_total", map[string]string{"api": "http", "reason": "permission_denied"}); v < 3 {
		t.Errorf("auth_failures_total{http,permission_denied} = %v, want at least 3", v)
	}
}

func TestHTTPOverrideRequestsAreChecked(t *testing.T) {
	c := startCoordinator(t, testConfig(t)) // loopback-only: every loopback caller is an admin
	base := "http://" + c.HTTPAddr()
	for _, tc := range []struct {
		name, path, body string
		hdr              map[string]string
		want             []string
	}{
		{"bad ttl", "payments", `{"state":"forced-open","ttl":"ten minutes"}`, nil, []string{`ttl \"ten minutes\": not a duration`}},
		{"negative ttl", "payments", `{"state":"forced-open","ttl":"-1m"}`, nil, []string{"ttl -1m0s: must be between 0 (no expiry) and 168h0m0s"}},
		{"ttl too long", "payments", `{"state":"forced-open","ttl":"200h"}`, nil, []string{"ttl 200h0m0s: must be between"}},
		{"bad state", "payments", `{"state":"open"}`, nil, []string{`state \"open\": want \"forced-open\" or \"forced-closed\"`}},
		{"no state", "payments", `{"ttl":"1m"}`, nil, []string{"state is required"}},
		{"bad state and ttl", "payments", `{"state":"closed","ttl":"5 min"}`, nil, []string{`state \"closed\"`, `ttl \"5 min\"`}},
		{"bad name", "bad%20name!", `{"state":"forced-open"}`, nil, []string{"dependency"}},
		{"unknown field", "payments", `{"state":"forced-open","tll":"1m"}`, nil, []string{`unknown field \"tll\"`}},
		{"two values", "payments", `{"state":"forced-open"} {}`, nil, []string{"more than one JSON value"}},
		{"not json", "payments", `state=forced-open`, map[string]string{"Content-Type": "application/x-www-form-urlencoded"}, []string{"Content-Type must be application/json"}},
		{"reason too long", "payments", `{"state":"forced-open","reason":"` + strings.Repeat("x", 1025) + `"}`, nil, []string{"reason is 1025 bytes, at most 1024"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			code, body := httpDo(t, "POST", base+"/api/v1/overrides/"+tc.path, "", tc.body, tc.hdr)
			expect(t, tc.name, code, body, http.StatusBadRequest, append(tc.want, `"code":"InvalidArgument"`)...)
		})
	}
	code, body := httpDo(t, "GET", base+"/api/v1/audit?limit=lots", "", "", nil)
	expect(t, "a bad audit limit", code, body, http.StatusBadRequest, `limit \"lots\"`)
	code, body = httpDo(t, "GET", base+"/api/v1/audit?dependency=no%20spaces", "", "", nil)
	expect(t, "a bad audit dependency", code, body, http.StatusBadRequest)
	// Nothing was written.
	if entries, err := c.Store().ListAudit(ctxFor(t, 10*time.Second), store.AuditQuery{}); err != nil || len(entries) != 0 {
		t.Fatalf("audit = %v, %v; want none", entries, err)
	}
	// The loopback admin writes, named "loopback" in the audit.
	code, body = httpDo(t, "POST", base+"/api/v1/overrides/payments", "", `{"state":"forced-open","ttl":"1m"}`, nil)
	expect(t, "a loopback admin's POST", code, body, http.StatusOK, `"actor":"loopback"`)
}

func TestHTTPReadEndpointsAndTokens(t *testing.T) {
	cfg := testConfig(t)
	cfg.TokensFile = writeTokens(t, testTokens)
	c := startCoordinator(t, cfg)
	base := "http://" + c.HTTPAddr()

	code, body := httpDo(t, "GET", base+"/api/v1/whoami", adminToken, "", nil)
	expect(t, "whoami as the admin", code, body, http.StatusOK, `"name":"ops-admin"`, `"role":"admin"`, `"tokens":true`, `"coordinator":"`+cfg.Name+`"`)
	code, body = httpDo(t, "GET", base+"/api/v1/whoami", viewerToken, "", nil)
	expect(t, "whoami as a viewer", code, body, http.StatusOK, `"role":"viewer"`)
	code, body = httpDo(t, "GET", base+"/api/v1/whoami", "", "", nil)
	expect(t, "whoami without a token", code, body, http.StatusUnauthorized)
	code, body = httpDo(t, "GET", base+"/api/v1/policies", viewerToken, "", nil)
	expect(t, "policies", code, body, http.StatusOK, `"default":{`, `"window":"10s"`, `"policies":{}`)
	code, body = httpDo(t, "GET", base+"/api/v1/fleet?compact=1", viewerToken, "", nil)
	expect(t, "compact fleet", code, body, http.StatusOK, `"dependencies":[]`)
	if strings.Contains(body, "\n ") {
		t.Errorf("compact fleet is indented: %s", body)
	}
	code, body = httpDo(t, "GET", base+"/api/v1/fleet?dependency=nothing", viewerToken, "", nil)
	expect(t, "fleet of an unknown dependency", code, body, http.StatusNotFound, `"code":"NotFound"`)

	// A token in a URL is refused everywhere, the event stream included,
	// whatever else the request carries; the header works.
	for _, tc := range []struct{ url, header string }{
		{"/api/v1/fleet?access_token=" + viewerToken, ""},
		{"/api/v1/events?access_token=" + adminToken, ""},
		{"/api/v1/events?access_token=" + adminToken, viewerToken},
		{"/api/v1/events?access_token=", adminToken},
	} {
		code, body = httpDo(t, "GET", base+tc.url, tc.header, "", nil)
		expect(t, "GET "+tc.url, code, body, http.StatusBadRequest, `?access_token= is refused`, `Authorization: Bearer TOKEN`)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, "GET", base+"/api/v1/events", nil)
	req.Header.Set("Authorization", "Bearer "+viewerToken)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	if resp.StatusCode != http.StatusOK || resp.Header.Get("Content-Type") != "text/event-stream" {
		t.Errorf("events with the token in the header = %s %s", resp.Status, resp.Header.Get("Content-Type"))
	}
	cancel()
	resp.Body.Close()

	// The page and its files are served without a token, offline-safe.
	code, body = httpDo(t, "GET", base+"/", "", "", nil)
	expect(t, "the dashboard", code, body, http.StatusOK, `id="dep-rows"`, `/ui/app.js`)
	code, body = httpDo(t, "GET", base+"/ui/app.js", "", "", nil)
	expect(t, "app.js", code, body, http.StatusOK, "'/api/v1/events'")
	if strings.Contains(body, "access_token") || strings.Contains(body, "new EventSource") {
		t.Error("app.js still puts a token in the event stream's URL")
	}
	code, _ = httpDo(t, "GET", base+"/ui/nothing.js", "", "", nil)
	if code != http.StatusNotFound {
		t.Errorf("GET /ui/nothing.js = %d, want 404", code)
	}
}

func TestHTTPLoopbackOnlyChecksTheHostHeader(t *testing.T) {
	c := startCoordinator(t, testConfig(t))
	base := "http://" + c.HTTPAddr()
	_, port, _ := strings.Cut(c.HTTPAddr(), ":")
	for host, want := range map[string]int{
		"":                                 http.StatusOK, // the address itself
		"localhost:" + port:                http.StatusOK,
		"[::1]:" + port:                    http.StatusOK,
		"rebound.attacker.example:" + port: http.StatusForbidden,
		"10.0.0.7:" + port:                 http.StatusForbidden,
	} {
		req, _ := http.NewRequest("GET", base+"/api/v1/whoami", nil)
		if host != "" {
			req.Host = host
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != want {
			t.Errorf("Host %q: %s, want %d: %s", host, resp.Status, want, b)
		}
	}
}
