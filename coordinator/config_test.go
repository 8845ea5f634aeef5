package coordinator

import (
	"strings"
	"testing"
)

func TestConfigValidate(t *testing.T) {
	if err := DefaultConfig().Validate(); err != nil {
		t.Fatalf("DefaultConfig().Validate() = %v", err)
	}
	c := DefaultConfig()
	c.DataDir = ""
	c.HTTPAddr = "7070"
	c.TLSClientCA = "ca.pem"
	err := c.Validate()
	for _, want := range []string{"data-dir: must be set", `http-addr: must be host:port, got "7070"`, "tls-client-ca: needs tls-cert"} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("Validate() = %v, want it to contain %q", err, want)
		}
	}
}
