package idempotency_test

import (
	"context"
	"testing"
	"time"

	"github.com/fusebox-dev/fusebox/clientlib/idempotency"
	"github.com/fusebox-dev/fusebox/clientlib/idempotency/internal/storetest"
	"github.com/fusebox-dev/fusebox/sharedstate/sstest"
)

func TestMemoryStoreContract(t *testing.T) {
	storetest.Run(t, storetest.Harness{
		New:      func(t *testing.T) idempotency.Store { return mustMemoryStore(t, idempotency.MemoryConfig{}) },
		ShortTTL: 50 * time.Millisecond,
		Expire: func(t *testing.T, s idempotency.Store, key string) {
			sstest.Eventually(t, 10*time.Second, "the reservation to expire", func() bool {
				rec, err := s.Get(context.Background(), key)
				return rec == nil && err == nil
			})
		},
	})
}

func mustMemoryStore(t *testing.T, cfg idempotency.MemoryConfig) *idempotency.MemoryStore {
	s, err := idempotency.NewMemoryStore(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return s
}
