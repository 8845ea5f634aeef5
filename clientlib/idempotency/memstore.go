package idempotency

import (
	"cmp"
	"container/list"
	"context"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// Defaults of MemoryConfig.
const (
	DefaultMaxEntries = 100_000
	DefaultMaxBytes   = 64 << 20
)

// entryOverhead is what one entry costs beyond its key and record, roughly:
// the map slot, the list element, the entry and the record headers.
const entryOverhead = 256

// MemoryConfig configures NewMemoryStore. The zero value is usable.
type MemoryConfig struct {
	// MaxEntries bounds the number of keys held (optional, default
	// DefaultMaxEntries).
	MaxEntries int
	// MaxBytes bounds the bytes held: keys, fingerprints, stored headers
	// and bodies, plus a fixed overhead per entry (optional, default
	// DefaultMaxBytes, 64 MiB).
	MaxBytes int64
	// Registerer receives the store's metrics (optional, default none).
	Registerer prometheus.Registerer
}

// Validate names every invalid field.
func (c MemoryConfig) Validate() error {
	var errs []string
	if c.MaxEntries < 0 {
		errs = append(errs, fmt.Sprintf("MaxEntries: must not be negative, got %d", c.MaxEntries))
	}
	if c.MaxBytes < 0 {
		errs = append(errs, fmt.Sprintf("MaxBytes: must not be negative, got %d", c.MaxBytes))
	}
	if len(errs) > 0 {
		return fmt.Errorf("%w: MemoryConfig: %s", ErrInvalidOption, strings.Join(errs, "; "))
	}
	return nil
}

// MemoryStore is a Store in process memory, for a single instance: bounded
// in keys and bytes, with TTLs. When it is full it first drops expired
// records, then evicts the oldest completed ones
// (fusebox_idempotency_memory_evicted_total); when only reservations are
// left it refuses new keys with ErrStoreFull
// (fusebox_idempotency_memory_refused_total). It is safe for concurrent use.
type MemoryStore struct {
	maxEntries int
	maxBytes   int64

	mu      sync.Mutex
	entries map[string]*list.Element // of *memEntry
	order   list.List                // oldest write first
	bytes   int64
	seq     uint64

	evicted prometheus.Counter
	refused prometheus.Counter
}

type memEntry struct {
	key     string
	token   string
	rec     Record
	expires time.Time
	size    int64
}

// NewMemoryStore returns an empty MemoryStore.
func NewMemoryStore(cfg MemoryConfig) (*MemoryStore, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	s := &MemoryStore{maxEntries: cmp.Or(cfg.MaxEntries, DefaultMaxEntries), maxBytes: cmp.Or(cfg.MaxBytes, DefaultMaxBytes),
		entries: map[string]*list.Element{}}
	s.evicted = prometheus.NewCounter(prometheus.CounterOpts{Name: "fusebox_idempotency_memory_evicted_total",
		Help: "Completed records the in-memory idempotency store evicted before their TTL to make room."})
	s.refused = prometheus.NewCounter(prometheus.CounterOpts{Name: "fusebox_idempotency_memory_refused_total",
		Help: "New keys the in-memory idempotency store refused because it was full of reservations (ErrStoreFull)."})
	if cfg.Registerer != nil {
		for _, c := range []prometheus.Collector{s.evicted, s.refused,
			prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "fusebox_idempotency_memory_entries",
				Help: "Keys the in-memory idempotency store holds."}, func() float64 { n, _ := s.Usage(); return float64(n) }),
			prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "fusebox_idempotency_memory_bytes",
				Help: "Bytes the in-memory idempotency store accounts for."}, func() float64 { _, b := s.Usage(); return float64(b) }),
		} {
			if err := cfg.Registerer.Register(c); err != nil {
				return nil, fmt.Errorf("idempotency: registering the memory store's metrics: %w", err)
			}
		}
	}
	return s, nil
}

// Usage returns the number of keys held and the bytes accounted for.
func (s *MemoryStore) Usage() (entries int, bytes int64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.entries), s.bytes
}

// Reserve implements Store.
func (s *MemoryStore) Reserve(_ context.Context, key, fingerprint string, ttl time.Duration) (string, *Record, error) {
	now := time.Now()
	s.mu.Lock()
	defer s.mu.Unlock()
	if el, ok := s.entries[key]; ok {
		e := el.Value.(*memEntry)
		if now.Before(e.expires) {
			rec := e.rec
			return "", &rec, nil
		}
		s.remove(el)
	}
	e := &memEntry{key: key, rec: Record{Fingerprint: fingerprint}, expires: now.Add(ttl)}
	e.size = entryOverhead + int64(len(key)) + e.rec.size()
	if !s.makeRoom(1, e.size, now, nil) {
		s.refused.Inc()
		return "", nil, fmt.Errorf("%w: %d keys, %d of %d bytes held, all reserved by running requests", ErrStoreFull, len(s.entries), s.bytes, s.maxBytes)
	}
	s.seq++
	e.token = strconv.FormatUint(s.seq, 36)
	s.entries[key] = s.order.PushBack(e)
	s.bytes += e.size
	return e.token, nil, nil
}

// makeRoom drops expired entries, then the oldest completed ones (never
// keep), until n more entries of size bytes fit. It reports whether they do.
func (s *MemoryStore) makeRoom(n int, size int64, now time.Time, keep *list.Element) bool {
	fits := func() bool { return len(s.entries)+n <= s.maxEntries && s.bytes+size <= s.maxBytes }
	if fits() {
		return true
	}
	for el := s.order.Front(); el != nil && !fits(); {
		next := el.Next()
		if e := el.Value.(*memEntry); el != keep && !now.Before(e.expires) {
			s.remove(el)
		}
		el = next
	}
	for el := s.order.Front(); el != nil && !fits(); {
		next := el.Next()
		if e := el.Value.(*memEntry); el != keep && e.rec.Completed {
			s.remove(el)
			s.evicted.Inc()
		}
		el = next
	}
	return fits()
}

func (s *MemoryStore) remove(el *list.Element) {
	e := s.order.Remove(el).(*memEntry)
	delete(s.entries, e.key)
	s.bytes -= e.size
}

// holding returns the live reservation of key named by token.
func (s *MemoryStore) holding(key, token string, now time.Time) (*list.Element, error) {
	el, ok := s.entries[key]
	if !ok {
		return nil, fmt.Errorf("%w: key %q has no record", ErrReservationLost, key)
	}
	e := el.Value.(*memEntry)
	if !now.Before(e.expires) {
		s.remove(el)
		return nil, fmt.Errorf("%w: the reservation of key %q expired", ErrReservationLost, key)
	}
	if e.rec.Completed || e.token != token {
		return nil, fmt.Errorf("%w: key %q is held by another request", ErrReservationLost, key)
	}
	return el, nil
}

// Complete implements Store. The body is copied. When the record does not
// fit even after eviction it is kept without its body (Response.Omitted).
func (s *MemoryStore) Complete(_ context.Context, key, token string, rec *Record, ttl time.Duration) error {
	now := time.Now()
	stored := *rec
	stored.Completed = true
	stored.Response.Body = append([]byte(nil), rec.Response.Body...)
	stored.Response.Header = rec.Response.Header.Clone()
	s.mu.Lock()
	defer s.mu.Unlock()
	el, err := s.holding(key, token, now)
	if err != nil {
		return err
	}
	e := el.Value.(*memEntry)
	size := entryOverhead + int64(len(key)) + stored.size()
	if !s.makeRoom(0, size-e.size, now, el) {
		stored.Response.Body, stored.Response.Omitted = nil, true
		size = entryOverhead + int64(len(key)) + stored.size()
	}
	s.bytes += size - e.size
	e.size, e.rec, e.expires = size, stored, now.Add(ttl)
	s.order.MoveToBack(el)
	return nil
}

// Release implements Store.
func (s *MemoryStore) Release(_ context.Context, key, token string) error {
	now := time.Now()
	s.mu.Lock()
	defer s.mu.Unlock()
	el, err := s.holding(key, token, now)
	if err != nil {
		return err
	}
	s.remove(el)
	return nil
}

// Get implements Store. The returned record shares its body and header
// with the store: callers must not modify them.
func (s *MemoryStore) Get(_ context.Context, key string) (*Record, error) {
	now := time.Now()
	s.mu.Lock()
	defer s.mu.Unlock()
	el, ok := s.entries[key]
	if !ok {
		return nil, nil
	}
	e := el.Value.(*memEntry)
	if !now.Before(e.expires) {
		s.remove(el)
		return nil, nil
	}
	rec := e.rec
	return &rec, nil
}
