package cliflag

import (
	"errors"
	"net"
	"net/url"
	"os"
)

// ListenError is a listener that could not bind the address a flag gave:
// its message names the flag and the address first, then the system's
// reason, "--gossip-addr 127.0.0.1:7946: address already in use".
type ListenError struct {
	Flag string // the flag's name, without dashes
	Addr string // the flag's value
	Err  error  // what the bind returned
}

func (e *ListenError) Error() string {
	reason := e.Err.Error()
	var se *os.SyscallError
	var op *net.OpError
	switch {
	case errors.As(e.Err, &se):
		reason = se.Err.Error() // "address already in use", "permission denied"
	case errors.As(e.Err, &op) && op.Err != nil:
		reason = op.Err.Error()
	}
	return "--" + e.Flag + " " + e.Addr + ": " + reason
}

func (e *ListenError) Unwrap() error { return e.Err }

// Listen listens on the TCP address a flag gave; a failure is a
// *ListenError naming the flag.
func Listen(flagName, addr string) (net.Listener, error) {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, &ListenError{Flag: flagName, Addr: addr, Err: err}
	}
	return ln, nil
}

// AsListenError returns err as a *ListenError for the flag when it is, or
// wraps, a failed bind (a "listen" *net.OpError) of the flag's address
// (host:port or a URL; a bind of another port is not the flag's); any
// other error is returned as is.
func AsListenError(flagName, addr string, err error) error {
	var op *net.OpError
	var le *ListenError
	if err == nil || errors.As(err, &le) || !errors.As(err, &op) || op.Op != "listen" {
		return err
	}
	if op.Addr != nil && !samePort(op.Addr.String(), addr) {
		return err
	}
	return &ListenError{Flag: flagName, Addr: addr, Err: err}
}

// samePort reports whether a bound address has the port of addr
// (host:port or a URL); any port matches port 0 or an addr without one.
func samePort(bound, addr string) bool {
	if u, err := url.Parse(addr); err == nil && u.Host != "" {
		addr = u.Host
	}
	_, want, err := net.SplitHostPort(addr)
	if err != nil || want == "0" {
		return true
	}
	_, got, err := net.SplitHostPort(bound)
	return err != nil || got == want
}
