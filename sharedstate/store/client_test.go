package store

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/fusebox-dev/fusebox/sharedstate/secretfile"
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

// TestPasswordFileAndKeyModes: the password file's first line is the
// password; it and the client key are refused when group/other-readable,
// naming the file and its mode; the password flag and file exclude each
// other.
func TestPasswordFileAndKeyModes(t *testing.T) {
	dir := t.TempDir()
	pw := filepath.Join(dir, "pw")
	if err := os.WriteFile(pw, []byte("s3cret \nignored\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	cc, err := NewClientConfig(ClientOptions{Endpoints: []string{"127.0.0.1:2379"}, Username: "fb", PasswordFile: pw})
	if err != nil || cc.Password != "s3cret" {
		t.Fatalf("NewClientConfig with a 0600 password file: password %q, %v", cc.Password, err)
	}
	if err := os.Chmod(pw, 0o640); err != nil {
		t.Fatal(err)
	}
	_, err = NewClientConfig(ClientOptions{Endpoints: []string{"127.0.0.1:2379"}, Username: "fb", PasswordFile: pw})
	if !errors.Is(err, secretfile.ErrExposed) || !strings.Contains(err.Error(), pw) || !strings.Contains(err.Error(), "mode 0640") {
		t.Fatalf("0640 password file: %v", err)
	}
	key := filepath.Join(dir, "client.key")
	if err := os.WriteFile(key, []byte("not read"), 0o644); err != nil {
		t.Fatal(err)
	}
	_, err = NewClientConfig(ClientOptions{Endpoints: []string{"127.0.0.1:2379"}, CertFile: key + ".pem", KeyFile: key})
	if !errors.Is(err, secretfile.ErrExposed) || !strings.Contains(err.Error(), key) {
		t.Fatalf("0644 client key: %v", err)
	}
	vs := ClientOptions{Endpoints: []string{"127.0.0.1:2379"}, Password: "x", PasswordFile: pw}.Violations()
	if len(vs) != 3 { // both given; and each needs etcd-user
		t.Fatalf("violations %q, want: needs etcd-user (twice) and exclude each other", vs)
	}
}

func TestClientOptionsFor(t *testing.T) {
	auth := EtcdAuth{EtcdCA: "ca.pem", EtcdCert: "c.pem", EtcdKey: "k.pem",
		EtcdUsername: "u", EtcdPassword: "p", EtcdPasswordFile: "pw"}
	got := ClientOptionsFor([]string{"a:1", "b:2"}, auth)
	want := ClientOptions{Endpoints: []string{"a:1", "b:2"}, CAFile: "ca.pem", CertFile: "c.pem", KeyFile: "k.pem",
		Username: "u", Password: "p", PasswordFile: "pw"}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("ClientOptionsFor = %+v, want %+v", got, want)
	}
}
