// Package agenttest holds what tests outside package agent need to run a
// real agent (clientlib's end-to-end tests in agent, the coordinator's).
// Only _test.go files import it; package agent's own tests cannot (import
// cycle) and keep their testConfig.
package agenttest

import (
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/fusebox-dev/fusebox/agent"
)

// Config is the config of agent name in zone z1 with etcd endpoints etcd:
// gossip on 127.0.0.1 port 0, no HTTP listener, data in t.TempDir(), a
// socket in a short temporary directory (unix socket paths are limited to
// 104 bytes), and short gossip, probe and tick intervals.
func Config(t testing.TB, name string, etcd []string) agent.Config {
	t.Helper()
	dir, err := os.MkdirTemp("", "fbc")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	cfg := agent.DefaultConfig()
	cfg.Name = name
	cfg.Zone = "z1"
	cfg.DataDir = filepath.Join(t.TempDir(), "data")
	cfg.GossipAddr = "127.0.0.1:0"
	cfg.Socket = filepath.Join(dir, "agent.sock")
	cfg.HTTPAddr = ""
	cfg.Etcd = etcd
	cfg.GossipInterval = 50 * time.Millisecond
	cfg.PushPullInterval = time.Second
	cfg.ProbeInterval = 200 * time.Millisecond
	cfg.TickInterval = 50 * time.Millisecond
	cfg.ShutdownTimeout = 3 * time.Second
	cfg.MemberTTL = 2 * time.Second
	return cfg
}
