package idempotency

import (
	"context"
	"errors"
	"strconv"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
)

func TestMemoryConfigValidate(t *testing.T) {
	err := MemoryConfig{MaxEntries: -1, MaxBytes: -2}.Validate()
	if !errors.Is(err, ErrInvalidOption) || !strings.Contains(err.Error(), "MaxEntries: must not be negative, got -1") ||
		!strings.Contains(err.Error(), "MaxBytes: must not be negative, got -2") {
		t.Fatalf("Validate = %v, want both fields named", err)
	}
	if _, err := NewMemoryStore(MemoryConfig{MaxEntries: -1}); !errors.Is(err, ErrInvalidOption) {
		t.Fatalf("NewMemoryStore = %v, want ErrInvalidOption", err)
	}
}

// TestMemoryStoreStaysBounded sends 10,000 distinct keys through a store
// capped far below that: it holds at most its caps, evicting the oldest
// completed records, and refuses new keys only when every slot is a
// running request.
func TestMemoryStoreStaysBounded(t *testing.T) {
	// In a bubble: time moves only when the test sleeps.
	synctest.Test(t, testMemoryStoreStaysBounded)
}

func testMemoryStoreStaysBounded(t *testing.T) {
	ctx := context.Background()
	reg := prometheus.NewRegistry()
	const maxEntries, maxBytes = 1000, 200 << 10
	s := memStore(t, MemoryConfig{MaxEntries: maxEntries, MaxBytes: maxBytes, Registerer: reg})
	d := newDeduper(t, s)
	body := strings.Repeat("b", 300)
	mw := d.Middleware(&sideEffect{})
	for i := range 10_000 {
		w := req{key: "key-" + strconv.Itoa(i), body: body}.do(mw)
		if w.Code != 201 {
			t.Fatalf("request %d: %d %q", i, w.Code, w.Body)
		}
		if n, b := s.Usage(); n > maxEntries || b > maxBytes {
			t.Fatalf("after %d keys the store holds %d entries, %d bytes: over its caps", i+1, n, b)
		}
	}
	n, b := s.Usage()
	if n == 0 || testutil.ToFloat64(s.evicted) != float64(10_000-n) {
		t.Fatalf("holds %d entries (%d bytes), evicted %v; want the rest evicted", n, b, testutil.ToFloat64(s.evicted))
	}
	// The newest keys are still deduplicated.
	if w := (req{key: "key-9999", body: body}).do(mw); w.Header().Get(HeaderReplayed) != "true" {
		t.Fatalf("the newest key was not replayed: %d", w.Code)
	}
	if err := testutil.GatherAndCompare(reg, strings.NewReader(`
# HELP fusebox_idempotency_memory_entries Keys the in-memory idempotency store holds.
# TYPE fusebox_idempotency_memory_entries gauge
fusebox_idempotency_memory_entries `+strconv.Itoa(n)+`
`), "fusebox_idempotency_memory_entries"); err != nil {
		t.Fatal(err)
	}

	// Filled with reservations only, it refuses and counts.
	full := memStore(t, MemoryConfig{MaxEntries: 3})
	for i := range 3 {
		if tok, _, err := full.Reserve(ctx, strconv.Itoa(i), "fp", time.Minute); tok == "" || err != nil {
			t.Fatal(tok, err)
		}
	}
	if _, _, err := full.Reserve(ctx, "one more", "fp", time.Minute); !errors.Is(err, ErrStoreFull) ||
		!strings.Contains(err.Error(), "all reserved by running requests") {
		t.Fatalf("Reserve on a store full of reservations = %v, want ErrStoreFull", err)
	}
	if v := testutil.ToFloat64(full.refused); v != 1 {
		t.Fatalf("refused counter %v, want 1", v)
	}
	// Expired reservations make room again.
	time.Sleep(time.Minute)
	if tok, _, err := full.Reserve(ctx, "one more", "fp", time.Minute); tok == "" || err != nil {
		t.Fatalf("Reserve after the reservations expired = %q, %v", tok, err)
	}
	if rec, _ := full.Get(ctx, "0"); rec != nil {
		t.Fatalf("an expired reservation is still visible: %+v", rec)
	}
}

func TestMemoryStoreKeepsTooLargeRecordsWithoutBody(t *testing.T) {
	ctx := context.Background()
	s := memStore(t, MemoryConfig{MaxBytes: 2000})
	tok, _, _ := s.Reserve(ctx, "k", "fp", time.Minute)
	rec := &Record{Fingerprint: "fp", Response: Response{Status: 200, Body: make([]byte, 5000), Size: 5000}}
	if err := s.Complete(ctx, "k", tok, rec, time.Minute); err != nil {
		t.Fatal(err)
	}
	got, _ := s.Get(ctx, "k")
	if got == nil || !got.Completed || !got.Response.Omitted || got.Response.Body != nil || got.Response.Size != 5000 {
		t.Fatalf("record %+v, want completed with the body omitted", got)
	}
	if _, b := s.Usage(); b > 2000 {
		t.Fatalf("%d bytes held, over the 2000-byte cap", b)
	}
}
