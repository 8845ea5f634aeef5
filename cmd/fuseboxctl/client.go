package main

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"net"
	"os"
	"strings"
	"time"

	"github.com/spf13/cobra"
	"google.golang.org/grpc"
	"google.golang.org/grpc/backoff"
	"google.golang.org/grpc/connectivity"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/fusebox-dev/fusebox/protocol/fuseboxv1"
	"github.com/fusebox-dev/fusebox/sharedstate/secretfile"
)

// adminClient is a connection to one coordinator's Admin API.
type adminClient struct {
	addr  string
	conn  *grpc.ClientConn
	admin fuseboxv1.AdminClient
	opts  *globalOptions
}

// dial connects to the coordinator of o. The connection is lazy: an
// unreachable coordinator shows up as the first call's error (exit 4).
func (o *globalOptions) dial() (*adminClient, error) {
	token, err := o.token()
	if err != nil {
		return nil, err
	}
	dialOpts := []grpc.DialOption{
		// The coordinator sends fleet snapshots of up to 64 MiB.
		grpc.WithDefaultCallOptions(grpc.MaxCallRecvMsgSize(64 << 20)),
		// watch reconnects after a drop within --timeout: keep the
		// channel's reconnection backoff (default up to 2 minutes) short.
		grpc.WithConnectParams(grpc.ConnectParams{Backoff: backoff.Config{
			BaseDelay: 100 * time.Millisecond, Multiplier: 1.6, Jitter: 0.2, MaxDelay: 2 * time.Second,
		}, MinConnectTimeout: 20 * time.Second}), // 20s: grpc's default
	}
	tlsOn := o.tlsCA != "" || o.tlsCert != "" || o.tlsServerName != ""
	if tlsOn {
		tc, err := o.tlsConfig()
		if err != nil {
			return nil, err
		}
		dialOpts = append(dialOpts, grpc.WithTransportCredentials(credentials.NewTLS(tc)))
	} else {
		dialOpts = append(dialOpts, grpc.WithTransportCredentials(insecure.NewCredentials()))
	}
	if token != "" {
		if !tlsOn && !o.insecureToken && !loopbackTarget(o.coordinator) {
			return nil, usageError{fmt.Errorf("refusing to send the bearer token in plaintext to %s, which is not a loopback address: "+
				"turn TLS on (--tls-ca or --tls-server-name) or, knowing anyone on the way can read the token, pass --insecure-plaintext-token", o.coordinator)}
		}
		dialOpts = append(dialOpts, grpc.WithPerRPCCredentials(bearer{token: token, secure: tlsOn}))
	}
	target := o.coordinator
	if !strings.Contains(target, "://") {
		target = "passthrough:///" + target
	}
	conn, err := grpc.NewClient(target, dialOpts...)
	if err != nil {
		return nil, failure(exitUnreachable, err, "coordinator %s: %v", o.coordinator, err)
	}
	return &adminClient{addr: o.coordinator, conn: conn, admin: fuseboxv1.NewAdminClient(conn), opts: o}, nil
}

// rpc is a unary Admin method named by its method expression, e.g.
// fuseboxv1.AdminClient.GetFleet.
type rpc[Req, Resp any] func(fuseboxv1.AdminClient, context.Context, Req, ...grpc.CallOption) (Resp, error)

// invoke runs one RPC on c bounded by --timeout and maps its error to an
// exit code.
func invoke[Req, Resp any](ctx context.Context, c *adminClient, method rpc[Req, Resp], req Req) (Resp, error) {
	ctx, cancel := context.WithTimeout(ctx, c.opts.timeout)
	defer cancel()
	resp, err := method(c.admin, ctx, req)
	if err != nil {
		return resp, rpcError(err, c.addr, c.ready())
	}
	return resp, nil
}

// callOnce dials the coordinator of g, runs one RPC through invoke and
// closes the connection.
func callOnce[Req, Resp any](ctx context.Context, g *globalOptions, method rpc[Req, Resp], req Req) (Resp, error) {
	c, err := g.dial()
	if err != nil {
		var none Resp
		return none, err
	}
	defer c.Close()
	return invoke(ctx, c, method, req)
}

// completeFrom completes the names one RPC's answer holds (best effort:
// nothing when the coordinator cannot be reached).
func completeFrom[Req, Resp any](g *globalOptions, method rpc[Req, Resp], req Req, names func(Resp) []string) cobra.CompletionFunc {
	return func(cmd *cobra.Command, args []string, _ string) ([]string, cobra.ShellCompDirective) {
		if len(args) > 0 {
			return nil, cobra.ShellCompDirectiveNoFileComp
		}
		resp, err := callOnce(cmd.Context(), g, method, req)
		if err != nil {
			return nil, cobra.ShellCompDirectiveNoFileComp
		}
		return names(resp), cobra.ShellCompDirectiveNoFileComp
	}
}

// completeDependencies completes dependency names from the coordinator's
// fleet view.
func completeDependencies(g *globalOptions) cobra.CompletionFunc {
	return completeFrom(g, fuseboxv1.AdminClient.GetFleet, &fuseboxv1.GetFleetRequest{}, func(snap *fuseboxv1.FleetSnapshot) []string {
		return convertAll(snap.GetDependencies(), (*fuseboxv1.DependencyView).GetDependency)
	})
}

// completePolicies completes stored policy names.
func completePolicies(g *globalOptions) cobra.CompletionFunc {
	return completeFrom(g, fuseboxv1.AdminClient.ListPolicies, &fuseboxv1.ListPoliciesRequest{}, func(resp *fuseboxv1.ListPoliciesResponse) []string {
		return convertAll(resp.GetPolicies(), (*fuseboxv1.PolicyEntry).GetDependency)
	})
}

// ready reports whether the connection to the coordinator is up: an error
// while it is not means the coordinator was unreachable.
func (c *adminClient) ready() bool { return c.conn.GetState() == connectivity.Ready }

func (c *adminClient) Close() error { return c.conn.Close() }

// loopbackTarget reports whether a --coordinator address is on this host:
// a unix socket, localhost or a loopback IP.
func loopbackTarget(target string) bool {
	if scheme, rest, ok := strings.Cut(target, "://"); ok {
		if scheme == "unix" || scheme == "unix-abstract" {
			return true
		}
		target = strings.TrimLeft(rest, "/")
		if i := strings.LastIndex(target, "/"); i >= 0 {
			target = target[i+1:] // dns://resolver/host:port
		}
	}
	host, _, err := net.SplitHostPort(target)
	if err != nil {
		host = target
	}
	if strings.EqualFold(host, "localhost") {
		return true
	}
	ip := net.ParseIP(strings.Trim(host, "[]"))
	return ip != nil && ip.IsLoopback()
}

// token reads --token-file, else $FUSEBOX_TOKEN; empty means none (a
// coordinator without a tokens file serves loopback callers without one).
func (o *globalOptions) token() (string, error) {
	if o.tokenFile != "" {
		b, err := secretfile.Read(o.tokenFile)
		if err != nil {
			return "", fmt.Errorf("--token-file: %w", err)
		}
		t := strings.TrimSpace(string(b))
		if t == "" {
			return "", fmt.Errorf("--token-file %s is empty", o.tokenFile)
		}
		return t, nil
	}
	return strings.TrimSpace(os.Getenv("FUSEBOX_TOKEN")), nil
}

func (o *globalOptions) tlsConfig() (*tls.Config, error) {
	tc := &tls.Config{MinVersion: tls.VersionTLS12, ServerName: o.tlsServerName}
	if o.tlsCA != "" {
		pem, err := os.ReadFile(o.tlsCA)
		if err != nil {
			return nil, fmt.Errorf("--tls-ca: %w", err)
		}
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(pem) {
			return nil, fmt.Errorf("--tls-ca %s: no PEM certificates", o.tlsCA)
		}
		tc.RootCAs = pool
	}
	if (o.tlsCert == "") != (o.tlsKey == "") {
		return nil, usageError{errors.New("--tls-cert and --tls-key go together")}
	}
	if o.tlsCert != "" {
		if err := secretfile.Check(o.tlsKey); err != nil {
			return nil, fmt.Errorf("--tls-key: %w", err)
		}
		cert, err := tls.LoadX509KeyPair(o.tlsCert, o.tlsKey)
		if err != nil {
			return nil, fmt.Errorf("--tls-cert/--tls-key: %w", err)
		}
		tc.Certificates = []tls.Certificate{cert}
	}
	return tc, nil
}

// bearer sends the token on every call.
type bearer struct {
	token  string
	secure bool
}

func (b bearer) GetRequestMetadata(context.Context, ...string) (map[string]string, error) {
	return map[string]string{"authorization": "Bearer " + b.token}, nil
}

// RequireTransportSecurity is false so tokens work over plaintext loopback;
// use TLS (--tls-ca) for anything else.
func (b bearer) RequireTransportSecurity() bool { return b.secure }
