package coordinator

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"math/big"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil/promlint"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/status"

	"github.com/fusebox-dev/fusebox/coordinator/internal/events"
	"github.com/fusebox-dev/fusebox/protocol/fuseboxv1"
)

func TestMetricsLintAndList(t *testing.T) {
	c := startCoordinator(t, testConfig(t))
	a := adminClient(t, c.GRPCAddr(), "")
	ctx := ctxFor(t, 10*time.Second)
	if _, err := a.ListPolicies(ctx, &fuseboxv1.ListPoliciesRequest{}); err != nil {
		t.Fatal(err)
	}
	if _, err := a.GetPolicy(ctx, &fuseboxv1.GetPolicyRequest{Dependency: "nope"}); status.Code(err) != codes.NotFound {
		t.Fatal(err)
	}
	c.publish(events.Event{Type: events.TypePolicy, Dependency: "x", State: "put"})
	httpGet(t, "http://"+c.HTTPAddr()+"/healthz", "", http.StatusOK)
	body := httpGet(t, "http://"+c.HTTPAddr()+"/metrics", "", http.StatusOK)

	problems, err := promlint.New(strings.NewReader(body)).Lint()
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range problems {
		t.Errorf("promlint: %s: %s", p.Metric, p.Text)
	}
	var served []string
	for _, line := range strings.Split(body, "\n") {
		if name, ok := strings.CutPrefix(line, "# TYPE "); ok {
			name = strings.Fields(name)[0]
			if strings.HasPrefix(name, "fusebox_") {
				served = append(served, name)
			}
		}
	}
	want := slices.Clone(MetricNames)
	slices.Sort(want)
	slices.Sort(served)
	if !slices.Equal(served, want) {
		t.Errorf("/metrics serves %v\nMetricNames lists %v", served, want)
	}
	if v := metricValue(t, c.reg, "fusebox_coordinator_admin_requests_total", map[string]string{"method": "GetPolicy", "code": "NotFound"}); v != 1 {
		t.Errorf("admin_requests_total{GetPolicy,NotFound} = %v, want 1", v)
	}
	if v := metricValue(t, c.reg, "fusebox_coordinator_http_requests_total", map[string]string{"handler": "healthz", "code": "200"}); v != 1 {
		t.Errorf("http_requests_total{healthz,200} = %v, want 1", v)
	}
	if v := metricValue(t, c.reg, "fusebox_coordinator_members", map[string]string{"status": "alive"}); v != 1 {
		t.Errorf("members{alive} = %v, want 1 (the observer itself)", v)
	}
}

func TestTwoCoordinatorsKeepSeparateMetrics(t *testing.T) {
	a := startCoordinator(t, testConfig(t))
	cfg := testConfig(t)
	cfg.Etcd = a.EtcdEndpoints()
	b := startCoordinator(t, cfg)
	ctx := ctxFor(t, 10*time.Second)
	if _, err := adminClient(t, a.GRPCAddr(), "").ListPolicies(ctx, &fuseboxv1.ListPoliciesRequest{}); err != nil {
		t.Fatal(err)
	}
	lbl := map[string]string{"method": "ListPolicies", "code": "OK"}
	if got := metricValue(t, a.reg, "fusebox_coordinator_admin_requests_total", lbl); got != 1 {
		t.Errorf("a counted %v", got)
	}
	mfs, _ := b.reg.Gather()
	for _, mf := range mfs {
		if mf.GetName() == "fusebox_coordinator_admin_requests_total" && len(mf.GetMetric()) > 0 {
			t.Errorf("b counted a's request: %v", mf)
		}
	}
}

func TestStartFailsCleanly(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	cfg := testConfig(t)
	cfg.HTTPAddr = l.Addr().String() // taken
	c, err := New(cfg, testOptions()...)
	if err != nil {
		t.Fatal(err)
	}
	err = c.Start(ctxFor(t, 30*time.Second))
	if err == nil || !strings.Contains(err.Error(), "http-addr") {
		t.Fatalf("Start on a taken port = %v, want an http-addr error", err)
	}
	// Everything started before the failure is stopped (goleak checks
	// goroutines at the end); Close stays safe, and Start refuses.
	if err := c.Close(); err != nil {
		t.Fatal(err)
	}
	if err := c.Start(context.Background()); !errors.Is(err, ErrClosed) {
		t.Fatalf("Start after Close = %v, want ErrClosed", err)
	}

	cfg = testConfig(t)
	cfg.TokensFile = writeTokens(t, "root abc\n")
	c, err = New(cfg, testOptions()...)
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Start(ctxFor(t, 10*time.Second)); err == nil || !strings.Contains(err.Error(), "unknown role") {
		t.Fatalf("Start with a bad tokens file = %v", err)
	}
	_ = c.Close()
}

func TestRunStopsWithItsContext(t *testing.T) {
	for _, d := range []time.Duration{0, time.Second} { // while starting, and once serving
		ctx, cancel := context.WithTimeout(context.Background(), d)
		done := make(chan error, 1)
		go func() { done <- Run(ctx, testConfig(t), testOptions()...) }()
		timer := time.NewTimer(30 * time.Second)
		select {
		case err := <-done:
			if err != nil {
				t.Fatalf("Run = %v", err)
			}
		case <-timer.C:
			t.Fatal("Run did not return after its context ended")
		}
		timer.Stop()
		cancel()
	}
	if err := Run(context.Background(), Config{}); err == nil {
		t.Fatal("Run with an invalid config succeeded")
	}
}

func TestCloseIsIdempotent(t *testing.T) {
	c := startCoordinator(t, testConfig(t))
	if err := c.Close(); err != nil {
		t.Fatal(err)
	}
	if err := c.Close(); err != nil {
		t.Fatal(err)
	}
	select {
	case <-c.Done():
	default:
		t.Fatal("Done not closed after Close")
	}
	if c.Err() != nil {
		t.Fatalf("Err after a clean Close = %v", c.Err())
	}
}

// TestMutualTLS serves the Admin API over TLS with client certificates
// required, and tokens on top.
func TestMutualTLS(t *testing.T) {
	dir := t.TempDir()
	ca, caKey := newCA(t)
	writePEM(t, filepath.Join(dir, "ca.pem"), "CERTIFICATE", ca.Raw)
	serverCert := issue(t, ca, caKey, "localhost", filepath.Join(dir, "server"), true)
	clientCert := issue(t, ca, caKey, "alice", filepath.Join(dir, "client"), false)

	cfg := testConfig(t)
	cfg.TLSCert, cfg.TLSKey = serverCert+".pem", serverCert+".key"
	cfg.TLSClientCA = filepath.Join(dir, "ca.pem")
	cfg.TokensFile = writeTokens(t, testTokens)
	c := startCoordinator(t, cfg)
	ctx := ctxFor(t, 10*time.Second)

	pool := x509.NewCertPool()
	pool.AddCert(ca)
	cert, err := tls.LoadX509KeyPair(clientCert+".pem", clientCert+".key")
	if err != nil {
		t.Fatal(err)
	}
	withCert := credentials.NewTLS(&tls.Config{RootCAs: pool, ServerName: "localhost", Certificates: []tls.Certificate{cert}})
	a := adminClient(t, c.GRPCAddr(), adminToken, grpc.WithTransportCredentials(withCert))
	o, err := a.ForceOpen(ctx, &fuseboxv1.SetOverrideRequest{Dependency: "tls-dep", Actor: "ops"})
	if err != nil {
		t.Fatalf("ForceOpen over mTLS: %v", err)
	}
	if o.GetActor() != "ops (ops-admin cert:alice)" {
		t.Errorf("actor = %q, want the token and certificate identities", o.GetActor())
	}
	noCert := credentials.NewTLS(&tls.Config{RootCAs: pool, ServerName: "localhost"})
	b := adminClient(t, c.GRPCAddr(), adminToken, grpc.WithTransportCredentials(noCert))
	if _, err := b.ListPolicies(ctx, &fuseboxv1.ListPoliciesRequest{}); err == nil {
		t.Fatal("a client without a certificate was served")
	}
	// HTTP is TLS too.
	hc := &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool, ServerName: "localhost",
		Certificates: []tls.Certificate{cert}}}}
	defer hc.CloseIdleConnections()
	resp, err := hc.Get("https://" + c.HTTPAddr() + "/healthz")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("https healthz: %s", resp.Status)
	}
}

func newCA(t *testing.T) (*x509.Certificate, *ecdsa.PrivateKey) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "fusebox test CA"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	ca, err := x509.ParseCertificate(der)
	if err != nil {
		t.Fatal(err)
	}
	return ca, key
}

// issue writes base.pem and base.key for cn, signed by ca, and returns base.
func issue(t *testing.T, ca *x509.Certificate, caKey *ecdsa.PrivateKey, cn, base string, server bool) string {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(time.Now().UnixNano()), Subject: pkix.Name{CommonName: cn},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth},
	}
	if server {
		tmpl.ExtKeyUsage = []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}
		tmpl.DNSNames = []string{"localhost"}
		tmpl.IPAddresses = []net.IP{net.ParseIP("127.0.0.1")}
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca, &key.PublicKey, caKey)
	if err != nil {
		t.Fatal(err)
	}
	kb, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	writePEM(t, base+".pem", "CERTIFICATE", der)
	writePEM(t, base+".key", "EC PRIVATE KEY", kb)
	return base
}

func writePEM(t *testing.T, path, typ string, der []byte) {
	t.Helper()
	if err := os.WriteFile(path, pem.EncodeToMemory(&pem.Block{Type: typ, Bytes: der}), 0o600); err != nil {
		t.Fatal(err)
	}
}
