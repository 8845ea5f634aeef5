package coordinator

import (
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"os"

	"github.com/fusebox-dev/fusebox/sharedstate/secretfile"
)

// serverTLS loads the TLS configuration of the Admin API and HTTP (nil
// without --tls-cert).
func (c *Coordinator) serverTLS() (*tls.Config, error) {
	if c.cfg.TLSCert == "" {
		return nil, nil
	}
	if err := secretfile.Check(c.cfg.TLSKey); err != nil {
		return nil, fmt.Errorf("coordinator: tls-key: %w", err)
	}
	cert, err := tls.LoadX509KeyPair(c.cfg.TLSCert, c.cfg.TLSKey)
	if err != nil {
		return nil, fmt.Errorf("coordinator: tls-cert/tls-key: %w", err)
	}
	tc := &tls.Config{MinVersion: tls.VersionTLS12, Certificates: []tls.Certificate{cert}}
	if c.cfg.TLSClientCA != "" {
		pem, err := os.ReadFile(c.cfg.TLSClientCA)
		if err != nil {
			return nil, fmt.Errorf("coordinator: tls-client-ca: %w", err)
		}
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(pem) {
			return nil, fmt.Errorf("coordinator: tls-client-ca %s: no PEM certificates", c.cfg.TLSClientCA)
		}
		tc.ClientCAs = pool
		tc.ClientAuth = tls.RequireAndVerifyClientCert
	}
	return tc, nil
}
