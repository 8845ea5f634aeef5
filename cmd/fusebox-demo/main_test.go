package main

import (
	"bytes"
	"strings"
	"testing"
	"time"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

func TestParseFlags(t *testing.T) {
	var out, errOut bytes.Buffer
	cfg, err := parseFlags([]string{"--duration", "70s", "--headless", "--phase-duration", "5s", "--http-addr", "127.0.0.1:0",
		"--grpc-addr", "127.0.0.1:0", "--token", "secret", "--log-level", "error"}, &out, &errOut)
	if err != nil {
		t.Fatalf("parseFlags: %v", err)
	}
	if cfg.Duration != 70*time.Second || !cfg.Headless || cfg.PhaseDuration != 5*time.Second ||
		cfg.HTTPAddr != "127.0.0.1:0" || cfg.GRPCAddr != "127.0.0.1:0" || cfg.AdminToken != "secret" || cfg.Out != &out {
		t.Errorf("parseFlags: got %+v", cfg)
	}

	cases := []struct {
		args []string
		want []string // substrings of the error
	}{
		{[]string{"--phase-duration", "10ms", "--duration", "-1s"}, []string{"phase-duration", "duration: must not be negative"}},
		{[]string{"--http-addr", "nowhere"}, []string{"http-addr"}},
		{[]string{"--log-level", "loud"}, []string{"--log-level"}},
		{[]string{"extra"}, []string{"unexpected arguments"}},
		{[]string{"--rate", "0", "--phase-duration", "0s"}, []string{"--rate must be > 0", "--phase-duration must be > 0"}},
		{[]string{"--agent", "relative.sock", "--token", "secret"}, []string{"agent: \"relative.sock\"", "admin-token"}},
	}
	for _, c := range cases {
		_, err := parseFlags(c.args, &out, &errOut)
		if err == nil {
			t.Errorf("parseFlags(%q): no error", c.args)
			continue
		}
		for _, w := range c.want {
			if !strings.Contains(err.Error(), w) {
				t.Errorf("parseFlags(%q) = %v, want it to mention %q", c.args, err, w)
			}
		}
	}
}

func TestUsage(t *testing.T) {
	var out, errOut bytes.Buffer
	if code := run([]string{"--help"}, &out, &errOut); code != 0 {
		t.Errorf("--help: exit code %d, want 0", code)
	}
	if !strings.Contains(errOut.String(), "-phase-duration") {
		t.Errorf("--help does not list -phase-duration:\n%s", errOut.String())
	}
	// It says which service goes through the egress proxy and what common
	// clients need to use one (TestBannerCommandsWork checks the claims).
	help := strings.Join(strings.Fields(errOut.String()), " ")
	for _, w := range []string{"checkout and orders through clientlib", "returns (as a service in another language would) through agent-c's egress proxy",
		"curl reads only the lower-case http_proxy", "http.ProxyURL", "proxyTunnel: false"} {
		if !strings.Contains(help, w) {
			t.Errorf("--help does not say %q:\n%s", w, errOut.String())
		}
	}
	// A usage error exits 2 before anything starts.
	if code := run([]string{"--rate", "-1"}, &out, &errOut); code != 2 {
		t.Errorf("--rate -1: exit code %d, want 2", code)
	}
}
