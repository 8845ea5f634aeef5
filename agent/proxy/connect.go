package proxy

import (
	"bufio"
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"time"

	"github.com/fusebox-dev/fusebox/sharedstate"
)

// defaultDialTimeout bounds a CONNECT's dial when the policy sets no
// per-attempt timeout and the caller no deadline.
const defaultDialTimeout = 10 * time.Second

// established is the answer to a CONNECT whose dial succeeded.
const established = "HTTP/1.1 200 Connection Established\r\n" + HeaderAttempts + ": 1\r\n\r\n"

// serveConnect opens a tunnel. Fusebox sees a tunnel at the connection
// level only: the breaker, throttling and the concurrency limit decide
// the dial (one attempt: a CONNECT is never retried), whose outcome is
// counted (a refused or reset dial is a failure, one past the policy's
// per-attempt timeout a slow failure, one slower than slowCallDuration a
// slow success); what then travels through the tunnel is not seen.
func (p *Proxy) serveConnect(w http.ResponseWriter, r *http.Request, t *target) {
	f := formConnect
	hj, ok := w.(http.Hijacker)
	if !ok {
		p.answerInvalid(w, f, &requestError{status: http.StatusHTTPVersionNotSupported, reason: "malformed-uri",
			msg: "fusebox proxy: CONNECT is served over HTTP/1.1 only"})
		return
	}
	ctx, cancel, e, snap, ok := p.begin(w, r, t)
	if !ok {
		return
	}
	defer cancel()
	up, ok := p.dialTunnel(ctx, w, r, t, e, snap)
	e.leave() // an open tunnel holds no concurrency slot
	if !ok {
		return
	}
	conn, brw, err := hj.Hijack()
	if err != nil {
		up.Close()
		p.m.requests[f][resultCanceled].Inc()
		return
	}
	p.m.requests[f][resultUpstream].Inc()
	_ = conn.SetDeadline(time.Time{}) // the server's read deadlines end with the request
	if _, err := io.WriteString(conn, established); err != nil {
		conn.Close()
		up.Close()
		return
	}
	p.tunnel(conn, brw.Reader, up)
}

// dialTunnel decides and makes the tunnel's one attempt, answering the
// client itself when it fails.
func (p *Proxy) dialTunnel(ctx context.Context, w http.ResponseWriter, r *http.Request, t *target, e *depEntry,
	snap *sharedstate.Snapshot) (net.Conn, bool) {
	f := formConnect
	set := settingsOf(snap)
	adm := p.admitFirst(t.dep, snap, e)
	if adm.reason != "" {
		p.answerRejected(w, f, t, adm.reason, adm.why, 0, nil)
		return nil, false
	}
	timeout := set.perAttempt
	if timeout <= 0 {
		timeout = defaultDialTimeout
	}
	dctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	p.m.attempts[adm.kind].Inc()
	start := time.Now()
	up, err := p.dialer.DialContext(dctx, "tcp", t.dialAddr())
	elapsed := time.Since(start)
	probe := adm.probe
	if err != nil {
		switch {
		case errors.Is(err, errOwnListener):
			p.answerInvalid(w, f, &requestError{status: http.StatusForbidden, reason: "own-listener",
				msg: "fusebox proxy: " + t.authority + " resolves to one of the agent's own listeners"})
		case r.Context().Err() != nil:
			p.m.requests[f][resultCanceled].Inc()
		default:
			timedOut := dctx.Err() == context.DeadlineExceeded
			p.record(t.dep, adm.kind, &probe, verdict{failure: true, slow: timedOut || (set.slow > 0 && elapsed >= set.slow)})
			p.answerError(w, f, t, 1, timedOut, err)
		}
		return nil, false
	}
	p.record(t.dep, adm.kind, &probe, verdict{slow: set.slow > 0 && elapsed >= set.slow})
	return up, true
}

// tunnel copies both ways until both sides are done (each half-closes the
// other's write side) or the proxy closes.
func (p *Proxy) tunnel(client net.Conn, buffered *bufio.Reader, up net.Conn) {
	p.tunnelMu.Lock()
	if p.closing.Load() {
		p.tunnelMu.Unlock()
		client.Close()
		up.Close()
		return
	}
	p.tunnels[client] = struct{}{}
	p.tunnels[up] = struct{}{}
	p.tunnelCount.Add(1)
	p.wg.Add(2)
	p.tunnelMu.Unlock()

	var fromClient io.Reader = client
	if buffered != nil && buffered.Buffered() > 0 {
		fromClient = io.MultiReader(io.LimitReader(buffered, int64(buffered.Buffered())), client)
	}
	done := make(chan struct{}, 1)
	go func() {
		defer p.wg.Done()
		pipe(up, fromClient)
		done <- struct{}{}
	}()
	go func() {
		defer p.wg.Done()
		pipe(client, up)
		<-done
		client.Close()
		up.Close()
		p.tunnelMu.Lock()
		delete(p.tunnels, client)
		delete(p.tunnels, up)
		p.tunnelMu.Unlock()
		p.tunnelCount.Add(-1)
	}()
}

// pipe copies src to dst, then half-closes dst.
func pipe(dst net.Conn, src io.Reader) {
	bp := copyBuffers.Get().(*[]byte)
	_, _ = io.CopyBuffer(dst, src, *bp)
	copyBuffers.Put(bp)
	closeWrite(dst)
}

// closeWrite half-closes c's write side when it can (TCP), else closes it.
func closeWrite(c net.Conn) {
	if lc, ok := c.(*limitConn); ok {
		c = lc.Conn
	}
	if cw, ok := c.(interface{ CloseWrite() error }); ok {
		_ = cw.CloseWrite()
		return
	}
	c.Close()
}
