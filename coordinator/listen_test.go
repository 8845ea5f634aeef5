package coordinator

import (
	"context"
	"errors"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/fusebox-dev/fusebox/sharedstate/cliflag"
	"github.com/fusebox-dev/fusebox/sharedstate/sstest"
	"github.com/fusebox-dev/fusebox/sharedstate/store/embedded"
)

// TestBusyPortNamesItsFlag: a coordinator whose listen address is taken
// fails to start with an error that names the flag and the address first,
// then the system's reason, "--http-addr 127.0.0.1:N: address already in
// use": the Admin API, HTTP, the observer's gossip port (TCP or UDP taken)
// and the embedded etcd's client URL.
func TestBusyPortNamesItsFlag(t *testing.T) {
	for _, tc := range []struct {
		flag string
		set  func(*Config, string) string // sets the flag from a busy address, returns its value
		busy func(testing.TB) string
	}{
		{"grpc-addr", func(c *Config, a string) string { c.GRPCAddr = a; return a }, sstest.BusyTCP},
		{"http-addr", func(c *Config, a string) string { c.HTTPAddr = a; return a }, sstest.BusyTCP},
		{"gossip-addr", func(c *Config, a string) string { c.GossipAddr = a; return a }, sstest.BusyTCP},
		{"gossip-addr", func(c *Config, a string) string { c.GossipAddr = a; return a }, sstest.BusyUDP},
		{"embedded-etcd-url", func(c *Config, a string) string { c.EmbeddedEtcdURL = "http://" + a; return c.EmbeddedEtcdURL }, sstest.BusyTCP},
	} {
		t.Run(tc.flag, func(t *testing.T) {
			cfg := testConfig(t)
			value := tc.set(&cfg, tc.busy(t))
			c, err := New(cfg, testOptions(WithEmbeddedEtcd(func(ec *embedded.Config) { ec.ClientURL = cfg.EmbeddedEtcdURL }))...)
			if err != nil {
				t.Fatal(err)
			}
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			err = c.Start(ctx)
			_ = c.Close()
			if err == nil {
				t.Fatalf("Start with --%s on a busy port %s succeeded", tc.flag, value)
			}
			var le *cliflag.ListenError
			if !errors.As(err, &le) || le.Flag != tc.flag || le.Addr != value || !errors.Is(err, syscall.EADDRINUSE) {
				t.Errorf("Start with --%s on a busy port: %v (%T), want a *cliflag.ListenError naming it", tc.flag, err, err)
			}
			if want := "--" + tc.flag + " " + value + ": address already in use"; !strings.Contains(err.Error(), want) {
				t.Errorf("error %q lacks %q", err, want)
			}
		})
	}
}
