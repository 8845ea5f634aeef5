package dashboard

import (
	"net/http"
	"net/http/httptest"
	"regexp"
	"strings"
	"testing"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

func get(t *testing.T, h http.Handler, method, path string, hdr map[string]string) *httptest.ResponseRecorder {
	t.Helper()
	req := httptest.NewRequest(method, path, nil)
	for k, v := range hdr {
		req.Header.Set(k, v)
	}
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, req)
	return rec
}

func TestServesThePageAndItsFiles(t *testing.T) {
	h := New()
	want := map[string]string{
		"/":               "text/html; charset=utf-8",
		"/ui/app.js":      "text/javascript; charset=utf-8",
		"/ui/style.css":   "text/css; charset=utf-8",
		"/ui/favicon.svg": "image/svg+xml",
	}
	if got := h.Paths(); len(got) != len(want) {
		t.Errorf("Paths() = %v, want %d paths", got, len(want))
	}
	for path, ct := range want {
		rec := get(t, h, "GET", path, nil)
		if rec.Code != http.StatusOK || rec.Header().Get("Content-Type") != ct || rec.Body.Len() == 0 {
			t.Errorf("GET %s = %d %q (%d bytes), want 200 %q", path, rec.Code, rec.Header().Get("Content-Type"), rec.Body.Len(), ct)
		}
		for _, hd := range []string{"Content-Security-Policy", "X-Content-Type-Options", "X-Frame-Options", "Referrer-Policy", "ETag"} {
			if rec.Header().Get(hd) == "" {
				t.Errorf("GET %s: no %s header", path, hd)
			}
		}
		etag := rec.Header().Get("ETag")
		if rec := get(t, h, "GET", path, map[string]string{"If-None-Match": `"other", ` + etag}); rec.Code != http.StatusNotModified || rec.Body.Len() != 0 {
			t.Errorf("GET %s with its ETag = %d (%d bytes), want 304", path, rec.Code, rec.Body.Len())
		}
		if rec := get(t, h, "HEAD", path, nil); rec.Code != http.StatusOK || rec.Body.Len() != 0 {
			t.Errorf("HEAD %s = %d (%d bytes)", path, rec.Code, rec.Body.Len())
		}
	}
	for _, path := range []string{"/ui/", "/ui/nothing.js", "/index.html", "/ui/index.html"} {
		if rec := get(t, h, "GET", path, nil); rec.Code != http.StatusNotFound {
			t.Errorf("GET %s = %d, want 404", path, rec.Code)
		}
	}
	if rec := get(t, h, "POST", "/", nil); rec.Code != http.StatusMethodNotAllowed {
		t.Errorf("POST / = %d, want 405", rec.Code)
	}
}

// The page works offline: nothing it loads or calls lives on another host.
func TestNothingComesFromElsewhere(t *testing.T) {
	external := regexp.MustCompile(`(?i)(src|href|action)\s*=\s*["']?\s*(https?:)?//|url\(\s*["']?(https?:)?//|@import|fetch\(\s*["'](https?:)?//|new EventSource\(\s*["'](https?:)?//|<script(?:[^>]*)>[^<]`)
	entries, err := static.ReadDir("static")
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range entries {
		b, err := static.ReadFile("static/" + e.Name())
		if err != nil {
			t.Fatal(err)
		}
		if m := external.Find(b); m != nil {
			t.Errorf("%s refers to another host or has an inline script: %q", e.Name(), m)
		}
	}
}

// The DOM contract of README.md: the ids and classes other tests rely on.
func TestDOMContractIsInThePage(t *testing.T) {
	page, err := static.ReadFile("static/index.html")
	if err != nil {
		t.Fatal(err)
	}
	script, err := static.ReadFile("static/app.js")
	if err != nil {
		t.Fatal(err)
	}
	for _, id := range []string{"token", "force-dep", "force-ttl", "force-reason", "force-open-btn", "force-closed-btn",
		"clear-btn", "action-status", "filter", "conn", "dep-rows", "dep-nodes", "dep-audit", "dep-zones"} {
		if !strings.Contains(string(page), `id="`+id+`"`) {
			t.Errorf("index.html has no #%s", id)
		}
	}
	for _, s := range []string{`class="badge"`, `tr.dataset.dep = d.name`, `'local-open'`, `setConn('live')`,
		`dataset.state = d.shown`, `tr.dataset.node = n.node`} {
		if !strings.Contains(string(page)+string(script), s) {
			t.Errorf("the page no longer has %s", s)
		}
	}
}
