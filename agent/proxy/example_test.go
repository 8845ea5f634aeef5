package proxy_test

import (
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"

	"github.com/fusebox-dev/fusebox/agent/proxy"
	"github.com/fusebox-dev/fusebox/sharedstate"
)

// A proxy on an engine of its own, and a client whose transport names it
// as its proxy (http.ProxyFromEnvironment would skip the loopback
// upstream). In the agent, --proxy-addr does this on the agent's engine.
func ExampleNew() {
	upstream := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.WriteString(w, "rates")
	}))
	defer upstream.Close()

	engine, _ := proxy.NewLocalEngine(sharedstate.EngineConfig{Node: "host-1"})
	cfg := proxy.DefaultConfig()
	cfg.Addr = "127.0.0.1:0"
	cfg.Engine = engine
	p, err := proxy.New(cfg)
	if err != nil {
		fmt.Println(err)
		return
	}
	go p.Serve()
	defer p.Close()

	proxyURL, _ := url.Parse("http://" + p.Addr())
	tr := &http.Transport{Proxy: http.ProxyURL(proxyURL)}
	defer tr.CloseIdleConnections()
	resp, err := (&http.Client{Transport: tr}).Get(upstream.URL + "/rates")
	if err != nil {
		fmt.Println(err)
		return
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	fmt.Println(resp.StatusCode, string(body), "attempts:", resp.Header.Get(proxy.HeaderAttempts))
	// Output: 200 rates attempts: 1
}
