package agent

import (
	"fmt"
	"net"
	"os"
	"path/filepath"
	"time"

	"github.com/fusebox-dev/fusebox/agent/internal/agentopt"
	"github.com/fusebox-dev/fusebox/protocol/serverlimits"
)

// HTTPTimeouts bound each connection to the agent's HTTP server (/metrics,
// /healthz, /readyz): a client that sends its headers too slowly, its body
// too slowly, reads the answer too slowly or idles on a kept-alive
// connection is cut off.
type HTTPTimeouts = serverlimits.HTTPTimeouts

// DefaultHTTPTimeouts are the agent's HTTP timeouts.
var DefaultHTTPTimeouts = HTTPTimeouts{ReadHeader: 5 * time.Second, Read: 10 * time.Second, Write: 30 * time.Second, Idle: 2 * time.Minute}

// WithHTTPTimeouts replaces DefaultHTTPTimeouts (tests shorten them).
func WithHTTPTimeouts(t HTTPTimeouts) Option {
	return func(o *agentopt.Options) { o.HTTPTimeouts = &t }
}

// Limits of the local API's gRPC server. A client (clientlib) holds one
// Session stream; MaxSessions caps those, these cap the transport.
const (
	// MaxConcurrentStreams is the most streams one connection may have open.
	MaxConcurrentStreams = 256
	// KeepaliveMinTime is the shortest interval between a client's pings the
	// agent accepts; a client pinging faster is sent GOAWAY (too_many_pings).
	KeepaliveMinTime = serverlimits.KeepaliveMinTime
)

// listenUnix creates the socket's directory, removes a stale socket file
// (one nobody answers on) and listens with mode 0660. The socket never
// exists at path with another mode: it is bound in a private (0700)
// directory next to path, given its mode there and then renamed into place.
func listenUnix(path string) (net.Listener, error) {
	dir := filepath.Dir(path)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, fmt.Errorf("agent: socket directory: %w", err)
	}
	if fi, err := os.Lstat(path); err == nil {
		if fi.Mode()&os.ModeSocket == 0 {
			return nil, fmt.Errorf("agent: socket %s exists and is not a socket", path)
		}
		if c, err := net.DialTimeout("unix", path, 200*time.Millisecond); err == nil {
			c.Close()
			return nil, fmt.Errorf("agent: socket %s is in use by another process", path)
		}
		if err := os.Remove(path); err != nil {
			return nil, fmt.Errorf("agent: remove stale socket: %w", err)
		}
	}
	private, err := os.MkdirTemp(dir, ".fusebox-sock-*") // mode 0700
	if err != nil {
		return nil, fmt.Errorf("agent: socket: private directory: %w", err)
	}
	defer os.RemoveAll(private)
	tmp := filepath.Join(private, "s")
	ln, err := net.Listen("unix", tmp)
	if err != nil {
		return nil, fmt.Errorf("agent: socket: %w", err)
	}
	ln.(*net.UnixListener).SetUnlinkOnClose(false)
	if err := os.Chmod(tmp, 0o660); err != nil {
		ln.Close()
		return nil, fmt.Errorf("agent: socket mode: %w", err)
	}
	if err := os.Rename(tmp, path); err != nil {
		ln.Close()
		return nil, fmt.Errorf("agent: socket: %w", err)
	}
	return &unixListener{Listener: ln, path: path}, nil
}

// unixListener removes its socket file when closed (the file was renamed
// after the bind, so net's own unlink would miss it).
type unixListener struct {
	net.Listener
	path string
}

func (l *unixListener) Close() error {
	err := l.Listener.Close()
	_ = os.Remove(l.path)
	return err
}
