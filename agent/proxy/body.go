package proxy

import (
	"bytes"
	"errors"
	"io"
	"net/http"
	"os"
)

// Why a request that may be retried gets a single attempt
// (Fusebox-Not-Retried).
const (
	notRetriedTooLarge    = "body-too-large" // over MaxBodyBuffer
	notRetriedBuffersFull = "buffers-full"   // the buffered bodies hold BodyBufferBudget
)

// body is a request's body as the attempts send it.
type body struct {
	buf        []byte    // buffered: every attempt sends it
	stream     io.Reader // not buffered: one attempt
	length     int64     // ContentLength of the attempts (-1: unknown)
	notRetried string    // set when retries were possible but the body was not kept: why
}

// firstBodyBuffer is the first buffer of a body; it doubles as the
// body's bytes arrive, up to its length or one byte past MaxBodyBuffer.
const firstBodyBuffer = 4 << 10

// readBody buffers r's body when the request may be retried, up to
// MaxBodyBuffer; beyond that (or without retries) the body is streamed to
// a single attempt. The buffer grows with the bytes that arrive, never
// with the length the request announces, and each growth is taken from
// BodyBufferBudget first: a body that finds the budget spent is streamed
// to a single attempt from what arrived so far on (it is not refused).
// The budget is given back when the request ends (exchange.release).
func (p *Proxy) readBody(r *http.Request, retry bool) (body, error) {
	if r.Body == nil || r.Body == http.NoBody || r.ContentLength == 0 {
		return body{}, nil
	}
	limit := p.cfg.MaxBodyBuffer
	switch {
	case !retry:
		return body{stream: r.Body, length: r.ContentLength}, nil
	case r.ContentLength > limit:
		return body{stream: r.Body, length: r.ContentLength, notRetried: notRetriedTooLarge}, nil
	}
	x := exchangeOf(r.Context())
	want := r.ContentLength // a known length is read whole, no further
	if want < 0 {
		want = limit + 1 // one byte past the limit tells a body over it
	}
	var buf []byte
	for int64(len(buf)) < want {
		if len(buf) == cap(buf) {
			size := min(max(2*int64(cap(buf)), firstBodyBuffer), want)
			if !x.reserve(size - int64(cap(buf))) {
				if p.m != nil {
					p.m.buffersFull.Inc()
				}
				return body{stream: io.MultiReader(bytes.NewReader(buf), r.Body), length: r.ContentLength,
					notRetried: notRetriedBuffersFull}, nil
			}
			grown := make([]byte, len(buf), size)
			copy(grown, buf)
			buf = grown
		}
		n, err := r.Body.Read(buf[len(buf):cap(buf)])
		buf = buf[:len(buf)+n]
		if err == io.EOF {
			break
		}
		if err != nil {
			return body{}, err
		}
	}
	switch {
	case r.ContentLength > 0 && int64(len(buf)) < r.ContentLength:
		return body{}, io.ErrUnexpectedEOF
	case r.ContentLength < 0 && int64(len(buf)) > limit:
		return body{stream: io.MultiReader(bytes.NewReader(buf), r.Body), length: -1, notRetried: notRetriedTooLarge}, nil
	case len(buf) == 0:
		return body{}, nil
	}
	return body{buf: buf, length: int64(len(buf))}, nil
}

// reserve takes n bytes from the budget of buffered bodies for x's
// request; false when they are not there. Called from the request's
// handler only.
func (x *exchange) reserve(n int64) bool {
	if x == nil { // not a request ServeHTTP serves (tests): nothing to give back
		return true
	}
	b := &x.p.bodyBytes
	for {
		cur := b.Load()
		if cur+n > x.p.cfg.BodyBufferBudget {
			return false
		}
		if b.CompareAndSwap(cur, cur+n) {
			x.reserved += n
			return true
		}
	}
}

// release gives back what the request's body took from the budget.
func (x *exchange) release() {
	if x.reserved != 0 {
		x.p.bodyBytes.Add(-x.reserved)
		x.reserved = 0
	}
}

// bodyReader is a request's body as the proxy reads it: a read that fails
// because the body's deadline (BodyTimeout) passed marks the request
// stalled, and ServeHTTP closes its connection.
type bodyReader struct {
	io.ReadCloser
	x *exchange
}

func (b *bodyReader) Read(p []byte) (int, error) {
	n, err := b.ReadCloser.Read(p)
	if err != nil && errors.Is(err, os.ErrDeadlineExceeded) {
		b.x.stalled.Store(true)
	}
	return n, err
}
