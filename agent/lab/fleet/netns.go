package fleet

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"runtime"

	"golang.org/x/sys/unix"
)

// Namespaces places agent processes in network namespaces the caller
// built (Config.Namespaces). Its methods are called from any goroutine.
type Namespaces interface {
	// NS is the namespace agent i runs in (as `ip netns` names it).
	NS(i int) string
	// Addr is agent i's address there (an IPv4 address, no port).
	Addr(i int) string
}

// httpClient returns the client that reads agent i's /metrics: one that
// dials inside its namespace when it runs in one.
func (f *Fleet) httpClient(i int) *http.Client {
	if f.cfg.Namespaces == nil {
		return f.hc
	}
	ns := f.cfg.Namespaces.NS(i)
	if hc, ok := f.nsHTTP.Load(ns); ok {
		return hc.(*http.Client)
	}
	tr := &http.Transport{MaxIdleConnsPerHost: 2, DialContext: dialIn(ns)}
	hc, _ := f.nsHTTP.LoadOrStore(ns, &http.Client{Transport: tr, Timeout: ScrapeTimeout})
	return hc.(*http.Client)
}

// closeNSClients closes the idle connections of the namespaces' clients.
func (f *Fleet) closeNSClients() {
	f.nsHTTP.Range(func(_, hc any) bool {
		hc.(*http.Client).CloseIdleConnections()
		return true
	})
}

// dialIn returns a DialContext that opens its TCP connections inside
// network namespace ns: its goroutine, locked to its OS thread, enters ns
// (setns), creates the socket there (a socket stays in the namespace it
// was made in) and returns to this process's namespace before it unlocks
// the thread. A thread that could not return is never unlocked, and the
// runtime discards it with the goroutine: a thread must not simply end,
// as a child process started from it gets its parent-death signal.
func dialIn(ns string) func(ctx context.Context, network, addr string) (net.Conn, error) {
	return func(ctx context.Context, _, addr string) (net.Conn, error) {
		type result struct {
			c   net.Conn
			err error
		}
		ch := make(chan result, 1)
		go func() {
			c, err := inNetNS(ns, func() (net.Conn, error) {
				// tcp4 to an address literal: one socket, made on this
				// goroutine (no parallel dialing on other threads).
				var d net.Dialer
				return d.DialContext(ctx, "tcp4", addr)
			})
			ch <- result{c, err}
		}()
		r := <-ch
		return r.c, r.err
	}
}

// inNetNS runs dial on this goroutine's OS thread inside namespace ns.
func inNetNS(ns string, dial func() (net.Conn, error)) (net.Conn, error) {
	runtime.LockOSThread()
	home, err := os.Open(fmt.Sprintf("/proc/self/task/%d/ns/net", unix.Gettid()))
	if err != nil {
		runtime.UnlockOSThread()
		return nil, fmt.Errorf("fleet: this thread's namespace: %w", err)
	}
	defer home.Close()
	target, err := os.Open(filepath.Join("/var/run/netns", ns))
	if err != nil {
		runtime.UnlockOSThread()
		return nil, fmt.Errorf("fleet: namespace %s: %w", ns, err)
	}
	defer target.Close()
	if err := unix.Setns(int(target.Fd()), unix.CLONE_NEWNET); err != nil {
		runtime.UnlockOSThread()
		return nil, fmt.Errorf("fleet: enter namespace %s: %w", ns, err)
	}
	c, err := dial()
	if unix.Setns(int(home.Fd()), unix.CLONE_NEWNET) == nil {
		runtime.UnlockOSThread()
	} // else: the thread stays locked, and goes with the goroutine
	return c, err
}
