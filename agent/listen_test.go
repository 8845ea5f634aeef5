package agent

import (
	"errors"
	"strings"
	"syscall"
	"testing"

	"github.com/fusebox-dev/fusebox/sharedstate/cliflag"
	"github.com/fusebox-dev/fusebox/sharedstate/sstest"
)

// TestBusyPortNamesItsFlag: an agent whose listen address is taken fails
// with an error that names the flag and the address first, then the
// system's reason: "--gossip-addr 127.0.0.1:N: address already in use",
// memberlist's bind of a gossip port included (TCP or UDP taken, with
// and without a keyring).
func TestBusyPortNamesItsFlag(t *testing.T) {
	for _, tc := range []struct {
		flag string
		set  func(*Config, string)
		busy func(testing.TB) string
	}{
		{"grpc-addr", func(c *Config, a string) { c.GRPCAddr = a }, sstest.BusyTCP},
		{"http-addr", func(c *Config, a string) { c.HTTPAddr = a }, sstest.BusyTCP},
		{"gossip-addr", func(c *Config, a string) { c.GossipAddr = a }, sstest.BusyTCP},
		{"gossip-addr", func(c *Config, a string) { c.GossipAddr = a }, sstest.BusyUDP},
		{"gossip-addr", func(c *Config, a string) { // memberlist's own transport
			c.GossipAddr = a
			c.KeyringFile = writeKeyring(t, []byte("0123456789abcdef0123456789abcdef"))
		}, sstest.BusyTCP},
		{"proxy-addr", func(c *Config, a string) { c.Proxy.Addr = a }, sstest.BusyTCP},
	} {
		t.Run(tc.flag, func(t *testing.T) {
			cfg := testConfig(t, "a")
			addr := tc.busy(t)
			tc.set(&cfg, addr)
			a, err := New(cfg, WithLogger(discardLogger()), WithDefaultPolicy(testPolicy()))
			if err == nil {
				a.Close()
				t.Fatalf("New with --%s on a busy port %s succeeded", tc.flag, addr)
			}
			var le *cliflag.ListenError
			if !errors.As(err, &le) || le.Flag != tc.flag || le.Addr != addr || !errors.Is(err, syscall.EADDRINUSE) {
				t.Errorf("New with --%s on a busy port: %v (%T), want a *cliflag.ListenError naming it", tc.flag, err, err)
			}
			if want := "--" + tc.flag + " " + addr + ": address already in use"; !strings.Contains(err.Error(), want) {
				t.Errorf("error %q lacks %q", err, want)
			}
		})
	}
}
