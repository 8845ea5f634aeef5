package idempotency

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"strconv"

	"github.com/fusebox-dev/fusebox/clientlib"
)

// retryAfterSeconds is the Retry-After of the Deduper's 409 and 503 answers.
const retryAfterSeconds = "1"

// Middleware deduplicates requests carrying an Idempotency-Key header
// (requests without one pass through untouched):
//
//   - the first request with a key (in its scope, see HTTPScope) runs; once
//     its handler has started, its answer, whatever the status (5xx
//     included), is stored for ResultTTL: status, selected headers
//     (StoredHeaders) and body (up to MaxResponseBytes);
//   - unless the handler calls NothingRan(r.Context()): then its key is
//     released when it returns, and a retry runs again;
//   - a handler that panics is stored as 500 with Fusebox-Idempotency:
//     panicked (what it did is unknown), and the panic goes on; after
//     NothingRan the key is released instead;
//   - a duplicate that arrives while the first runs waits for it, at most
//     MaxWait and its own context's deadline, then gets the stored answer or
//     409 Conflict with Retry-After and Fusebox-Idempotency: in-progress;
//   - a completed duplicate gets the stored answer with Idempotent-Replayed:
//     true;
//   - a key reused with another method, path and query, or body gets 422;
//   - a key that is not 1–1024 bytes of printable ASCII gets 400, a body
//     over MaxRequestBytes 413, and a failing store 503 with Retry-After
//     and Fusebox-Idempotency: store-unavailable (FailClosed; also when
//     the store's failure comes after the request's deadline) or an
//     unrecorded run (FailOpen, while the request's context is live). None
//     of these answers is stored: the handler did not start.
//
// Put it inside clientlib's Middleware so that the duplicate's wait ends at
// the caller's propagated deadline, and right around the handler whose
// effect it guards: a refusal made between it and that handler (a rate
// limit, an authorisation check) is stored like any answer unless it calls
// NothingRan.
func (d *Deduper) Middleware(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		k := r.Header.Get(clientlib.HeaderIdempotencyKey)
		if k == "" {
			next.ServeHTTP(w, r)
			return
		}
		if !validKey(k) {
			d.refuse(w, http.StatusBadRequest, "invalid_key", "invalid-key",
				fmt.Sprintf("idempotency: the Idempotency-Key header must be 1–%d bytes of printable ASCII", MaxKeyLength))
			return
		}
		var body []byte
		if r.Body != nil && r.Body != http.NoBody {
			var err error
			body, err = io.ReadAll(io.LimitReader(r.Body, d.cfg.maxRequest+1))
			r.Body.Close()
			if err != nil {
				http.Error(w, "idempotency: reading the request body: "+err.Error(), http.StatusBadRequest)
				return
			}
			if int64(len(body)) > d.cfg.maxRequest {
				d.refuse(w, http.StatusRequestEntityTooLarge, "too_large", "request-too-large",
					fmt.Sprintf("idempotency: a request with an Idempotency-Key may carry at most %d bytes of body", d.cfg.maxRequest))
				return
			}
			r.Body = io.NopCloser(bytes.NewReader(body))
		}
		scope := d.cfg.httpScope(r)
		if len(scope) > MaxScopeLength {
			d.refuse(w, http.StatusBadRequest, "invalid_key", "invalid-key",
				fmt.Sprintf("idempotency: the key's scope (Fusebox-Retry-Owner) may be at most %d bytes", MaxScopeLength))
			return
		}
		fp := fingerprint([]byte(r.Method), []byte(r.URL.RequestURI()), body)
		key := scopedKey(scope, k)
		v, token, rec, err := d.begin(r.Context(), key, fp)
		switch v {
		case replay:
			d.replayHTTP(w, rec)
		case mismatch:
			d.refuse(w, http.StatusUnprocessableEntity, "mismatch", "mismatch",
				"idempotency: this Idempotency-Key was used with a different request (method, path or body)")
		case inProgress:
			w.Header().Set("Retry-After", retryAfterSeconds)
			d.refuse(w, http.StatusConflict, "in_progress", "in-progress",
				"idempotency: a request with this Idempotency-Key is still running; retry later")
		case unavailable:
			w.Header().Set("Retry-After", retryAfterSeconds)
			d.refuse(w, http.StatusServiceUnavailable, "store_unavailable", "store-unavailable",
				"idempotency: the idempotency store is unavailable: "+err.Error())
		case runUnkeyed:
			d.m.requests.WithLabelValues("unkeyed").Inc()
			next.ServeHTTP(w, r)
		case run:
			d.runHTTP(w, r, next, key, token, fp)
		}
	})
}

func (d *Deduper) refuse(w http.ResponseWriter, code int, outcome, reason, msg string) {
	d.m.requests.WithLabelValues(outcome).Inc()
	w.Header().Set(HeaderStatus, reason)
	http.Error(w, msg, code)
}

func (d *Deduper) runHTTP(w http.ResponseWriter, r *http.Request, next http.Handler, key, token, fp string) {
	rw := &recorder{w: w, max: d.cfg.maxResponse, headers: d.cfg.headers}
	d.runReserved(r.Context(), key, token, fp, panicResponseHTTP, func(ctx context.Context) *Response {
		next.ServeHTTP(rw, r.WithContext(ctx))
		return rw.response()
	})
}

// panicResponseHTTP is the record of a handler that panicked: 500, and the
// reason in Fusebox-Idempotency and the body.
func panicResponseHTTP() *Response {
	body := []byte("idempotency: the handler of the request with this Idempotency-Key panicked after it started; " +
		"what it did is unknown, so it is not run again under this key\n")
	return &Response{Status: http.StatusInternalServerError, Body: body, Size: int64(len(body)),
		Header: http.Header{"Content-Type": {"text/plain; charset=utf-8"}, HeaderStatus: {"panicked"}}}
}

func (d *Deduper) replayHTTP(w http.ResponseWriter, rec *Record) {
	if rec.Response.Omitted {
		d.refuse(w, http.StatusConflict, "not_stored", "not-stored",
			fmt.Sprintf("idempotency: the request with this Idempotency-Key completed (status %d), but its %d-byte response was too large to keep for replay",
				rec.Response.Status, rec.Response.Size))
		return
	}
	d.m.requests.WithLabelValues("replayed").Inc()
	h := w.Header()
	for k, vs := range rec.Response.Header {
		h[k] = append([]string(nil), vs...)
	}
	h.Set(HeaderReplayed, "true")
	h.Set("Content-Length", strconv.Itoa(len(rec.Response.Body)))
	w.WriteHeader(rec.Response.Status)
	_, _ = w.Write(rec.Response.Body)
}

// recorder passes a response through to its writer and keeps a copy of
// its status, selected headers and body (up to max bytes).
type recorder struct {
	w       http.ResponseWriter
	max     int64
	headers []string

	status  int
	header  http.Header
	body    []byte
	size    int64
	omitted bool
}

func (rw *recorder) Header() http.Header { return rw.w.Header() }

func (rw *recorder) WriteHeader(code int) {
	if rw.status != 0 {
		return
	}
	if code >= 100 && code < 200 {
		rw.w.WriteHeader(code) // informational: not the answer
		return
	}
	rw.status = code
	rw.header = http.Header{}
	for _, n := range rw.headers {
		if vs, ok := rw.w.Header()[n]; ok {
			rw.header[n] = append([]string(nil), vs...)
		}
	}
	rw.w.WriteHeader(code)
}

func (rw *recorder) Write(p []byte) (int, error) {
	if rw.status == 0 {
		rw.WriteHeader(http.StatusOK)
	}
	n, err := rw.w.Write(p)
	rw.size += int64(n)
	if !rw.omitted {
		if int64(len(rw.body))+int64(n) > rw.max {
			rw.body, rw.omitted = nil, true
		} else {
			rw.body = append(rw.body, p[:n]...)
		}
	}
	return n, err
}

// Flush lets handlers that stream flush through the recorder.
func (rw *recorder) Flush() { _ = http.NewResponseController(rw.w).Flush() }

// Unwrap gives http.ResponseController the underlying writer.
func (rw *recorder) Unwrap() http.ResponseWriter { return rw.w }

func (rw *recorder) response() *Response {
	if rw.status == 0 {
		rw.WriteHeader(http.StatusOK)
	}
	return &Response{Status: rw.status, Header: rw.header, Body: rw.body, Omitted: rw.omitted, Size: rw.size}
}
