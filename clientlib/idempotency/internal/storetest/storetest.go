// Package storetest checks that an idempotency.Store keeps the contract
// written on the interface. Each implementation's tests run it.
package storetest

import (
	"context"
	"errors"
	"net/http"
	"reflect"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/fusebox-dev/fusebox/clientlib/idempotency"
)

// Harness describes the store under test.
type Harness struct {
	// New returns an empty store.
	New func(t *testing.T) idempotency.Store
	// ShortTTL is a reservation TTL that Expire can outlive.
	ShortTTL time.Duration
	// Expire returns once the record of key (a reservation or a completed
	// record), written with ShortTTL, has expired in s.
	Expire func(t *testing.T, s idempotency.Store, key string)
}

// Run runs the contract's cases.
func Run(t *testing.T, h Harness) {
	ctx := context.Background()
	resp := idempotency.Response{Status: 201, Header: http.Header{"Content-Type": {"application/json"}, "Location": {"/orders/7"}},
		Body: []byte(`{"id":7}`), Size: 8}

	t.Run("reserve once, then see the reservation", func(t *testing.T) {
		s := h.New(t)
		tok, rec, err := s.Reserve(ctx, "k", "fp1", time.Minute)
		if err != nil || tok == "" || rec != nil {
			t.Fatalf("first Reserve = %q, %v, %v; want a token", tok, rec, err)
		}
		tok2, rec, err := s.Reserve(ctx, "k", "fp2", time.Minute)
		if err != nil || tok2 != "" || rec == nil {
			t.Fatalf("second Reserve = %q, %v, %v; want the existing record", tok2, rec, err)
		}
		if rec.Completed || rec.Fingerprint != "fp1" {
			t.Fatalf("existing record = %+v, want the reservation with fp1", rec)
		}
		if got, err := s.Get(ctx, "other"); got != nil || err != nil {
			t.Fatalf("Get(unknown) = %v, %v; want nil, nil", got, err)
		}
	})

	t.Run("exactly one of concurrent reservations wins", func(t *testing.T) {
		s := h.New(t)
		const n = 16
		var (
			wg   sync.WaitGroup
			mu   sync.Mutex
			wins int
		)
		for i := range n {
			wg.Go(func() {
				tok, rec, err := s.Reserve(ctx, "race", "fp", time.Minute)
				if err != nil {
					t.Errorf("Reserve %d: %v", i, err)
					return
				}
				if (tok == "") == (rec == nil) {
					t.Errorf("Reserve %d = %q, %v: want a token or a record", i, tok, rec)
				}
				if tok != "" {
					mu.Lock()
					wins++
					mu.Unlock()
				}
			})
		}
		wg.Wait()
		if wins != 1 {
			t.Fatalf("%d of %d concurrent Reserve calls won, want exactly 1", wins, n)
		}
	})

	t.Run("complete stores the response; only the holder may complete", func(t *testing.T) {
		s := h.New(t)
		tok, _, _ := s.Reserve(ctx, "k", "fp", time.Minute)
		if err := s.Complete(ctx, "k", tok+"x", &idempotency.Record{Fingerprint: "fp", Response: resp}, time.Minute); !errors.Is(err, idempotency.ErrReservationLost) {
			t.Fatalf("Complete with a wrong token = %v, want ErrReservationLost", err)
		}
		if err := s.Complete(ctx, "k", tok, &idempotency.Record{Fingerprint: "fp", Response: resp}, time.Minute); err != nil {
			t.Fatalf("Complete: %v", err)
		}
		rec, err := s.Get(ctx, "k")
		if err != nil || rec == nil || !rec.Completed || rec.Fingerprint != "fp" || !reflect.DeepEqual(rec.Response, resp) {
			t.Fatalf("Get after Complete = %+v, %v; want the completed record with %+v", rec, err, resp)
		}
		if tok2, rec, err := s.Reserve(ctx, "k", "fp", time.Minute); tok2 != "" || rec == nil || !rec.Completed || err != nil {
			t.Fatalf("Reserve of a completed key = %q, %+v, %v; want the completed record", tok2, rec, err)
		}
		if err := s.Complete(ctx, "k", tok, &idempotency.Record{Fingerprint: "fp", Response: resp}, time.Minute); !errors.Is(err, idempotency.ErrReservationLost) {
			t.Fatalf("second Complete = %v, want ErrReservationLost", err)
		}
		if err := s.Release(ctx, "k", tok); !errors.Is(err, idempotency.ErrReservationLost) {
			t.Fatalf("Release of a completed key = %v, want ErrReservationLost", err)
		}
	})

	t.Run("release frees the key for the next request", func(t *testing.T) {
		s := h.New(t)
		tok, _, _ := s.Reserve(ctx, "k", "fp", time.Minute)
		if err := s.Release(ctx, "k", tok+"x"); !errors.Is(err, idempotency.ErrReservationLost) {
			t.Fatalf("Release with a wrong token = %v, want ErrReservationLost", err)
		}
		if err := s.Release(ctx, "k", tok); err != nil {
			t.Fatalf("Release: %v", err)
		}
		if rec, err := s.Get(ctx, "k"); rec != nil || err != nil {
			t.Fatalf("Get after Release = %+v, %v; want nil", rec, err)
		}
		tok2, rec, err := s.Reserve(ctx, "k", "fp", time.Minute)
		if tok2 == "" || rec != nil || err != nil {
			t.Fatalf("Reserve after Release = %q, %+v, %v; want a new token", tok2, rec, err)
		}
		if err := s.Release(ctx, "k", tok); !errors.Is(err, idempotency.ErrReservationLost) {
			t.Fatalf("Release with the old token = %v, want ErrReservationLost", err)
		}
	})

	t.Run("an expired reservation frees the key", func(t *testing.T) {
		s := h.New(t)
		tok, _, _ := s.Reserve(ctx, "k", "fp", h.ShortTTL)
		h.Expire(t, s, "k")
		if err := s.Complete(ctx, "k", tok, &idempotency.Record{Fingerprint: "fp", Response: resp}, time.Minute); !errors.Is(err, idempotency.ErrReservationLost) {
			t.Fatalf("Complete after expiry = %v, want ErrReservationLost", err)
		}
		if tok2, rec, err := s.Reserve(ctx, "k", "fp", time.Minute); tok2 == "" || rec != nil || err != nil {
			t.Fatalf("Reserve after expiry = %q, %+v, %v; want a new token", tok2, rec, err)
		}
	})

	t.Run("a completed failure is kept whole, as any answer", func(t *testing.T) {
		s := h.New(t)
		for i, r := range []idempotency.Response{
			{Status: 503, Header: http.Header{"Content-Type": {"text/plain; charset=utf-8"}}, Body: []byte("charged, then the ledger timed out\n"), Size: 35},
			{Status: 500, Header: http.Header{"Content-Type": {"text/plain; charset=utf-8"}, "Fusebox-Idempotency": {"panicked"}}, Body: []byte("panicked"), Size: 8},
			{Status: 14, Message: "unavailable", Body: []byte{0x08, 0x0e}, Size: 2},
			{Status: 0, MessageType: "grpc.health.v1.HealthCheckResponse", Body: []byte{0x08, 0x01}, Size: 2},
			{Status: 200, Header: http.Header{}, Omitted: true, Size: 2 << 20},
		} {
			key := "failure-" + strconv.Itoa(i)
			tok, _, err := s.Reserve(ctx, key, "fp", time.Minute)
			if err != nil || tok == "" {
				t.Fatalf("Reserve %s = %q, %v", key, tok, err)
			}
			if err := s.Complete(ctx, key, tok, &idempotency.Record{Fingerprint: "fp", Response: r}, time.Minute); err != nil {
				t.Fatalf("Complete %s: %v", key, err)
			}
			rec, err := s.Get(ctx, key)
			if err != nil || rec == nil || !rec.Completed || !reflect.DeepEqual(rec.Response, r) {
				t.Fatalf("Get %s = %+v, %v; want the completed record with %+v", key, rec, err, r)
			}
			if tok2, rec, err := s.Reserve(ctx, key, "fp", time.Minute); tok2 != "" || err != nil || rec == nil || !reflect.DeepEqual(rec.Response, r) {
				t.Fatalf("Reserve of completed %s = %q, %+v, %v; want the record, not a new run", key, tok2, rec, err)
			}
		}
	})

	t.Run("a completed record lives for Complete's ttl, not the reservation's", func(t *testing.T) {
		s := h.New(t)
		tok, _, _ := s.Reserve(ctx, "k", "fp", time.Hour)
		if err := s.Complete(ctx, "k", tok, &idempotency.Record{Fingerprint: "fp", Response: resp}, h.ShortTTL); err != nil {
			t.Fatalf("Complete: %v", err)
		}
		h.Expire(t, s, "k")
		if tok2, rec, err := s.Reserve(ctx, "k", "fp", time.Minute); tok2 == "" || rec != nil || err != nil {
			t.Fatalf("Reserve after the record expired = %q, %+v, %v; want a new token", tok2, rec, err)
		}
	})

	t.Run("keys are independent", func(t *testing.T) {
		s := h.New(t)
		for i := range 50 {
			if tok, _, err := s.Reserve(ctx, "key-"+strconv.Itoa(i), "fp", time.Minute); tok == "" || err != nil {
				t.Fatalf("Reserve key-%d = %q, %v", i, tok, err)
			}
		}
	})
}
