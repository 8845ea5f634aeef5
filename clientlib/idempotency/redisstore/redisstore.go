// Package redisstore is an idempotency.Store in Redis, so that every
// instance of a service sees the same records: a retry that lands on
// another instance behind the load balancer is deduplicated too.
//
//	rdb := redis.NewClient(&redis.Options{Addr: "redis:6379", ContextTimeoutEnabled: true})
//	dd, err := idempotency.New(redisstore.New(rdb))
//	…
//	http.Handle("/orders", dd.Middleware(orders))
//
// It lives in its own package so that nothing else in clientlib pulls in
// the Redis client. Each key is one Redis string under the prefix, written
// with a TTL (PX): a reservation is "P" + token + fingerprint, set with
// SET NX PX in a Lua script that returns the existing value when the key
// is taken (one round trip, atomic); Complete and Release are Lua scripts
// that act only while the reservation still carries their token. A
// completed record is "C" + its JSON. Needs Redis ≥ 2.6.12 (tested with
// 7.0).
//
// Set ContextTimeoutEnabled in the client's options, so that a Redis that
// stops answering fails a request at its deadline (then the Deduper
// answers 503) rather than after go-redis's read timeout.
package redisstore

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/fusebox-dev/fusebox/clientlib/idempotency"
)

// DefaultPrefix is where keys live unless WithPrefix says otherwise.
const DefaultPrefix = "fusebox:idempotency:"

const tokenLen = 32 // hex characters

var (
	reserveScript = redis.NewScript(`
if redis.call('SET', KEYS[1], ARGV[1], 'NX', 'PX', ARGV[2]) then return false end
return redis.call('GET', KEYS[1])`)
	completeScript = redis.NewScript(`
local v = redis.call('GET', KEYS[1])
if (not v) or string.sub(v, 1, #ARGV[1]) ~= ARGV[1] then return 0 end
redis.call('SET', KEYS[1], ARGV[2], 'PX', ARGV[3])
return 1`)
	releaseScript = redis.NewScript(`
local v = redis.call('GET', KEYS[1])
if (not v) or string.sub(v, 1, #ARGV[1]) ~= ARGV[1] then return 0 end
redis.call('DEL', KEYS[1])
return 1`)
)

// Store is an idempotency.Store in Redis. It is safe for concurrent use, by
// any number of processes sharing the Redis.
type Store struct {
	rdb    redis.UniversalClient
	prefix string
}

// Option configures New.
type Option func(*Store)

// WithPrefix sets the prefix of every key (optional, default DefaultPrefix).
func WithPrefix(p string) Option { return func(s *Store) { s.prefix = p } }

// New returns a Store on rdb (a *redis.Client, *redis.ClusterClient or any
// redis.UniversalClient). The caller owns rdb and closes it.
func New(rdb redis.UniversalClient, opts ...Option) *Store {
	s := &Store{rdb: rdb, prefix: DefaultPrefix}
	for _, o := range opts {
		o(s)
	}
	return s
}

var _ idempotency.Store = (*Store)(nil)

func ms(d time.Duration) int64 { return max(1, d.Milliseconds()) }

// Reserve implements idempotency.Store.
func (s *Store) Reserve(ctx context.Context, key, fingerprint string, ttl time.Duration) (string, *idempotency.Record, error) {
	var b [tokenLen / 2]byte
	_, _ = rand.Read(b[:])
	token := hex.EncodeToString(b[:])
	v, err := reserveScript.Run(ctx, s.rdb, []string{s.prefix + key}, "P"+token+fingerprint, ms(ttl)).Text()
	if errors.Is(err, redis.Nil) {
		return token, nil, nil
	}
	if err != nil {
		return "", nil, fmt.Errorf("redisstore: reserve: %w", err)
	}
	rec, err := decode(v)
	if err != nil {
		return "", nil, fmt.Errorf("redisstore: reserve: key %q: %w", key, err)
	}
	return "", rec, nil
}

// Complete implements idempotency.Store.
func (s *Store) Complete(ctx context.Context, key, token string, rec *idempotency.Record, ttl time.Duration) error {
	stored := *rec
	stored.Completed = true
	b, err := json.Marshal(&stored)
	if err != nil {
		return fmt.Errorf("redisstore: complete: encoding the record: %w", err)
	}
	return s.whileReserved(ctx, "complete", completeScript, key, token, append([]byte("C"), b...), ms(ttl))
}

// Release implements idempotency.Store.
func (s *Store) Release(ctx context.Context, key, token string) error {
	return s.whileReserved(ctx, "release", releaseScript, key, token)
}

// whileReserved runs script (Complete's or Release's) on key, which acts
// only while token's reservation holds the key.
func (s *Store) whileReserved(ctx context.Context, op string, script *redis.Script, key, token string, args ...any) error {
	n, err := script.Run(ctx, s.rdb, []string{s.prefix + key}, append([]any{"P" + token}, args...)...).Int()
	if err != nil {
		return fmt.Errorf("redisstore: %s: %w", op, err)
	}
	if n == 0 {
		return fmt.Errorf("%w: key %q is no longer reserved by this request", idempotency.ErrReservationLost, key)
	}
	return nil
}

// Get implements idempotency.Store.
func (s *Store) Get(ctx context.Context, key string) (*idempotency.Record, error) {
	v, err := s.rdb.Get(ctx, s.prefix+key).Result()
	if errors.Is(err, redis.Nil) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("redisstore: get: %w", err)
	}
	rec, err := decode(v)
	if err != nil {
		return nil, fmt.Errorf("redisstore: get: key %q: %w", key, err)
	}
	return rec, nil
}

func decode(v string) (*idempotency.Record, error) {
	switch {
	case strings.HasPrefix(v, "P") && len(v) >= 1+tokenLen:
		return &idempotency.Record{Fingerprint: v[1+tokenLen:]}, nil
	case strings.HasPrefix(v, "C"):
		var rec idempotency.Record
		if err := json.Unmarshal([]byte(v[1:]), &rec); err != nil {
			return nil, fmt.Errorf("malformed record: %w", err)
		}
		rec.Completed = true
		return &rec, nil
	}
	return nil, fmt.Errorf("malformed record: %d bytes, not a reservation nor a completed record", len(v))
}
