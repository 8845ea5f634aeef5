package idempotency_test

import (
	"testing"
	"time"

	"github.com/fusebox-dev/fusebox/clientlib"
	"github.com/fusebox-dev/fusebox/clientlib/idempotency"
	"github.com/fusebox-dev/fusebox/clientlib/idempotency/internal/storetest"
)

func TestMemoryStoreContract(t *testing.T) {
	clocks := map[idempotency.Store]*clientlib.ManualClock{}
	storetest.Run(t, storetest.Harness{
		New: func(t *testing.T) idempotency.Store {
			clk := clientlib.NewManualClock(time.Unix(1_700_000_000, 0))
			s := mustMemoryStore(t, idempotency.MemoryConfig{Clock: clk})
			clocks[s] = clk
			return s
		},
		ShortTTL: time.Second,
		Expire:   func(t *testing.T, s idempotency.Store, key string) { clocks[s].Advance(time.Second) },
	})
}

func mustMemoryStore(t *testing.T, cfg idempotency.MemoryConfig) *idempotency.MemoryStore {
	s, err := idempotency.NewMemoryStore(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return s
}
