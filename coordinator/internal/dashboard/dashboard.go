package dashboard

import (
	"crypto/sha256"
	"embed"
	"encoding/hex"
	"io/fs"
	"maps"
	"net/http"
	"path"
	"slices"
	"strings"
)

// AssetPrefix is the URL path under which the page's scripts, styles and
// icon are served; the page itself is served at "/".
const AssetPrefix = "/ui/"

//go:embed static
var static embed.FS

// contentTypes of the files under static/, by extension. Fixed here rather
// than taken from the system's MIME tables, which vary between hosts.
var contentTypes = map[string]string{
	".html": "text/html; charset=utf-8",
	".js":   "text/javascript; charset=utf-8",
	".css":  "text/css; charset=utf-8",
	".svg":  "image/svg+xml",
}

// contentSecurityPolicy allows the page nothing but its own origin: no
// inline script, no third-party host, no framing.
const contentSecurityPolicy = "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; " +
	"connect-src 'self'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'"

type asset struct {
	body        []byte
	contentType string
	etag        string
}

// Handler serves the dashboard: GET / (index.html) and GET /ui/NAME (the
// other files under static/). It is immutable after New and safe for
// concurrent use.
type Handler struct {
	assets map[string]asset // by URL path
}

// New returns the dashboard's handler. It panics if the embedded files are
// unusable, which a test of this package would have caught at build time.
func New() *Handler {
	h := &Handler{assets: map[string]asset{}}
	err := fs.WalkDir(static, "static", func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		body, err := static.ReadFile(p)
		if err != nil {
			return err
		}
		ct, ok := contentTypes[path.Ext(p)]
		if !ok {
			ct = "application/octet-stream"
		}
		sum := sha256.Sum256(body)
		a := asset{body: body, contentType: ct, etag: `"` + hex.EncodeToString(sum[:8]) + `"`}
		name := strings.TrimPrefix(p, "static/")
		if name == "index.html" {
			h.assets["/"] = a
		} else {
			h.assets[AssetPrefix+name] = a
		}
		return nil
	})
	if err != nil {
		panic("dashboard: embedded files: " + err.Error())
	}
	return h
}

// ServeHTTP serves GET and HEAD of the page and its files, with an ETag
// (so a reload costs a 304) and headers that keep the page to its own
// origin: the Content-Security-Policy above, no framing, no sniffing, and
// no Referer (the coordinator's address stays with its users).
func (h *Handler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodGet && r.Method != http.MethodHead {
		w.Header().Set("Allow", "GET, HEAD")
		http.Error(w, "method not allowed", http.StatusMethodNotAllowed)
		return
	}
	a, ok := h.assets[r.URL.Path]
	if !ok {
		http.NotFound(w, r)
		return
	}
	hd := w.Header()
	hd.Set("Content-Type", a.contentType)
	hd.Set("ETag", a.etag)
	hd.Set("Cache-Control", "no-cache")
	hd.Set("Content-Security-Policy", contentSecurityPolicy)
	hd.Set("X-Content-Type-Options", "nosniff")
	hd.Set("X-Frame-Options", "DENY")
	hd.Set("Referrer-Policy", "no-referrer")
	if etagMatches(r.Header.Get("If-None-Match"), a.etag) {
		w.WriteHeader(http.StatusNotModified)
		return
	}
	if r.Method == http.MethodHead {
		return
	}
	_, _ = w.Write(a.body)
}

// etagMatches reports whether an If-None-Match header lists etag (or "*").
func etagMatches(header, etag string) bool {
	for _, t := range strings.Split(header, ",") {
		t = strings.TrimPrefix(strings.TrimSpace(t), "W/")
		if t == etag || t == "*" {
			return true
		}
	}
	return false
}

// Paths returns the URL paths the handler serves, sorted ("/" first).
func (h *Handler) Paths() []string {
	return slices.Sorted(maps.Keys(h.assets))
}
