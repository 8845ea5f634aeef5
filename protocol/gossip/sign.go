package gossip

import (
	"bytes"
	"context"
	"crypto/ed25519"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"time"

	"github.com/fusebox-dev/fusebox/protocol/fuseboxv1"
	"github.com/fusebox-dev/fusebox/sharedstate/secretfile"
)

// The Ed25519ctx contexts of signed items: a row's signature never passes
// for a record's.
const (
	rowContext    = "fusebox/v2/rows"
	recordContext = "fusebox/v2/record"
)

// SignatureSize is the size of an item's signature.
const SignatureSize = ed25519.SignatureSize

var (
	rowOpts    = &ed25519.Options{Context: rowContext}
	recordOpts = &ed25519.Options{Context: recordContext}
)

func sign(key ed25519.PrivateKey, opts *ed25519.Options, body []byte) *fuseboxv1.SignedItem {
	sig, err := key.Sign(nil, body, opts)
	if err != nil { // only for a malformed options value, which these are not
		panic("gossip: sign: " + err.Error())
	}
	return &fuseboxv1.SignedItem{Body: body, Signature: sig}
}

func verify(pub ed25519.PublicKey, opts *ed25519.Options, it *fuseboxv1.SignedItem, memo *VerifyMemo) bool {
	if len(pub) != ed25519.PublicKeySize || len(it.GetSignature()) != ed25519.SignatureSize {
		return false
	}
	if memo == nil {
		return ed25519.VerifyWithOptions(pub, it.GetBody(), it.GetSignature(), opts) == nil
	}
	k := memoKey(pub, opts, it)
	if memo.has(k) {
		return true
	}
	if ed25519.VerifyWithOptions(pub, it.GetBody(), it.GetSignature(), opts) != nil {
		return false
	}
	memo.add(k)
	return true
}

// VerifyMemo remembers the signed items that passed their check, so that
// members sharing one process check each item once (Config.VerifyMemo).
// The lab's simulated fleets share one among their hundreds of agents,
// which all receive the same signed batches: the answer of a check depends
// only on the key, the context, the body and the signature, which the memo
// is keyed by (their SHA-256), so sharing it changes no member's decision,
// only how often the process computes the same one. Only passes are kept:
// a forged item is checked, and dropped, every time. It holds at most
// 2 × maxMemo items (two generations; the older one is dropped when the
// newer fills). Safe for concurrent use.
type VerifyMemo struct {
	mu        sync.Mutex
	cur, prev map[[sha256.Size]byte]struct{}
	hits      atomic.Uint64
}

// maxMemo is the size of a VerifyMemo generation: 2 × 2^20 keys of 32
// bytes, about 100 MB with the maps' overhead.
const maxMemo = 1 << 20

// NewVerifyMemo returns an empty memo.
func NewVerifyMemo() *VerifyMemo {
	return &VerifyMemo{cur: map[[sha256.Size]byte]struct{}{}}
}

// Hits is how many checks the memo answered.
func (m *VerifyMemo) Hits() uint64 { return m.hits.Load() }

func (m *VerifyMemo) has(k [sha256.Size]byte) bool {
	m.mu.Lock()
	_, ok := m.cur[k]
	if !ok {
		_, ok = m.prev[k]
	}
	m.mu.Unlock()
	if ok {
		m.hits.Add(1)
	}
	return ok
}

func (m *VerifyMemo) add(k [sha256.Size]byte) {
	m.mu.Lock()
	if len(m.cur) >= maxMemo {
		m.prev, m.cur = m.cur, make(map[[sha256.Size]byte]struct{}, maxMemo)
	}
	m.cur[k] = struct{}{}
	m.mu.Unlock()
}

// memoKey is the SHA-256 of what a check's answer depends on, each part
// length-prefixed.
func memoKey(pub ed25519.PublicKey, opts *ed25519.Options, it *fuseboxv1.SignedItem) [sha256.Size]byte {
	h := sha256.New()
	var n [4]byte
	for _, part := range [][]byte{pub, []byte(opts.Context), it.GetSignature(), it.GetBody()} {
		binary.BigEndian.PutUint32(n[:], uint32(len(part)))
		h.Write(n[:])
		h.Write(part)
	}
	var k [sha256.Size]byte
	h.Sum(k[:0])
	return k
}

// ErrKeyFile is matched by every error of LoadOrCreateKey.
var ErrKeyFile = errors.New("gossip: signing key file")

// LoadOrCreateKey returns the Ed25519 key this node signs its rows and
// records with, kept in path: the base64 of the 32-byte seed and a
// newline, mode 0600. A missing file is created (its directory must
// exist); an existing one must not be group- or other-accessible
// (secretfile.Check) and must hold one seed. Two processes creating it at
// once end with the same key: the file appears whole or not at all.
func LoadOrCreateKey(path string) (ed25519.PrivateKey, error) {
	if _, err := os.Lstat(path); errors.Is(err, os.ErrNotExist) {
		if err := createKey(path); err != nil {
			return nil, err
		}
	}
	data, err := secretfile.Read(path)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrKeyFile, err)
	}
	seed, err := base64.StdEncoding.DecodeString(string(bytes.TrimSpace(data)))
	if err != nil || len(seed) != ed25519.SeedSize {
		return nil, fmt.Errorf("%w %s: want the base64 of a %d-byte Ed25519 seed (delete the file to have a new key made)", ErrKeyFile, path, ed25519.SeedSize)
	}
	return ed25519.NewKeyFromSeed(seed), nil
}

func createKey(path string) error {
	seed := make([]byte, ed25519.SeedSize)
	if _, err := rand.Read(seed); err != nil {
		return fmt.Errorf("%w: %w", ErrKeyFile, err)
	}
	tmp, err := os.CreateTemp(filepath.Dir(path), ".fusebox-key-*") // mode 0600
	if err != nil {
		return fmt.Errorf("%w: %w", ErrKeyFile, err)
	}
	defer os.Remove(tmp.Name())
	_, err = tmp.WriteString(base64.StdEncoding.EncodeToString(seed) + "\n")
	if err == nil {
		err = tmp.Sync()
	}
	if cerr := tmp.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return fmt.Errorf("%w: %w", ErrKeyFile, err)
	}
	// Link fails when another process made the file first: its key wins.
	if err := os.Link(tmp.Name(), path); err != nil && !errors.Is(err, os.ErrExist) {
		return fmt.Errorf("%w: %w", ErrKeyFile, err)
	}
	return nil
}

// EncodeKey is the text form of a public key in node metadata and in the
// etcd member entry: standard base64.
func EncodeKey(pub ed25519.PublicKey) string {
	if len(pub) == 0 {
		return ""
	}
	return base64.StdEncoding.EncodeToString(pub)
}

// DecodeKey parses EncodeKey's form; "" and malformed text yield nil.
func DecodeKey(s string) ed25519.PublicKey {
	if s == "" {
		return nil
	}
	b, err := base64.StdEncoding.DecodeString(s)
	if err != nil || len(b) != ed25519.PublicKeySize {
		return nil
	}
	return ed25519.PublicKey(b)
}

// KeyStatus says what a KeySource knows of a node's key.
type KeyStatus uint8

const (
	// KeyUnknown: no registration of the node is known. Its items are
	// dropped (reason "unknown_key"), and the source should look it up.
	KeyUnknown KeyStatus = iota
	// KeyNone: the node is registered without a key, a build that does not
	// sign (0.1.x): its unsigned items are taken as such builds' always
	// were, a signed item in its name is dropped ("unknown_key").
	KeyNone
	// KeyKnown: the node signs with the returned key; its items are taken
	// only signed with it.
	KeyKnown
)

// KeySource returns the public key a node signs with. It is called on the
// receive path for every item: it must be fast, thread-safe and never
// block (start a lookup and answer KeyUnknown instead).
type KeySource func(node string) (ed25519.PublicKey, KeyStatus)

// KeyEntry is what a trusted registry (the etcd member entries) says of a
// node: its public key, nil when it registered without one.
type KeyEntry struct {
	Node string
	Key  ed25519.PublicKey
}

// RegisteredKey is the KeyEntry of a registration of node with the text
// form of its key (EncodeKey; "" for a node that signs nothing). ok is
// false when the key does not parse: such a node's items are dropped,
// never taken unsigned.
func RegisteredKey(node, key string) (e KeyEntry, ok bool) {
	k := DecodeKey(key)
	if key != "" && k == nil {
		return KeyEntry{}, false
	}
	return KeyEntry{Node: node, Key: k}, true
}

// KeyDirectory is a KeySource backed by a trusted registry: the keys come
// from full listings (Replace) and, for a node it has not heard of, from a
// lookup it starts in the background, at most once a second per node. The
// agent and the coordinator's observer feed it the etcd member entries
// they list anyway to find peers.
//
//	dir := gossip.NewKeyDirectory(lookup)
//	defer dir.Close()
//	cfg.Keys = dir.Key
//	…
//	dir.Replace(entries) // after each listing
type KeyDirectory struct {
	lookup func(ctx context.Context, node string) (KeyEntry, bool, error)

	mu      sync.RWMutex
	keys    map[string]ed25519.PublicKey // registered nodes
	retired map[string]retiredKey        // nodes no longer registered, for retiredKeyTTL

	askMu sync.Mutex
	asked map[string]time.Time // when an unknown node was last looked up

	queue chan string
	stop  chan struct{}
	wg    sync.WaitGroup
	once  sync.Once
}

const (
	maxPendingLookups = 256
	maxAsked          = 4096
	lookupEvery       = time.Second
	lookupTimeout     = 2 * time.Second
)

// NewKeyDirectory returns an empty directory whose lookups call lookup
// (found false: no such registration). Close stops its lookup goroutine.
func NewKeyDirectory(lookup func(ctx context.Context, node string) (KeyEntry, bool, error)) *KeyDirectory {
	d := &KeyDirectory{lookup: lookup, keys: map[string]ed25519.PublicKey{}, retired: map[string]retiredKey{}, asked: map[string]time.Time{},
		queue: make(chan string, maxPendingLookups), stop: make(chan struct{})}
	d.wg.Add(1)
	go d.run()
	return d
}

// Replace makes entries the registered nodes (a full listing: a node it
// does not name is no longer registered; its key stays known for an hour,
// so that the records it proposed still verify).
func (d *KeyDirectory) Replace(entries []KeyEntry) {
	keys := make(map[string]ed25519.PublicKey, len(entries))
	for _, e := range entries {
		keys[e.Node] = e.Key
	}
	now := time.Now()
	d.mu.Lock()
	for n, k := range d.keys {
		if _, ok := keys[n]; !ok {
			d.retired[n] = retiredKey{key: k, at: now}
		}
	}
	for n, r := range d.retired {
		if _, ok := keys[n]; ok || now.Sub(r.at) > retiredKeyTTL || len(d.retired) > maxRetired {
			delete(d.retired, n)
		}
	}
	d.keys = keys
	d.mu.Unlock()
}

// Set records one node's registration (a lookup's answer, or a watch event).
func (d *KeyDirectory) Set(e KeyEntry) {
	d.mu.Lock()
	d.keys[e.Node] = e.Key
	d.mu.Unlock()
}

// Key is the KeySource.
func (d *KeyDirectory) Key(node string) (ed25519.PublicKey, KeyStatus) {
	d.mu.RLock()
	k, ok := d.keys[node]
	if !ok {
		var r retiredKey
		if r, ok = d.retired[node]; ok {
			k = r.key
		}
	}
	d.mu.RUnlock()
	switch {
	case ok && k != nil:
		return k, KeyKnown
	case ok:
		return nil, KeyNone
	}
	d.ask(node)
	return nil, KeyUnknown
}

// Prefetch looks node up now unless its registration is known (a member
// that just joined: its first rows then find its key).
func (d *KeyDirectory) Prefetch(node string) {
	d.mu.RLock()
	_, ok := d.keys[node]
	d.mu.RUnlock()
	if !ok {
		d.ask(node)
	}
}

func (d *KeyDirectory) ask(node string) {
	now := time.Now()
	d.askMu.Lock()
	if t, ok := d.asked[node]; ok && now.Sub(t) < lookupEvery {
		d.askMu.Unlock()
		return
	}
	if len(d.asked) >= maxAsked {
		clear(d.asked)
	}
	d.asked[node] = now
	d.askMu.Unlock()
	select {
	case d.queue <- node:
	default: // a full queue: asked again after lookupEvery
	}
}

func (d *KeyDirectory) run() {
	defer d.wg.Done()
	for {
		select {
		case <-d.stop:
			return
		case node := <-d.queue:
			ctx, cancel := context.WithTimeout(context.Background(), lookupTimeout)
			go func() { // a Close ends a lookup that waits on etcd
				select {
				case <-d.stop:
					cancel()
				case <-ctx.Done():
				}
			}()
			e, found, err := d.lookup(ctx, node)
			cancel()
			if err == nil && found && e.Node == node {
				d.Set(e)
			}
		}
	}
}

// Close stops the lookups; it is idempotent.
func (d *KeyDirectory) Close() {
	d.once.Do(func() {
		close(d.stop)
		d.wg.Wait()
	})
}
