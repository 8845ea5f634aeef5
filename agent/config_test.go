package agent

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/spf13/pflag"

	"github.com/fusebox-dev/fusebox/agent/internal/agentopt"
	"github.com/fusebox-dev/fusebox/protocol/fuseboxv1"
	"github.com/fusebox-dev/fusebox/protocol/gossip"
	"github.com/fusebox-dev/fusebox/sharedstate/sstest"
)

// DefaultConfig binds gossip on every interface, so alone it lacks one
// decision: a keyring, or plaintext by choice. With either it is valid.
func TestDefaultConfigIsValid(t *testing.T) {
	err := DefaultConfig().Validate()
	if err == nil || strings.Count(err.Error(), "\n") != 0 || !strings.Contains(err.Error(), "--keyring-file") || !strings.Contains(err.Error(), "--insecure-gossip") {
		t.Fatalf("DefaultConfig().Validate() = %v, want one line naming --keyring-file and --insecure-gossip", err)
	}
	for _, mutate := range []func(c *Config){
		func(c *Config) { c.InsecureGossip = true },
		func(c *Config) { c.KeyringFile = "/etc/fusebox/keyring" },
		func(c *Config) { c.GossipAddr = "127.0.0.1:7946" },
		func(c *Config) { c.GossipAddr = "localhost:0" },
		func(c *Config) { c.GossipAddr = "[::1]:7946" },
	} {
		c := DefaultConfig()
		mutate(&c)
		if err := c.Validate(); err != nil {
			t.Errorf("%+v: Validate() = %v", c.GossipAddr, err)
		}
	}
	for _, addr := range []string{"0.0.0.0:7946", ":7946", "10.1.2.3:7946", "[::]:7946", "example.com:7946"} {
		c := DefaultConfig()
		c.GossipAddr = addr
		if err := c.Validate(); err == nil || !strings.Contains(err.Error(), "--insecure-gossip") {
			t.Errorf("plaintext gossip on %s accepted: %v", addr, err)
		}
	}
}

func TestValidateNamesEveryViolation(t *testing.T) {
	c := DefaultConfig()
	c.Name = ""
	c.GossipAddr = "nope"
	c.GRPCAddr = "10.0.0.1:7950"
	c.LogFormat = "xml"
	c.MaxDependencies = 0
	c.HealRejoinInterval = time.Minute
	c.JoinRetryMax = time.Microsecond
	c.RowFanout = -1
	c.GossipNodes = 0
	c.ProbeTimeout, c.GossipTCPTimeout, c.DeadNodeReclaimTime, c.LeaveTimeout = 0, 0, 0, 0
	err := c.Validate()
	if err == nil {
		t.Fatal("Validate accepted a broken config")
	}
	for _, want := range []string{"name: must not be empty", `gossip-addr: must be host:port, got "nope"`,
		"grpc-addr: must be a loopback address", `log-format: must be "text" or "json", got "xml"`,
		"max-dependencies: must be > 0, got 0", "heal-rejoin-interval: must be at most rejoin-interval (2s), got 1m0s",
		"join-retry-max: must be at least join-retry-min", "row-fanout: must be in 0..64, got -1", "gossip-nodes: must be in 1..64, got 0",
		"probe-timeout: must be at least", "gossip-tcp-timeout: must be at least", "dead-node-reclaim-time: must be at least",
		"leave-timeout: must be at least"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error lacks %q:\n%v", want, err)
		}
	}
}

// Flags win over FUSEBOX_* environment variables, which win over the YAML
// file, which wins over the defaults.
func TestLoadConfigPrecedence(t *testing.T) {
	dir := t.TempDir()
	yamlPath := dir + "/agent.yaml"
	yamlData := `
name: from-yaml
zone: yaml-zone
data-dir: /yaml/data
join: [10.0.0.1:7946, 10.0.0.2:7946]
etcd: http://yaml:2379
gossip-interval: 350ms
max-dependencies: 500
log-format: json
`
	if err := os.WriteFile(yamlPath, []byte(yamlData), 0o600); err != nil {
		t.Fatal(err)
	}
	env := map[string]string{
		"FUSEBOX_CONFIG":           yamlPath,
		"FUSEBOX_ZONE":             "env-zone",
		"FUSEBOX_MAX_DEPENDENCIES": "700",
		"FUSEBOX_HTTP_ADDR":        "127.0.0.1:9999",
	}
	cfg, err := LoadConfig([]string{"--zone", "flag-zone", "--join=127.0.0.1:1,127.0.0.1:2", "--insecure-gossip"}, func(k string) string { return env[k] }, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	def := DefaultConfig()
	checks := []struct {
		field     string
		got, want any
	}{
		{"name (yaml)", cfg.Name, "from-yaml"},
		{"zone (flag over env over yaml)", cfg.Zone, "flag-zone"},
		{"data-dir (yaml)", cfg.DataDir, "/yaml/data"},
		{"join (flag over yaml)", strings.Join(cfg.Join, ","), "127.0.0.1:1,127.0.0.1:2"},
		{"etcd (yaml, comma string)", strings.Join(cfg.Etcd, ","), "http://yaml:2379"},
		{"gossip-interval (yaml)", cfg.GossipInterval, 350 * time.Millisecond},
		{"max-dependencies (env over yaml)", cfg.MaxDependencies, 700},
		{"http-addr (env)", cfg.HTTPAddr, "127.0.0.1:9999"},
		{"log-format (yaml)", cfg.LogFormat, "json"},
		{"socket (default)", cfg.Socket, def.Socket},
		{"tick-interval (default)", cfg.TickInterval, def.TickInterval},
	}
	for _, c := range checks {
		if c.got != c.want {
			t.Errorf("%s = %v, want %v", c.field, c.got, c.want)
		}
	}

	// --config on the command line wins over FUSEBOX_CONFIG; YAML lists
	// work; unknown keys and bad values are refused with their names.
	other := dir + "/other.yaml"
	if err := os.WriteFile(other, []byte("name: other\nzones: typo\nprobe-interval: 5\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	_, err = LoadConfig([]string{"--config", other}, func(k string) string { return env[k] }, io.Discard)
	if err == nil || !strings.Contains(err.Error(), other+`:2: unknown key "zones": fusebox-agent has no flag --zones`) ||
		!strings.Contains(err.Error(), other+`:3: key "probe-interval": "5"`) {
		t.Errorf("bad YAML: %v", err)
	}
	_, err = LoadConfig(nil, func(k string) string {
		return map[string]string{"FUSEBOX_TICK_INTERVAL": "soon"}[k]
	}, io.Discard)
	if err == nil || !strings.Contains(err.Error(), `FUSEBOX_TICK_INTERVAL="soon": --tick-interval`) {
		t.Errorf("bad environment value: %v", err)
	}
	// Validation runs on the result.
	_, err = LoadConfig([]string{"--grpc-addr", "10.1.1.1:7950"}, func(string) string { return "" }, io.Discard)
	if err == nil || !strings.Contains(err.Error(), "grpc-addr: must be a loopback address") {
		t.Errorf("invalid result: %v", err)
	}
	var help strings.Builder
	if _, err := LoadConfig([]string{"-h"}, func(string) string { return "" }, &help); !errors.Is(err, pflag.ErrHelp) ||
		!strings.Contains(help.String(), "FUSEBOX_GOSSIP_ADDR") || !strings.Contains(help.String(), "-keyring-file") {
		t.Errorf("-h: %v\n%s", err, help.String())
	}
}

// TestInProcessAPI: without listeners New refuses the config, unless the
// local API is in process only (the lab's simulation hook); then the API
// handed to Sim.Attach answers without a socket, and the push-pull state
// it hands over carries the reported row.
func TestInProcessAPI(t *testing.T) {
	cfg := testConfig(t, "inproc")
	cfg.Socket, cfg.GRPCAddr, cfg.HTTPAddr = "", "", ""
	if _, err := New(cfg); err == nil || !strings.Contains(err.Error(), "socket: must be set") {
		t.Fatalf("New without listeners: %v", err)
	}
	var in agentopt.Inside
	a := startAgent(t, cfg, agentopt.WithSim(agentopt.Sim{InProcessAPI: true, Attach: func(i agentopt.Inside) { in = i }}))
	if a.SocketPath() != "" || a.GRPCAddr() != "" {
		t.Fatalf("listeners: socket %q grpc %q", a.SocketPath(), a.GRPCAddr())
	}
	if in.API == nil || in.PushPullState == nil {
		t.Fatalf("Sim.Attach was not called with the agent's handles: %+v", in)
	}
	resp, err := in.API.Report(context.Background(), &fuseboxv1.ReportRequest{Outcomes: []*fuseboxv1.OutcomeReport{{
		Dependency: "inproc-dep", Kind: fuseboxv1.AttemptKind_ATTEMPT_KIND_FIRST, Outcome: fuseboxv1.Outcome_OUTCOME_FAILURE, Count: 3}}})
	if err != nil || resp.GetAccepted() != 3 {
		t.Fatalf("Report: %v %v", resp, err)
	}
	sstest.Eventually(t, 5*time.Second, "the reported row in the push-pull state", func() bool {
		st := in.PushPullState()
		return len(st.GetRows()) == 1 && st.GetRows()[0].GetDependency() == "inproc-dep" && st.GetRows()[0].GetCounts().GetFailures() == 3
	})
}

func TestJoinSample(t *testing.T) {
	few := []string{"a:1", "b:1", "c:1"}
	if got := joinSample(few, 5); !slices.Equal(got, few) {
		t.Fatalf("3 targets, room for 5: got %v", got)
	}
	var many []string
	for i := range 20 {
		many = append(many, fmt.Sprintf("10.0.0.%d:7946", i))
	}
	got := joinSample(many, 2+gossip.RejoinFanout)
	if len(got) != 5 || got[0] != many[0] || got[1] != many[1] {
		t.Fatalf("20 targets, 2 of them --join: got %v, want both --join addresses and 3 more", got)
	}
	seen := map[string]bool{}
	for _, g := range got {
		if seen[g] || !slices.Contains(many, g) {
			t.Fatalf("sample %v repeats or invents a target", got)
		}
		seen[g] = true
	}
}
