package proxy

import (
	"bytes"
	"io"
	"net/http"
)

// body is a request's body as the attempts send it.
type body struct {
	buf    []byte    // buffered: every attempt sends it
	stream io.Reader // not buffered: one attempt
	length int64     // ContentLength of the attempts (-1: unknown)
	over   bool      // retries were possible but the body was too large to keep
}

// readBody buffers r's body when the request may be retried, up to
// MaxBodyBuffer; beyond that (or without retries) the body is streamed to
// a single attempt.
func (p *Proxy) readBody(r *http.Request, retry bool) (body, error) {
	if r.Body == nil || r.Body == http.NoBody || r.ContentLength == 0 {
		return body{}, nil
	}
	limit := p.cfg.MaxBodyBuffer
	switch {
	case !retry:
		return body{stream: r.Body, length: r.ContentLength}, nil
	case r.ContentLength > limit:
		return body{stream: r.Body, length: r.ContentLength, over: true}, nil
	case r.ContentLength > 0:
		buf := make([]byte, r.ContentLength)
		if _, err := io.ReadFull(r.Body, buf); err != nil {
			return body{}, err
		}
		return body{buf: buf, length: r.ContentLength}, nil
	}
	var b bytes.Buffer
	if _, err := b.ReadFrom(io.LimitReader(r.Body, limit+1)); err != nil {
		return body{}, err
	}
	if int64(b.Len()) > limit {
		return body{stream: io.MultiReader(bytes.NewReader(b.Bytes()), r.Body), length: -1, over: true}, nil
	}
	return body{buf: b.Bytes(), length: int64(b.Len())}, nil
}
