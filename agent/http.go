package agent

import (
	"fmt"
	"net/http"
	"strings"

	"github.com/prometheus/client_golang/prometheus/promhttp"
)

// httpHandler serves /metrics (the agent's own registry), /healthz (the
// process is up and not shutting down) and /readyz (Ready: gossip started
// and joined or configured alone, policies loaded from etcd or the cache).
func (a *Agent) httpHandler() http.Handler {
	mux := http.NewServeMux()
	mux.Handle("/metrics", promhttp.HandlerFor(a.reg, promhttp.HandlerOpts{Registry: a.reg}))
	mux.HandleFunc("/healthz", func(w http.ResponseWriter, r *http.Request) {
		if a.closing.Load() {
			http.Error(w, "shutting down", http.StatusServiceUnavailable)
			return
		}
		fmt.Fprintln(w, "ok")
	})
	mux.HandleFunc("/readyz", func(w http.ResponseWriter, r *http.Request) {
		ok, why := a.readiness()
		if !ok {
			http.Error(w, "not ready: "+strings.Join(why, "; "), http.StatusServiceUnavailable)
			return
		}
		fmt.Fprintln(w, "ready")
	})
	return mux
}
