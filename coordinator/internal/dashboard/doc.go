// Package dashboard is the coordinator's fleet dashboard: one page of plain
// HTML, CSS and JavaScript under static/, embedded with go:embed, that
// reads the coordinator's /api/v1 with the token its user types. It needs
// no CDN, web font or build step. The API it reads, how it renders, its
// security headers and the DOM contract browser tests rely on are in this
// folder's README.md.
//
// Usage (the coordinator mounts it in its HTTP mux):
//
//	ui := dashboard.New()
//	mux.Handle("GET /{$}", ui)
//	mux.Handle("GET "+dashboard.AssetPrefix, ui)
package dashboard
