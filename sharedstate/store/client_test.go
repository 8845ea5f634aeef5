package store

import (
	"context"
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
		{"cert without key", ClientOptions{Endpoints: []string{"x:1"}, CertFile: "c.pem"}, `store: client: etcd-cert: etcd-cert and etcd-key go together, got cert "c.pem" key ""`},
		{"bad endpoint", ClientOptions{Endpoints: []string{"ftp://x", " ", "etcd"}}, `etcd: must be http(s)://host:port or host:port, got "ftp://x"`},
		{"password without user", ClientOptions{Endpoints: []string{"etcd:2379"}, Password: "p"}, "etcd-password: needs etcd-user"},
		{"missing CA file", ClientOptions{Endpoints: []string{"x:1"}, CAFile: "/nonexistent/ca.pem"}, "store: client TLS"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if _, err := NewClientConfig(tc.o); err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("err = %v, want it to contain %q", err, tc.want)
			}
		})
	}
}

// Violations names every problem at once, by flag; Dial refuses the same.
func TestClientOptionsViolations(t *testing.T) {
	o := ClientOptions{Endpoints: []string{"", "https://etcd:2379", "nohost"}, CertFile: "c", Password: "p"}
	v := o.Violations()
	want := []string{"etcd: empty endpoint", `etcd: must be http(s)://host:port or host:port, got "nohost"`,
		`etcd-cert: etcd-cert and etcd-key go together, got cert "c" key ""`, "etcd-password: needs etcd-user"}
	if strings.Join(v, "\n") != strings.Join(want, "\n") {
		t.Fatalf("Violations() =\n%s\nwant\n%s", strings.Join(v, "\n"), strings.Join(want, "\n"))
	}
	if len((ClientOptions{}).Violations()) != 0 {
		t.Error("no endpoints is a violation (a daemon may run without etcd)")
	}
	if _, err := Dial(context.Background(), o); err == nil || !strings.Contains(err.Error(), "etcd-password: needs etcd-user") {
		t.Errorf("Dial(bad) = %v", err)
	}
	if _, err := Dial(context.Background(), ClientOptions{}); err == nil || !strings.Contains(err.Error(), "no etcd endpoints") {
		t.Errorf("Dial(no endpoints) = %v", err)
	}
	if CheckPrefix("/fusebox/") != "" || CheckPrefix("fusebox") == "" || CheckPrefix("/fusebox") == "" {
		t.Error("CheckPrefix")
	}
}
