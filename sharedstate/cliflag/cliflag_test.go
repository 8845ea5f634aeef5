package cliflag

import "testing"

func TestIsLoopback(t *testing.T) {
	for addr, want := range map[string]bool{
		"127.0.0.1:7960": true, "[::1]:7960": true, "localhost:0": true, "127.0.0.2:1": true,
		"0.0.0.0:7960": false, ":7960": false, "10.0.0.1:7960": false, "example.com:1": false, "nonsense": false,
	} {
		if got := IsLoopback(addr); got != want {
			t.Errorf("IsLoopback(%q) = %v, want %v", addr, got, want)
		}
	}
}
