package proxy

import (
	"bufio"
	"context"
	"io"
	"net"
	"net/http"
	"time"

	"github.com/fusebox-dev/fusebox/clientlib"
)

// defaultDialTimeout bounds a CONNECT's dial when the policy sets no
// per-attempt timeout and the caller no deadline.
const defaultDialTimeout = 10 * time.Second

// established is the answer to a CONNECT whose dial succeeded;
// establishedUntracked, to one the proxy's full table left untracked.
const (
	established          = "HTTP/1.1 200 Connection Established\r\n" + HeaderAttempts + ": 1\r\n\r\n"
	establishedUntracked = "HTTP/1.1 200 Connection Established\r\n" + HeaderAttempts + ": 1\r\n" +
		HeaderUntracked + ": too-many-dependencies\r\n\r\n"
)

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
	ctx, cancel, ok := p.callerDeadline(w, r, t)
	if !ok {
		return
	}
	defer cancel()
	e, ok := p.dependency(w, t)
	if !ok {
		return
	}
	up, ok := p.dialTunnel(ctx, w, r, t, e.dep)
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
	answer := established
	if e.untracked {
		answer = establishedUntracked
	}
	if _, err := io.WriteString(conn, answer); err != nil {
		conn.Close()
		up.Close()
		return
	}
	p.tunnel(conn, brw.Reader, up)
}

// dialTunnel makes the tunnel's one attempt, a NonRetryable call of d
// (which decides and counts it), answering the client itself when it
// fails.
func (p *Proxy) dialTunnel(ctx context.Context, w http.ResponseWriter, r *http.Request, t *target, d *clientlib.Dependency) (net.Conn, bool) {
	var (
		up   net.Conn
		info clientlib.CallInfo
	)
	err := d.Do(ctx, clientlib.NonRetryable, func(ctx context.Context, a clientlib.Attempt) error {
		if a.Deadline.IsZero() {
			var cancel context.CancelFunc
			ctx, cancel = context.WithTimeout(ctx, defaultDialTimeout)
			defer cancel()
		}
		c, err := p.dialer.DialContext(ctx, "tcp", t.dialAddr())
		up = c
		return err
	}, clientlib.WithCallInfo(&info))
	p.counted(&info)
	if err == nil {
		return up, true
	}
	p.answerFailed(w, r, t, &info, err)
	if up != nil { // the call failed although the dial did (the caller gave up)
		up.Close()
	}
	return nil, false
}

// tunnel copies both ways until both sides are done (each half-closes the
// other's write side) or the proxy closes.
func (p *Proxy) tunnel(client net.Conn, buffered *bufio.Reader, up net.Conn) {
	var fromClient io.Reader = client
	if buffered != nil && buffered.Buffered() > 0 {
		fromClient = io.MultiReader(io.LimitReader(buffered, int64(buffered.Buffered())), client)
	}
	p.tunnelMu.Lock()
	defer p.tunnelMu.Unlock()
	if p.closing.Load() {
		client.Close()
		up.Close()
		return
	}
	p.tunnels[client] = struct{}{}
	p.tunnels[up] = struct{}{}
	p.tunnelCount.Add(1)
	done := make(chan struct{}, 1)
	p.wg.Go(func() {
		pipe(up, fromClient)
		done <- struct{}{}
	})
	p.wg.Go(func() {
		pipe(client, up)
		<-done
		client.Close()
		up.Close()
		p.tunnelMu.Lock()
		delete(p.tunnels, client)
		delete(p.tunnels, up)
		p.tunnelMu.Unlock()
		p.tunnelCount.Add(-1)
	})
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
