package agent

import (
	"strings"
	"testing"
)

func TestDefaultConfigIsValid(t *testing.T) {
	if err := DefaultConfig().Validate(); err != nil {
		t.Fatalf("DefaultConfig().Validate() = %v", err)
	}
}

func TestValidateNamesEveryViolation(t *testing.T) {
	c := DefaultConfig()
	c.Name = ""
	c.GossipAddr = "nope"
	c.GRPCAddr = "10.0.0.1:7950"
	c.LogFormat = "xml"
	c.MaxDependencies = 0
	err := c.Validate()
	if err == nil {
		t.Fatal("Validate accepted a broken config")
	}
	for _, want := range []string{"name: must not be empty", `gossip-addr: must be host:port, got "nope"`,
		"grpc-addr: must be a loopback address", `log-format: must be "text" or "json", got "xml"`,
		"max-dependencies: must be > 0, got 0"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error lacks %q:\n%v", want, err)
		}
	}
}
