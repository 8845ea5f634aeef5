package store

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"net"
	"net/url"
	"strings"
	"time"

	"github.com/fusebox-dev/fusebox/sharedstate/secretfile"
	"go.etcd.io/etcd/client/pkg/v3/transport"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
	"google.golang.org/grpc"
	grpcbackoff "google.golang.org/grpc/backoff"
)

// Client is an etcd client. The daemons hold and pass a *store.Client, so
// that only this package (and embedded) imports etcd's client packages.
type Client = clientv3.Client

// ClientOptions say how to reach an external etcd. The agent and the
// coordinator build their clients from them with Dial, and check their
// flags with Violations, so both speak to etcd alike and refuse the same
// settings with the same words.
type ClientOptions struct {
	// Endpoints are etcd client URLs, http(s)://host:port, or host:port
	// (required).
	Endpoints []string
	// CAFile verifies etcd's certificate; CertFile and KeyFile are the
	// client's (optional, CertFile and KeyFile go together).
	CAFile, CertFile, KeyFile string
	// Username and Password authenticate to etcd (optional; Password needs
	// Username).
	Username, Password string
	// PasswordFile holds the password instead of Password (which a flag
	// shows in /proc/*/cmdline): its first line, trailing white space cut.
	// It is a secret file: refused when group/other-accessible.
	PasswordFile string
	// DialTimeout bounds the first connection (optional, default 5s).
	DialTimeout time.Duration
	// Logger is the etcd client's own log (optional, default none).
	Logger *zap.Logger
}

// EtcdAuth is how a daemon authenticates to an external etcd, as its flags
// give it (--etcd-ca, --etcd-cert, --etcd-key, --etcd-user,
// --etcd-password, --etcd-password-file). The agent's and the
// coordinator's Config embed it, next to their own Etcd endpoints;
// ClientOptionsFor joins the two.
type EtcdAuth struct {
	// EtcdCA, EtcdCert, EtcdKey configure TLS to etcd (optional).
	EtcdCA, EtcdCert, EtcdKey string
	// EtcdUsername and EtcdPassword authenticate to etcd (optional).
	EtcdUsername, EtcdPassword string
	// EtcdPasswordFile holds the etcd password (a secret file: mode 0600
	// or stricter), instead of EtcdPassword.
	EtcdPasswordFile string
}

// RegisterFlags registers the etcd TLS and authentication flags both
// daemons take, bound to a (each flag's default is a's current value):
// --etcd-ca, --etcd-cert, --etcd-key, --etcd-user, --etcd-password and
// --etcd-password-file, the names Violations reports. fs is a daemon's
// *pflag.FlagSet (package daemonflag), or any flag set alike.
func (a *EtcdAuth) RegisterFlags(fs interface {
	StringVar(p *string, name, value, usage string)
}) {
	fs.StringVar(&a.EtcdCA, "etcd-ca", a.EtcdCA, "CA bundle to verify etcd's TLS certificate (default: the system's CAs)")
	fs.StringVar(&a.EtcdCert, "etcd-cert", a.EtcdCert, "client certificate for etcd TLS (default: none)")
	fs.StringVar(&a.EtcdKey, "etcd-key", a.EtcdKey, "client key for etcd TLS (default: none)")
	fs.StringVar(&a.EtcdUsername, "etcd-user", a.EtcdUsername, "etcd user name (default: none: no etcd authentication)")
	fs.StringVar(&a.EtcdPassword, "etcd-password", a.EtcdPassword, "etcd password; prefer FUSEBOX_ETCD_PASSWORD or --etcd-password-file (default: none)")
	fs.StringVar(&a.EtcdPasswordFile, "etcd-password-file", a.EtcdPasswordFile, "file holding the etcd password (mode 0600 or stricter; keeps it out of the command line) (default: none)")
}

// ClientOptionsFor returns the ClientOptions of a daemon's etcd settings:
// endpoints and auth (no DialTimeout or Logger).
func ClientOptionsFor(endpoints []string, auth EtcdAuth) ClientOptions {
	return ClientOptions{
		Endpoints: endpoints,
		CAFile:    auth.EtcdCA, CertFile: auth.EtcdCert, KeyFile: auth.EtcdKey,
		Username: auth.EtcdUsername, Password: auth.EtcdPassword, PasswordFile: auth.EtcdPasswordFile,
	}
}

// Violations lists every problem of o, each as "<flag>: <what is wrong>",
// named by the daemons' flags (etcd, etcd-cert, etcd-password). An empty
// Endpoints list is not one (a daemon may run without etcd); Validate
// refuses it. It reads no file: a missing CA or key file is Dial's error.
func (o ClientOptions) Violations() []string {
	var out []string
	bad := func(flag, format string, args ...any) {
		out = append(out, flag+": "+fmt.Sprintf(format, args...))
	}
	for _, e := range o.Endpoints {
		if strings.TrimSpace(e) == "" {
			bad("etcd", "empty endpoint")
		} else if !validEndpoint(e) {
			bad("etcd", "must be http(s)://host:port or host:port, got %q", e)
		}
	}
	if (o.CertFile == "") != (o.KeyFile == "") {
		bad("etcd-cert", "etcd-cert and etcd-key go together, got cert %q key %q", o.CertFile, o.KeyFile)
	}
	if o.Password != "" && o.Username == "" {
		bad("etcd-password", "needs etcd-user")
	}
	if o.PasswordFile != "" && o.Password != "" {
		bad("etcd-password-file", "etcd-password and etcd-password-file exclude each other")
	}
	if o.PasswordFile != "" && o.Username == "" {
		bad("etcd-password-file", "needs etcd-user")
	}
	return out
}

func validEndpoint(e string) bool {
	if strings.Contains(e, "://") {
		u, err := url.Parse(e)
		return err == nil && u.Host != "" && (u.Scheme == "http" || u.Scheme == "https")
	}
	_, _, err := net.SplitHostPort(e)
	return err == nil
}

// Validate returns every violation of o (Violations) as one error, nil when
// there is none.
func (o ClientOptions) Validate() error {
	var errs []error
	if len(o.Endpoints) == 0 {
		errs = append(errs, errors.New("store: client: etcd: no etcd endpoints"))
	}
	for _, v := range o.Violations() {
		errs = append(errs, errors.New("store: client: "+v))
	}
	return errors.Join(errs...)
}

// ReadPasswordFile reads a password file: a secret file (secretfile.Read)
// whose first line, trailing white space cut, is the password; an empty one
// is refused.
func ReadPasswordFile(path string) (string, error) {
	data, err := secretfile.Read(path)
	if err != nil {
		return "", err
	}
	line, _, _ := strings.Cut(string(data), "\n")
	pw := strings.TrimRight(line, " \t\r")
	if pw == "" {
		return "", fmt.Errorf("%s: empty password", path)
	}
	return pw, nil
}

// CheckPrefix says what is wrong with an etcd key prefix given as a flag
// (etcd-prefix): it must start and end with '/'. It returns "" when the
// prefix is good.
func CheckPrefix(prefix string) string {
	if !strings.HasPrefix(prefix, "/") || !strings.HasSuffix(prefix, "/") {
		return fmt.Sprintf("must start and end with '/', got %q", prefix)
	}
	return ""
}

// MaxReconnectDelay caps the etcd client's reconnect backoff. gRPC's default
// grows to 2 minutes, so after a long partition a client would wait that
// long to see etcd again; watchers re-list once reconnected.
const MaxReconnectDelay = 5 * time.Second

// NewClientConfig returns the clientv3.Config for o (Validate first): TLS
// when any of the files is set, user/password, keep-alives, and a reconnect
// backoff from 100ms up to MaxReconnectDelay. Dial uses it; most callers
// want Dial. The key file and the password file are secret files
// (secretfile.Check): refused, naming the file and its mode, when group or
// others may access them.
func NewClientConfig(o ClientOptions) (clientv3.Config, error) {
	if err := o.Validate(); err != nil {
		return clientv3.Config{}, err
	}
	if o.KeyFile != "" {
		if err := secretfile.Check(o.KeyFile); err != nil {
			return clientv3.Config{}, fmt.Errorf("store: client: etcd-key: %w", err)
		}
	}
	if o.PasswordFile != "" {
		pw, err := ReadPasswordFile(o.PasswordFile)
		if err != nil {
			return clientv3.Config{}, fmt.Errorf("store: client: etcd-password-file: %w", err)
		}
		o.Password = pw
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
		Logger:               cmp.Or(o.Logger, zap.NewNop()),
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

// Dial returns a client of the etcd that o names: the one etcd client
// constructor of the agent and the coordinator. ctx bounds the dial only
// (a deadline shorter than DialTimeout shortens it); the client lives until
// its Close.
func Dial(ctx context.Context, o ClientOptions) (*Client, error) {
	cc, err := NewClientConfig(o)
	if err != nil {
		return nil, err
	}
	return DialConfig(ctx, cc)
}

// DialConfig returns a client for a ready-made configuration (the embedded
// etcd's, embedded.Server.ClientConfig), with Dial's ctx rule.
func DialConfig(ctx context.Context, cc clientv3.Config) (*Client, error) {
	if dl, ok := ctx.Deadline(); ok && time.Until(dl) < cc.DialTimeout {
		cc.DialTimeout = max(time.Until(dl), 100*time.Millisecond)
	}
	cli, err := clientv3.New(cc)
	if err != nil {
		return nil, fmt.Errorf("store: etcd client: %w", err)
	}
	return cli, nil
}
