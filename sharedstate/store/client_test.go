package store

import (
	"strings"
	"testing"
)

func TestNewClientConfig(t *testing.T) {
	cc, err := NewClientConfig(ClientOptions{Endpoints: []string{"http://127.0.0.1:2379"}, Username: "u", Password: "p"})
	if err != nil {
		t.Fatal(err)
	}
	if cc.DialTimeout <= 0 || cc.Username != "u" || cc.Password != "p" || cc.TLS != nil || len(cc.DialOptions) == 0 {
		t.Fatalf("config %+v", cc)
	}
	for _, tc := range []struct {
		name string
		o    ClientOptions
		want string
	}{
		{"no endpoints", ClientOptions{}, "no etcd endpoints"},
		{"cert without key", ClientOptions{Endpoints: []string{"x"}, CertFile: "c.pem"}, `cert file "c.pem" and key file "" go together`},
		{"missing CA file", ClientOptions{Endpoints: []string{"x"}, CAFile: "/nonexistent/ca.pem"}, "store: client TLS"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if _, err := NewClientConfig(tc.o); err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("err = %v, want it to contain %q", err, tc.want)
			}
		})
	}
}
