package idempotency

import (
	"context"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/fusebox-dev/fusebox/clientlib"
	"github.com/fusebox-dev/fusebox/sharedstate/backoff"
)

// Defaults of the Deduper's options.
const (
	DefaultResultTTL        = 24 * time.Hour
	DefaultReservationTTL   = time.Minute
	DefaultMaxWait          = 10 * time.Second
	DefaultMaxResponseBytes = 1 << 20
	DefaultMaxRequestBytes  = 1 << 20
	// MaxKeyLength is the longest idempotency key accepted, in bytes.
	MaxKeyLength = 1024
	// MaxScopeLength is the longest scope accepted, in bytes (longer
	// ones are refused like invalid keys).
	MaxScopeLength = 256
)

// Headers the Deduper writes.
const (
	// HeaderReplayed is set to "true" on a response replayed from the
	// store (gRPC: header metadata "idempotent-replayed"); clientlib's
	// RoundTripper does not retry such an answer.
	HeaderReplayed = clientlib.HeaderReplayed
	// HeaderStatus says why the Deduper answered itself: "in-progress",
	// "mismatch", "invalid-key", "not-stored", "store-unavailable",
	// "request-too-large", or "panicked" (the stored answer of a handler
	// that panicked).
	HeaderStatus = "Fusebox-Idempotency"

	metadataReplayed = "idempotent-replayed"
)

// StoreErrorPolicy says what a request with a key gets when the store
// cannot be reached (any store error other than ErrReservationLost).
type StoreErrorPolicy uint8

const (
	// FailClosed answers 503 with Retry-After (gRPC Unavailable) without
	// running the handler: a keyed request is never run without its
	// record. The default: the caller asked for at-most-once.
	FailClosed StoreErrorPolicy = iota
	// FailOpen runs the handler without deduplication (at-least-once while
	// the store is away). A full MemoryStore (ErrStoreFull) is refused
	// even then: it is a bound, not an outage.
	FailOpen
)

func (p StoreErrorPolicy) String() string {
	switch p {
	case FailClosed:
		return "fail-closed"
	case FailOpen:
		return "fail-open"
	}
	return "policy(" + strconv.Itoa(int(p)) + ")"
}

// Option configures New.
type Option func(*config)

type config struct {
	resultTTL, reservationTTL, maxWait time.Duration
	maxResponse, maxRequest            int64
	headers                            []string
	httpScope                          func(*http.Request) string
	grpcScope                          func(context.Context) string
	storeErrors                        StoreErrorPolicy
	registerer                         prometheus.Registerer
	errs                               []string
}

// ResultTTL is how long a completed response is kept and replayed
// (optional, default DefaultResultTTL, 24h).
func ResultTTL(d time.Duration) Option {
	return func(c *config) { c.resultTTL = positive(c, "ResultTTL", d) }
}

// ReservationTTL bounds how long a running request holds its key. It must
// exceed the slowest handler: when the instance dies between reserve and
// complete, the key is free again after this long; a handler still running
// then loses its reservation and its response is not stored (optional,
// default DefaultReservationTTL, 1m).
func ReservationTTL(d time.Duration) Option {
	return func(c *config) { c.reservationTTL = positive(c, "ReservationTTL", d) }
}

// MaxWait bounds how long a duplicate waits for the first request with its
// key to finish (it also stops at its own deadline); it then gets 409
// Conflict with Retry-After (gRPC Aborted). 0 answers at once (optional,
// default DefaultMaxWait, 10s).
func MaxWait(d time.Duration) Option {
	return func(c *config) {
		if d < 0 {
			c.errs = append(c.errs, fmt.Sprintf("MaxWait: must not be negative, got %v", d))
		}
		c.maxWait = d
	}
}

// MaxResponseBytes bounds the body stored for replay. A larger response
// reaches its caller, the key is completed without the body, and a
// duplicate gets 409 Conflict with Fusebox-Idempotency: not-stored (gRPC
// FailedPrecondition) instead of a replay (optional, default 1 MiB).
func MaxResponseBytes(n int64) Option {
	return func(c *config) { c.maxResponse = positive(c, "MaxResponseBytes", n) }
}

// MaxRequestBytes bounds the body of a keyed HTTP request, which the
// Deduper reads to fingerprint it; a larger one gets 413 (optional,
// default 1 MiB).
func MaxRequestBytes(n int64) Option {
	return func(c *config) { c.maxRequest = positive(c, "MaxRequestBytes", n) }
}

// StoredHeaders names the response headers stored and replayed (optional,
// default Content-Type, Content-Encoding, Content-Language, Location, ETag,
// Last-Modified).
func StoredHeaders(names ...string) Option {
	return func(c *config) {
		c.headers = c.headers[:0]
		for _, n := range names {
			c.headers = append(c.headers, http.CanonicalHeaderKey(n))
		}
	}
}

// HTTPScope returns the scope of an HTTP request's key: keys are unique
// per scope, so two callers cannot collide (optional, default the
// Fusebox-Retry-Owner header clientlib sends, "" without one).
func HTTPScope(f func(*http.Request) string) Option {
	return func(c *config) {
		if f == nil {
			c.errs = append(c.errs, "HTTPScope: must not be nil")
		}
		c.httpScope = f
	}
}

// GRPCScope is HTTPScope for gRPC (optional, default the
// fusebox-retry-owner metadata).
func GRPCScope(f func(context.Context) string) Option {
	return func(c *config) {
		if f == nil {
			c.errs = append(c.errs, "GRPCScope: must not be nil")
		}
		c.grpcScope = f
	}
}

// OnStoreError chooses what happens when the store fails (optional,
// default FailClosed).
func OnStoreError(p StoreErrorPolicy) Option {
	return func(c *config) {
		if p != FailClosed && p != FailOpen {
			c.errs = append(c.errs, fmt.Sprintf("OnStoreError: unknown policy %d", p))
		}
		c.storeErrors = p
	}
}

// WithRegisterer registers the Deduper's metrics (optional, default none).
func WithRegisterer(r prometheus.Registerer) Option {
	return func(c *config) { c.registerer = r }
}

// positive returns v, noting in c an error when it is not positive.
func positive[T time.Duration | int64](c *config, name string, v T) T {
	if v <= 0 {
		c.errs = append(c.errs, fmt.Sprintf("%s: must be positive, got %v", name, v))
	}
	return v
}

// Deduper runs each keyed request once per key and scope, and replays its
// stored response to duplicates. It is safe for concurrent use.
type Deduper struct {
	store Store
	cfg   config
	m     *metrics
}

// New returns a Deduper over store. Every invalid option is named in the
// error.
func New(store Store, opts ...Option) (*Deduper, error) {
	cfg := config{resultTTL: DefaultResultTTL, reservationTTL: DefaultReservationTTL,
		maxWait: DefaultMaxWait, maxResponse: DefaultMaxResponseBytes, maxRequest: DefaultMaxRequestBytes,
		headers:     []string{"Content-Type", "Content-Encoding", "Content-Language", "Location", "Etag", "Last-Modified"},
		httpScope:   func(r *http.Request) string { return r.Header.Get(clientlib.HeaderRetryOwner) },
		grpcScope:   grpcOwner,
		storeErrors: FailClosed}
	for _, o := range opts {
		o(&cfg)
	}
	if store == nil {
		cfg.errs = append([]string{"store: must not be nil"}, cfg.errs...)
	}
	if len(cfg.errs) > 0 {
		return nil, fmt.Errorf("%w: %s", ErrInvalidOption, strings.Join(cfg.errs, "; "))
	}
	m, err := newMetrics(cfg.registerer)
	if err != nil {
		return nil, err
	}
	return &Deduper{store: store, cfg: cfg, m: m}, nil
}

// validKey reports whether k is 1–MaxKeyLength bytes of printable ASCII.
func validKey(k string) bool {
	if k == "" || len(k) > MaxKeyLength {
		return false
	}
	for i := 0; i < len(k); i++ {
		if k[i] < 0x20 || k[i] > 0x7e {
			return false
		}
	}
	return true
}

// scopedKey makes the store key of key in scope; the length prefix keeps
// ("a:b", "c") and ("a", "b:c") apart.
func scopedKey(scope, key string) string {
	return strconv.Itoa(len(scope)) + ":" + scope + ":" + key
}

// fingerprint hashes the parts that identify a request.
func fingerprint(parts ...[]byte) string {
	h := sha256.New()
	var n [8]byte
	for _, p := range parts {
		binary.LittleEndian.PutUint64(n[:], uint64(len(p)))
		h.Write(n[:])
		h.Write(p)
	}
	var sum [sha256.Size]byte
	return hex.EncodeToString(h.Sum(sum[:0]))
}

// verdict is what begin decided for a keyed request.
type verdict uint8

const (
	run         verdict = iota // reserved: run the handler, then finish
	runUnkeyed                 // the store failed, FailOpen: run without a record
	replay                     // rec holds the stored response
	mismatch                   // the key was used by another request
	inProgress                 // still running after the wait
	unavailable                // the store failed, FailClosed
)

// begin reserves key, or waits for the request holding it.
func (d *Deduper) begin(ctx context.Context, key, fp string) (verdict, string, *Record, error) {
	var (
		giveUp  *time.Timer // MaxWait, started at the first wait
		wait    = backoff.New(backoff.Policy{Base: 5 * time.Millisecond, Max: 100 * time.Millisecond, Jitter: backoff.None}, nil)
		expired bool
	)
	defer func() {
		if giveUp != nil {
			giveUp.Stop()
			d.m.waiting.Dec()
		}
	}()
	for {
		token, rec, err := d.store.Reserve(ctx, key, fp, d.cfg.reservationTTL)
		if err != nil {
			return d.storeFailed(ctx, err)
		}
		for rec != nil {
			if rec.Fingerprint != fp {
				return mismatch, "", rec, nil
			}
			if rec.Completed {
				return replay, "", rec, nil
			}
			if expired || d.cfg.maxWait == 0 {
				return inProgress, "", rec, nil
			}
			if giveUp == nil {
				d.m.waiting.Inc()
				giveUp = time.NewTimer(d.cfg.maxWait)
			}
			timer := time.NewTimer(wait.Next())
			select {
			case <-timer.C:
			case <-giveUp.C:
				expired = true
			case <-ctx.Done():
				expired = true
			}
			timer.Stop()
			if ctx.Err() != nil {
				// The caller's deadline passed while the first request
				// still held the key: nothing more to learn in time.
				return inProgress, "", rec, ctx.Err()
			}
			if rec, err = d.store.Get(ctx, key); err != nil {
				return d.storeFailed(ctx, err)
			}
		}
		if token != "" {
			return run, token, nil, nil
		}
		// The holder released the key (or its reservation expired): try again.
	}
}

// storeFailed answers a store failure: unavailable (503), or with FailOpen
// an unrecorded run. A store error is never read as "in progress", even
// when it comes after the caller's deadline (a store that did not answer
// in time failed); a caller whose context is done is not run unrecorded.
func (d *Deduper) storeFailed(ctx context.Context, err error) (verdict, string, *Record, error) {
	d.m.storeErrors.Inc()
	if d.cfg.storeErrors == FailOpen && !errors.Is(err, ErrStoreFull) && ctx.Err() == nil {
		return runUnkeyed, "", nil, err
	}
	return unavailable, "", nil, err
}

// runReserved runs a handler under the key it reserved, then settles the
// key: run hands the handler ctx (which NothingRan reads) and returns the
// record of its answer; onPanic gives the record of a handler that
// panicked, and the panic goes on.
func (d *Deduper) runReserved(ctx context.Context, key, token, fp string, onPanic func() *Response, run func(context.Context) *Response) {
	r := &handlerRun{}
	panicked := true
	defer func() {
		if panicked { // store what a retry must see, and let the panic go on
			d.settle(key, token, fp, r, onPanic(), "panicked")
		}
	}()
	resp := run(withRun(ctx, r))
	panicked = false
	d.settle(key, token, fp, r, resp, "executed")
}

// settle ends a run of the handler: it releases the key when the handler
// called NothingRan, and otherwise stores resp, whatever its status, as
// the key's outcome (counted as outcome).
func (d *Deduper) settle(key, token, fp string, r *handlerRun, resp *Response, outcome string) {
	// The request's context may be done (the caller went away); the record
	// must still be written.
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	var err error
	if r.nothingRan.Load() {
		d.m.requests.WithLabelValues("released").Inc()
		err = d.store.Release(ctx, key, token)
	} else {
		d.m.requests.WithLabelValues(outcome).Inc()
		err = d.store.Complete(ctx, key, token, &Record{Fingerprint: fp, Completed: true, Response: *resp}, d.cfg.resultTTL)
	}
	switch {
	case errors.Is(err, ErrReservationLost):
		d.m.lost.Inc()
	case err != nil:
		d.m.storeErrors.Inc()
	}
}
