package store

import (
	"fmt"
	"time"

	"go.etcd.io/etcd/client/pkg/v3/transport"
	clientv3 "go.etcd.io/etcd/client/v3"
	"google.golang.org/grpc"
	grpcbackoff "google.golang.org/grpc/backoff"
)

// ClientOptions say how to reach an external etcd. The agent and the
// coordinator build their clients from them, so both speak to etcd alike.
type ClientOptions struct {
	// Endpoints are etcd client URLs (required).
	Endpoints []string
	// CAFile verifies etcd's certificate; CertFile and KeyFile are the
	// client's (optional, go together).
	CAFile, CertFile, KeyFile string
	// Username and Password authenticate to etcd (optional).
	Username, Password string
	// DialTimeout bounds the first connection (optional, default 5s).
	DialTimeout time.Duration
}

// MaxReconnectDelay caps the etcd client's reconnect backoff. gRPC's default
// grows to 2 minutes, so after a long partition a client would wait that
// long to see etcd again; watchers re-list once reconnected.
const MaxReconnectDelay = 5 * time.Second

// NewClientConfig returns the clientv3.Config for o: TLS when any of the
// files is set, user/password, keep-alives, and a reconnect backoff from
// 100ms up to MaxReconnectDelay. The caller sets Logger.
func NewClientConfig(o ClientOptions) (clientv3.Config, error) {
	if len(o.Endpoints) == 0 {
		return clientv3.Config{}, fmt.Errorf("store: client: no etcd endpoints")
	}
	if (o.CertFile == "") != (o.KeyFile == "") {
		return clientv3.Config{}, fmt.Errorf("store: client: cert file %q and key file %q go together", o.CertFile, o.KeyFile)
	}
	dial := o.DialTimeout
	if dial <= 0 {
		dial = 5 * time.Second
	}
	cc := clientv3.Config{
		Endpoints:            append([]string(nil), o.Endpoints...),
		DialTimeout:          dial,
		DialKeepAliveTime:    10 * time.Second,
		DialKeepAliveTimeout: 5 * time.Second,
		Username:             o.Username,
		Password:             o.Password,
		DialOptions: []grpc.DialOption{grpc.WithConnectParams(grpc.ConnectParams{
			Backoff:           grpcbackoff.Config{BaseDelay: 100 * time.Millisecond, Multiplier: 1.6, Jitter: 0.2, MaxDelay: MaxReconnectDelay},
			MinConnectTimeout: dial,
		})},
	}
	if o.CAFile != "" || o.CertFile != "" {
		ti := transport.TLSInfo{CertFile: o.CertFile, KeyFile: o.KeyFile, TrustedCAFile: o.CAFile}
		tc, err := ti.ClientConfig()
		if err != nil {
			return clientv3.Config{}, fmt.Errorf("store: client TLS: %w", err)
		}
		cc.TLS = tc
	}
	return cc, nil
}
