package agent

import (
	"errors"
	"fmt"
	"net"
	"os"
	"strconv"
	"strings"
)

// ProxySocketName is the name (systemd's FileDescriptorName=) of the
// listening socket a process manager hands the agent for its egress proxy.
const ProxySocketName = "proxy"

// inheritedSocket is a listening socket the process was handed.
type inheritedSocket struct {
	name string
	ln   net.Listener
}

// firstListenFD is the first descriptor of the socket-activation
// protocol.
const firstListenFD = 3

// inheritedSockets takes the listening sockets handed to this process by
// systemd's socket-activation protocol (sd_listen_fds(3)): LISTEN_PID
// names this process, LISTEN_FDS counts the descriptors from 3 on,
// LISTEN_FDNAMES names them, colon-separated. Anything that starts the
// agent may hand sockets so: a .socket unit, a supervisor, a test. The
// variables are unset, so nothing the process starts takes them again.
// Without them (or for another process) it returns nothing.
func inheritedSockets(getenv func(string) string) ([]inheritedSocket, error) {
	pid, err := strconv.Atoi(getenv("LISTEN_PID"))
	if err != nil || pid != os.Getpid() {
		return nil, nil
	}
	n, err := strconv.Atoi(getenv("LISTEN_FDS"))
	if err != nil || n <= 0 {
		return nil, nil
	}
	names := strings.Split(getenv("LISTEN_FDNAMES"), ":")
	for _, v := range []string{"LISTEN_PID", "LISTEN_FDS", "LISTEN_FDNAMES"} {
		os.Unsetenv(v)
	}
	var out []inheritedSocket
	var errs []error
	for i := range n {
		fd := firstListenFD + i
		name := ""
		if i < len(names) {
			name = names[i]
		}
		f := os.NewFile(uintptr(fd), name)
		ln, err := net.FileListener(f) // a duplicate, close-on-exec
		f.Close()
		if err != nil {
			errs = append(errs, fmt.Errorf("agent: socket %d (%q) handed to the process: %w", fd, name, err))
			continue
		}
		out = append(out, inheritedSocket{name: name, ln: ln})
	}
	if len(errs) > 0 {
		closeSockets(out)
		return nil, errors.Join(errs...)
	}
	return out, nil
}

func closeSockets(ss []inheritedSocket) {
	for _, s := range ss {
		s.ln.Close()
	}
}

// proxySocket picks, among sockets handed to the process, the proxy's: the
// one named ProxySocketName, else the one bound to addr (--proxy-addr).
// Its address must be addr's: the proxy's loopback rule reads addr. The
// others are closed.
func proxySocket(ss []inheritedSocket, addr string) (net.Listener, error) {
	var pick net.Listener
	for _, s := range ss {
		if pick == nil && (s.name == ProxySocketName || sameAddr(s.ln.Addr().String(), addr)) {
			pick = s.ln
			continue
		}
		s.ln.Close()
	}
	switch {
	case pick == nil:
		return nil, nil
	case addr == "":
		pick.Close()
		return nil, fmt.Errorf("agent: proxy-addr: a socket named %q (%s) was handed to the agent, but --proxy-addr is not set", ProxySocketName, pick.Addr())
	case !sameAddr(pick.Addr().String(), addr):
		pick.Close()
		return nil, fmt.Errorf("agent: proxy-addr: the socket handed to the agent for the proxy is bound to %s, not --proxy-addr %s: make them one (the .socket unit's ListenStream=)", pick.Addr(), addr)
	}
	return pick, nil
}

// sameAddr reports whether host:port a and b name one TCP address.
func sameAddr(a, b string) bool {
	ta, err1 := net.ResolveTCPAddr("tcp", a)
	tb, err2 := net.ResolveTCPAddr("tcp", b)
	return err1 == nil && err2 == nil && ta.Port == tb.Port && ta.IP.Equal(tb.IP)
}
