package clientlib

import (
	"strings"
	"testing"
	"time"
)

func TestDefaultConfig(t *testing.T) {
	t.Setenv(EnvAgent, "")
	t.Setenv(EnvService, "checkout")
	c := DefaultConfig()
	if err := c.Validate(); err != nil {
		t.Fatalf("DefaultConfig invalid: %v", err)
	}
	if c.AgentAddress != DefaultAgentAddress || c.Service != "checkout" || c.FlushInterval != 50*time.Millisecond ||
		c.AgentWait != 50*time.Millisecond || c.MaxDependencies != 1000 || c.Instance == "" {
		t.Errorf("defaults %+v", c)
	}
	t.Setenv(EnvAgent, "127.0.0.1:7950")
	if got := DefaultConfig().AgentAddress; got != "127.0.0.1:7950" {
		t.Errorf("AgentAddress %q, want $FUSEBOX_AGENT", got)
	}
}

func TestAgentAddresses(t *testing.T) {
	for _, tc := range []struct {
		addr, target string
	}{
		{"unix:///run/fusebox/agent.sock", "unix:///run/fusebox/agent.sock"},
		{"/tmp/a.sock", "unix:///tmp/a.sock"},
		{"127.0.0.1:7950", "passthrough:///127.0.0.1:7950"},
		{"[::1]:7950", "passthrough:///[::1]:7950"},
		{"localhost:7950", "passthrough:///localhost:7950"},
		{"10.0.0.1:7950", ""},
		{"agent.example.com:7950", ""},
		{"unix://relative.sock", ""},
		{"127.0.0.1", ""},
		{"127.0.0.1:0", ""},
	} {
		got, err := agentTarget(tc.addr)
		if tc.target == "" {
			if err == nil {
				t.Errorf("%q accepted as %q", tc.addr, got)
			}
			continue
		}
		if err != nil || got != tc.target {
			t.Errorf("%q → %q, %v; want %q", tc.addr, got, err, tc.target)
		}
	}
}

func TestValidateNamesEveryViolation(t *testing.T) {
	c := DefaultConfig()
	c.AgentAddress = "10.1.2.3:7950"
	c.Service = "has space"
	c.FlushInterval = time.Second
	c.AgentWait = -1
	c.ReconnectMax = time.Millisecond
	c.MaxDependencies = -1
	c.Dependencies = []string{"ok", "not ok"}
	err := c.Validate()
	if err == nil {
		t.Fatal("invalid config accepted")
	}
	for _, field := range []string{"AgentAddress", "Service", "FlushInterval", "AgentWait", "ReconnectMax", "MaxDependencies", "Dependencies"} {
		if !strings.Contains(err.Error(), "clientlib config: "+field+":") {
			t.Errorf("no violation named %s in:\n%v", field, err)
		}
	}
	if _, err := New(c); err == nil {
		t.Error("New accepted an invalid config")
	}
}
