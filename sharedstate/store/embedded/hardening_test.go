package embedded_test

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"

	"github.com/fusebox-dev/fusebox/sharedstate/secretfile"
	"github.com/fusebox-dev/fusebox/sharedstate/sstest"
	"github.com/fusebox-dev/fusebox/sharedstate/store/embedded"
)

// writeCerts writes a CA and a certificate it signs for 127.0.0.1, usable
// by a server and a client, into dir: ca.pem, node.pem, node.key (0600).
func writeCerts(t *testing.T, dir string) (ca, cert, key string) {
	t.Helper()
	caKey, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	caTmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "test CA"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign}
	caDER, err := x509.CreateCertificate(rand.Reader, caTmpl, caTmpl, &caKey.PublicKey, caKey)
	if err != nil {
		t.Fatal(err)
	}
	caCert, _ := x509.ParseCertificate(caDER)
	k, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(2), Subject: pkix.Name{CommonName: "coordinator"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		KeyUsage:    x509.KeyUsageDigitalSignature,
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth},
		IPAddresses: []net.IP{net.ParseIP("127.0.0.1")}, DNSNames: []string{"localhost"}}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, caCert, &k.PublicKey, caKey)
	if err != nil {
		t.Fatal(err)
	}
	kb, _ := x509.MarshalECPrivateKey(k)
	write := func(name, typ string, b []byte) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, pem.EncodeToMemory(&pem.Block{Type: typ, Bytes: b}), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	return write("ca.pem", "CERTIFICATE", caDER), write("node.pem", "CERTIFICATE", der), write("node.key", "EC PRIVATE KEY", kb)
}

// TestTLSRequiresClientCertificates: with TLS files the embedded etcd serves
// https and refuses a client without a certificate; ClientConfig presents
// one. A key others may read is refused at start.
func TestTLSRequiresClientCertificates(t *testing.T) {
	dir := t.TempDir()
	ca, cert, key := writeCerts(t, dir)
	cfg := embedded.TestConfig(filepath.Join(dir, "etcd"))
	cfg.ClientURL = "https://127.0.0.1:0"
	cfg.TLS = embedded.TLSFiles{CertFile: cert, KeyFile: key, ClientCAFile: ca}

	if err := os.Chmod(key, 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := embedded.Start(ctxForTest(t), cfg); !errors.Is(err, secretfile.ErrExposed) || !strings.Contains(err.Error(), key) {
		t.Fatalf("start with a 0644 key = %v, want a refusal naming %s", err, key)
	}
	if err := os.Chmod(key, 0o600); err != nil {
		t.Fatal(err)
	}
	srv, err := embedded.Start(ctxForTest(t), cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Close()
	if ep := srv.Endpoints()[0]; !strings.HasPrefix(ep, "https://127.0.0.1:") || strings.HasSuffix(ep, ":0") {
		t.Fatalf("endpoint %s", ep)
	}
	cli, err := srv.NewClient()
	if err != nil {
		t.Fatal(err)
	}
	defer cli.Close()
	if _, err := cli.Put(ctxForTest(t), "k", "v"); err != nil {
		t.Fatalf("put with the client certificate: %v", err)
	}

	// Trusting the server but presenting no certificate: refused.
	noCert := srv.ClientConfig()
	noCert.TLS = noCert.TLS.Clone()
	noCert.TLS.Certificates = nil
	noCert.TLS.GetClientCertificate = nil
	noCert.DialTimeout = 2 * time.Second
	noCert.Logger = zap.NewNop()
	anon, err := clientv3.New(noCert)
	if err == nil {
		defer anon.Close()
		ctx, cancel := context2s()
		defer cancel()
		if _, err = anon.Get(ctx, "k"); err == nil {
			t.Fatal("a client without a certificate read from the TLS etcd")
		}
	}
}

// TestAutoCompactionAndQuota: periodic compaction removes old revisions
// without anyone calling Compact, and writes past the backend quota are
// refused with etcd's "database space exceeded".
func TestAutoCompactionAndQuota(t *testing.T) {
	cfg := embedded.TestConfig(t.TempDir())
	cfg.AutoCompactionMode, cfg.AutoCompactionRetention = "periodic", "1s"
	cfg.QuotaBackendBytes = 4 << 20
	srv, err := embedded.Start(ctxForTest(t), cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Close()
	cli, err := srv.NewClient()
	if err != nil {
		t.Fatal(err)
	}
	defer cli.Close()
	// Each phase has its own generous deadline: under load, the 64 fsynced
	// half-MiB writes below alone can take longer than a shared one left.
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	first, err := cli.Put(ctx, "k", "0")
	if err != nil {
		t.Fatal(err)
	}
	sstest.Eventually(t, 45*time.Second, "the first revision compacted away", func() bool {
		if _, err := cli.Put(ctx, "k", "x"); err != nil {
			t.Fatal(err)
		}
		_, err := cli.Get(ctx, "k", clientv3.WithRev(first.Header.Revision))
		return errors.Is(err, rpctypes.ErrCompacted)
	})

	ctx, cancel = context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	big := strings.Repeat("x", 512<<10)
	var perr error
	for i := 0; i < 64 && perr == nil; i++ {
		_, perr = cli.Put(ctx, "big/"+string(rune('a'+i%26))+string(rune('a'+i/26)), big)
	}
	if !errors.Is(perr, rpctypes.ErrNoSpace) {
		t.Fatalf("32 MiB into a 4 MiB quota: last error %v, want %v", perr, rpctypes.ErrNoSpace)
	}
}

func TestValidateHardening(t *testing.T) {
	for _, tc := range []struct {
		cfg  embedded.Config
		want string
	}{
		{embedded.Config{Dir: "d", AutoCompactionMode: "sometimes"}, `AutoCompactionMode "sometimes"`},
		{embedded.Config{Dir: "d", AutoCompactionMode: "revision", AutoCompactionRetention: "1h"}, "positive number of revisions"},
		{embedded.Config{Dir: "d", AutoCompactionMode: "periodic", AutoCompactionRetention: "-1s"}, "positive duration"},
		{embedded.Config{Dir: "d", QuotaBackendBytes: -1}, "QuotaBackendBytes"},
		{embedded.Config{Dir: "d", ClientURL: "https://127.0.0.1:0"}, "https needs TLS files"},
		{embedded.Config{Dir: "d", TLS: embedded.TLSFiles{CertFile: "c"}}, "go together"},
		{embedded.Config{Dir: "d", ClientURL: "http://127.0.0.1:0", TLS: embedded.TLSFiles{CertFile: "c", KeyFile: "k", ClientCAFile: "ca"}}, "must be https"},
	} {
		if err := tc.cfg.Validate(); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("Validate(%+v) = %v, want %q", tc.cfg, err, tc.want)
		}
	}
}

func context2s() (context.Context, context.CancelFunc) {
	return context.WithTimeout(context.Background(), 2*time.Second)
}
