package coordinator

import (
	"strings"
	"testing"
	"time"
)

func TestConfigValidate(t *testing.T) {
	tests := []struct {
		name string
		mod  func(*Config)
		want []string // substrings of the error; none: valid
	}{
		{name: "defaults", mod: func(*Config) {}},
		{name: "port 0 everywhere", mod: func(c *Config) {
			c.GRPCAddr, c.HTTPAddr, c.GossipAddr, c.EmbeddedEtcdURL = "127.0.0.1:0", "127.0.0.1:0", "127.0.0.1:0", "http://127.0.0.1:0"
		}},
		{name: "external etcd needs no data dir", mod: func(c *Config) { c.DataDir, c.Etcd = "", []string{"https://etcd:2379"} }},
		{name: "public with tokens", mod: func(c *Config) { c.TokensFile, c.GRPCAddr, c.HTTPAddr = "t", "0.0.0.0:7960", ":7070" }},
		{
			name: "public without tokens",
			mod:  func(c *Config) { c.GRPCAddr, c.HTTPAddr = "0.0.0.0:7960", ":7070" },
			want: []string{`grpc-addr: "0.0.0.0:7960" is not a loopback address`, `http-addr: ":7070" is not a loopback address`},
		},
		{
			name: "plaintext gossip off loopback",
			mod:  func(c *Config) { c.GossipAddr = "0.0.0.0:7947" },
			want: []string{"gossip-addr 0.0.0.0:7947 is not loopback", "--keyring-file", "--insecure-gossip"},
		},
		{name: "plaintext gossip off loopback by choice", mod: func(c *Config) { c.GossipAddr, c.InsecureGossip = "0.0.0.0:7947", true }},
		{name: "encrypted gossip off loopback", mod: func(c *Config) { c.GossipAddr, c.KeyringFile = "10.0.0.1:7947", "keyring" }},
		{
			name: "history",
			mod: func(c *Config) {
				c.HistoryFine, c.HistoryCoarse, c.HistoryMaxDependencies = time.Hour, time.Minute, 0
			},
			want: []string{"history-coarse: must be between --history-fine (1h0m0s)", "history-max-dependencies: must be > 0"},
		},
		{name: "history fine too short", mod: func(c *Config) { c.HistoryFine = time.Millisecond },
			want: []string{"history-fine: must be between 100ms"}},
		{
			name: "everything wrong",
			mod: func(c *Config) {
				c.DataDir = ""
				c.HTTPAddr = "7070"
				c.TLSClientCA = "ca.pem"
				c.EtcdPrefix = "fusebox"
				c.EtcdPassword = "x"
				c.MaxDependencies = 0
				c.LogLevel = "loud"
				c.Join = []string{"nohost"}
				c.EmbeddedEtcdURL = "localhost:2379"
			},
			want: []string{"data-dir: must be set", `http-addr: must be host:port, got "7070"`, "tls-client-ca: needs tls-cert",
				"etcd-prefix", "etcd-password: needs etcd-user", "max-dependencies", "log-level", `join: must be host:port, got "nohost"`,
				"embedded-etcd-url", "etcd: etcd-ca, etcd-cert and etcd-user need --etcd"},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := DefaultConfig()
			tt.mod(&c)
			err := c.Validate()
			if len(tt.want) == 0 {
				if err != nil {
					t.Fatalf("Validate() = %v, want nil", err)
				}
				return
			}
			for _, w := range tt.want {
				if err == nil || !strings.Contains(err.Error(), w) {
					t.Errorf("Validate() = %v, want it to contain %q", err, w)
				}
			}
		})
	}
}
