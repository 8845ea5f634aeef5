package gossip

import (
	"bytes"
	"context"
	"crypto/ed25519"
	"crypto/rand"
	"encoding/binary"
	"errors"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/hashicorp/memberlist"
	"google.golang.org/protobuf/proto"

	"github.com/fusebox-dev/fusebox/protocol"
	"github.com/fusebox-dev/fusebox/protocol/fuseboxv1"
	"github.com/fusebox-dev/fusebox/sharedstate/secretfile"
	"github.com/fusebox-dev/fusebox/sharedstate/sstest"
)

func TestLoadOrCreateKey(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "gossip.key")
	k1, err := LoadOrCreateKey(path)
	if err != nil {
		t.Fatal(err)
	}
	fi, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	if fi.Mode().Perm() != 0o600 {
		t.Fatalf("key file mode %v, want 0600", fi.Mode().Perm())
	}
	k2, err := LoadOrCreateKey(path)
	if err != nil {
		t.Fatal(err)
	}
	if !k1.Equal(k2) {
		t.Fatal("a second start made another key")
	}
	if err := os.Chmod(path, 0o640); err != nil {
		t.Fatal(err)
	}
	if _, err := LoadOrCreateKey(path); !errors.Is(err, secretfile.ErrExposed) || !errors.Is(err, ErrKeyFile) {
		t.Fatalf("a group-readable key file: %v, want ErrExposed", err)
	}
	bad := filepath.Join(dir, "bad.key")
	if err := os.WriteFile(bad, []byte("not a key\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := LoadOrCreateKey(bad); !errors.Is(err, ErrKeyFile) {
		t.Fatalf("a malformed key file: %v, want ErrKeyFile", err)
	}
}

func newKey(t *testing.T) ed25519.PrivateKey {
	t.Helper()
	_, k, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	return k
}

func signedConfig(name string, h Handler, key ed25519.PrivateKey) Config {
	cfg := testConfig(name, RoleAgent, h)
	cfg.Signer = key
	return cfg
}

// joined starts members that sign with their own keys and joins them.
func joined(t *testing.T, cfgs ...Config) []*Gossip {
	t.Helper()
	var gs []*Gossip
	for _, c := range cfgs {
		gs = append(gs, newMember(t, c))
	}
	for _, g := range gs[1:] {
		if _, err := g.Join([]string{gs[0].Addr()}); err != nil {
			t.Fatal(err)
		}
	}
	sstest.Eventually(t, 5*time.Second, "every member sees every other", func() bool {
		for _, g := range gs {
			if len(g.Members()) != len(gs) {
				return false
			}
		}
		return true
	})
	return gs
}

// signRowWith signs rows as one batch, as their node sends them.
func signRowWith(t *testing.T, key ed25519.PrivateKey, rows ...*fuseboxv1.NodeWindow) *fuseboxv1.SignedItem {
	t.Helper()
	body, err := proto.Marshal(&fuseboxv1.RowBatch{Rows: rows})
	if err != nil {
		t.Fatal(err)
	}
	return sign(key, rowOpts, body)
}

func signRecordWith(t *testing.T, key ed25519.PrivateKey, r *fuseboxv1.BreakerRecord, opts *ed25519.Options) *fuseboxv1.SignedItem {
	t.Helper()
	body, err := proto.Marshal(r)
	if err != nil {
		t.Fatal(err)
	}
	return sign(key, opts, body)
}

func frameAt(t *testing.T, v byte, b *fuseboxv1.GossipBatch) []byte {
	t.Helper()
	f, err := protocol.Codec{}.EncodeBatchAt(v, b)
	if err != nil {
		t.Fatal(err)
	}
	return f
}

// A member's rows and records are taken only signed by its own key, whoever
// relays them: signed by another member's key, tampered with, signed for
// the other kind of item, or plain, they change nothing but a counter,
// counted under the origin they claim.
func TestOnlyTheOriginSigns(t *testing.T) {
	rec := newRecorder()
	ka, kb := newKey(t), newKey(t)
	gs := joined(t, signedConfig("recv", rec, newKey(t)), signedConfig("a", newRecorder(), ka), signedConfig("b", newRecorder(), kb))
	recv := gs[0]
	row := func(seq uint64) *fuseboxv1.NodeWindow {
		return &fuseboxv1.NodeWindow{Node: "a", Dependency: "payments", Seq: seq, Counts: &fuseboxv1.Counts{FirstAttempts: 50, Failures: 50}}
	}
	record := &fuseboxv1.BreakerRecord{Dependency: "payments", Generation: 1, State: fuseboxv1.BreakerState_BREAKER_STATE_OPEN, Origin: "a", Reason: "forged"}
	tampered := signRowWith(t, ka, row(3))
	tampered.Body = append(bytes.Clone(tampered.Body[:len(tampered.Body)-1]), tampered.Body[len(tampered.Body)-1]^1)
	bRow := &fuseboxv1.NodeWindow{Node: "b", Dependency: "payments", Seq: 1, Counts: &fuseboxv1.Counts{Successes: 1}}
	for name, b := range map[string]*fuseboxv1.GossipBatch{
		"b signs a's row":           {SignedRows: []*fuseboxv1.SignedItem{signRowWith(t, kb, row(1))}},
		"a signs a batch with b's":  {SignedRows: []*fuseboxv1.SignedItem{signRowWith(t, ka, row(2), bRow)}},
		"b signs a's record":        {SignedRecords: []*fuseboxv1.SignedItem{signRecordWith(t, kb, record, recordOpts)}},
		"a's row, tampered":         {SignedRows: []*fuseboxv1.SignedItem{tampered}},
		"a's record, row signature": {SignedRecords: []*fuseboxv1.SignedItem{signRecordWith(t, ka, record, rowOpts)}},
	} {
		(*delegate)(recv).NotifyMsg(frameAt(t, protocol.Version2, b))
		if n, m := rec.seen(); n+m != 0 {
			t.Fatalf("%s: the handler saw %d rows and %d records", name, n, m)
		}
	}
	(*delegate)(recv).NotifyMsg(frameAt(t, protocol.Version2, &fuseboxv1.GossipBatch{Rows: []*fuseboxv1.NodeWindow{row(5)}, Records: []*fuseboxv1.BreakerRecord{record}}))
	if n, m := rec.seen(); n+m != 0 {
		t.Fatalf("plain items of a signing origin: the handler saw %d rows and %d records", n, m)
	}
	st := recv.Stats()
	if st.Dropped["bad_signature"] != 4 || st.BadSignatures["a"] != 4 || st.Dropped["unsigned"] != 2 || st.Dropped["malformed"] != 2 {
		t.Fatalf("dropped %v, bad signatures %v: want 4 bad_signature (all claiming a), 2 unsigned, 2 malformed (the mixed batch's rows)", st.Dropped, st.BadSignatures)
	}

	// The real thing, in a frame of either version (at version 1 with the
	// plain copy 0.1.x reads, which is not counted).
	(*delegate)(recv).NotifyMsg(frameAt(t, protocol.Version2, &fuseboxv1.GossipBatch{SignedRows: []*fuseboxv1.SignedItem{signRowWith(t, ka, row(7))}}))
	(*delegate)(recv).NotifyMsg(frameAt(t, protocol.Version1, &fuseboxv1.GossipBatch{Records: []*fuseboxv1.BreakerRecord{record},
		SignedRecords: []*fuseboxv1.SignedItem{signRecordWith(t, ka, record, recordOpts)}}))
	rec.mu.Lock()
	got, gen := rec.rows["a/payments"], rec.records["payments"]
	rec.mu.Unlock()
	if got != 7 || gen != 1 {
		t.Fatalf("a's own row and record: handler holds seq %d, generation %d; want 7 and 1", got, gen)
	}
	if st := recv.Stats(); st.Dropped["unsigned"] != 2 || st.Dropped["bad_signature"] != 4 {
		t.Fatalf("the genuine items were counted as dropped: %v", st.Dropped)
	}
}

// relayer takes everything as new, as the agent's handler does with what
// it had not seen.
type relayer struct{ recorder }

func (r *relayer) ApplyBatch(b *fuseboxv1.GossipBatch) (*fuseboxv1.GossipBatch, int) {
	r.recorder.ApplyBatch(b)
	return b, 0
}

// A relay forwards the origin's envelope byte for byte: it needs no key of
// its own, and the next receiver verifies the origin's signature.
func TestRelayForwardsTheOriginsBytes(t *testing.T) {
	bothPaths(t, func(t *testing.T, fanout int) {
		ka := newKey(t)
		cfg := testConfig("relay", RoleAgent, &relayer{*newRecorder()})
		cfg.Relay = true
		cfg.RowFanout = fanout
		cfg.GossipInterval = time.Hour // the relay sends only what the test takes
		gs := joined(t, cfg, signedConfig("a", newRecorder(), ka))
		relay := gs[0]
		env := signRowWith(t, ka, &fuseboxv1.NodeWindow{Node: "a", Dependency: "payments", Seq: 9, Counts: &fuseboxv1.Counts{Successes: 3}})
		(*delegate)(relay).NotifyMsg(frameAt(t, protocol.Version2, &fuseboxv1.GossipBatch{SignedRows: []*fuseboxv1.SignedItem{env}}))
		var found bool
		for _, b := range packetFrames(relay, 2, 64<<10) {
			f, err := protocol.Codec{}.Decode(b)
			if err != nil {
				t.Fatal(err)
			}
			for _, s := range f.Batch.GetSignedRows() {
				found = found || (bytes.Equal(s.GetBody(), env.GetBody()) && bytes.Equal(s.GetSignature(), env.GetSignature()))
			}
			if len(f.Batch.GetRows()) != 0 {
				t.Fatalf("a version-2 relay of a signed row carries a plain copy: %v", f.Batch)
			}
		}
		if !found {
			t.Fatal("the relayed broadcast does not carry the origin's envelope unchanged")
		}
	})
}

// screener knows everything already.
type screener struct {
	recorder
	asked int
}

func (s *screener) KnownRow(string, string, uint64) bool      { s.asked++; return true }
func (s *screener) KnownRecord(*fuseboxv1.BreakerRecord) bool { s.asked++; return true }

// Copies of what the handler knows cost no verification.
func TestKnownItemsAreNotVerified(t *testing.T) {
	ka := newKey(t)
	h := &screener{recorder: *newRecorder()}
	gs := joined(t, testConfig("recv", RoleAgent, h), signedConfig("a", newRecorder(), ka))
	env := signRowWith(t, ka, &fuseboxv1.NodeWindow{Node: "a", Dependency: "payments", Seq: 9})
	for range 3 {
		(*delegate)(gs[0]).NotifyMsg(frameAt(t, protocol.Version2, &fuseboxv1.GossipBatch{SignedRows: []*fuseboxv1.SignedItem{env}}))
	}
	if v := gs[0].Stats().Verified; v != 0 || h.asked != 3 {
		t.Fatalf("verified %d signatures, screened %d items; want 0 and 3", v, h.asked)
	}
}

// With a KeySource (the etcd member entries), the metadata's keys count for
// nothing: an origin it does not know is dropped (and looked up), one
// registered without a key (a build that does not sign) is taken plain
// only.
func TestKeySource(t *testing.T) {
	ka := newKey(t)
	rec := newRecorder()
	var mu sync.Mutex
	keys := map[string]KeyEntry{}
	var lookups []string
	dir := NewKeyDirectory(func(_ context.Context, node string) (KeyEntry, bool, error) {
		mu.Lock()
		defer mu.Unlock()
		lookups = append(lookups, node)
		e, ok := keys[node]
		return e, ok, nil
	})
	defer dir.Close()
	cfg := testConfig("recv", RoleAgent, rec)
	cfg.Keys = dir.Key
	gs := joined(t, cfg, signedConfig("a", newRecorder(), ka), testConfig("old", RoleAgent, newRecorder()))
	recv := gs[0]
	signedA := frameAt(t, protocol.Version2, &fuseboxv1.GossipBatch{SignedRows: []*fuseboxv1.SignedItem{
		signRowWith(t, ka, &fuseboxv1.NodeWindow{Node: "a", Dependency: "d", Seq: 1})}})
	(*delegate)(recv).NotifyMsg(signedA)
	if st := recv.Stats(); st.Dropped["unknown_key"] != 1 {
		t.Fatalf("a row of an origin etcd does not know: dropped %v, want 1 unknown_key", st.Dropped)
	}
	mu.Lock()
	keys["a"] = KeyEntry{Node: "a", Key: ka.Public().(ed25519.PublicKey)}
	mu.Unlock()
	sstest.Eventually(t, 5*time.Second, "the directory looked a up", func() bool {
		_, st := dir.Key("a")
		return st == KeyKnown
	})
	(*delegate)(recv).NotifyMsg(signedA)
	if n, _ := rec.seen(); n != 1 {
		t.Fatalf("after the lookup the handler holds %d rows, want a's", n)
	}
	dir.Replace([]KeyEntry{{Node: "a", Key: ka.Public().(ed25519.PublicKey)}, {Node: "old"}})
	(*delegate)(recv).NotifyMsg(frameAt(t, protocol.Version2, &fuseboxv1.GossipBatch{Rows: []*fuseboxv1.NodeWindow{{Node: "old", Dependency: "d", Seq: 1}},
		SignedRows: []*fuseboxv1.SignedItem{signRowWith(t, ka, &fuseboxv1.NodeWindow{Node: "old", Dependency: "e", Seq: 1})}}))
	rec.mu.Lock()
	plain, forged := rec.rows["old/d"], rec.rows["old/e"]
	rec.mu.Unlock()
	if plain != 1 || forged != 0 {
		t.Fatalf("origin registered without a key: plain row seq %d (want 1), signed row seq %d (want 0)", plain, forged)
	}
	// A departed node's key stays known: push-pull brings records it proposed.
	dir.Replace(nil)
	if _, st := dir.Key("a"); st != KeyKnown {
		t.Fatalf("a departed node's key: status %d, want KeyKnown", st)
	}
}

// oldMember is a 0.1.x member: metadata without a frame version or key.
type oldMember struct{}

func (oldMember) NodeMeta(int) []byte             { return []byte(`{"v":1,"role":"agent","version":"0.1.0"}`) }
func (oldMember) NotifyMsg([]byte)                {}
func (oldMember) GetBroadcasts(int, int) [][]byte { return nil }
func (oldMember) LocalState(bool) []byte          { return nil }
func (oldMember) MergeRemoteState([]byte, bool)   {}

// While a member speaks only version 1, broadcasts and push-pull go out at
// version 1 with every item plain (what 0.1.x reads) and the signed copies
// beside; after it leaves, at version 2, signed only.
func TestSendsTheLowestCommonVersion(t *testing.T) {
	bothPaths(t, func(t *testing.T, fanout int) {
		rec := newRecorder()
		key := newKey(t)
		cfg := signedConfig("new", rec, key)
		cfg.RowFanout = fanout
		cfg.GossipInterval = time.Hour // g sends only what the test takes
		g := newMember(t, cfg)
		if v := g.SendVersion(); v != protocol.Version1 {
			t.Fatalf("alone: send version %d, want 1 (whoever it joins may be older)", v)
		}
		if _, err := newMember(t, signedConfig("new-2", newRecorder(), newKey(t))).Join([]string{g.Addr()}); err != nil {
			t.Fatal(err)
		}
		sstest.Eventually(t, 5*time.Second, "with members of this build only, version 2", func() bool { return g.SendVersion() == protocol.Version2 })
		mc := memberlist.DefaultLocalConfig()
		mc.Name, mc.BindAddr, mc.BindPort = "old", "127.0.0.1", 0
		mc.Delegate = oldMember{}
		mc.EnableCompression = false // the plaintext guard refuses compressed messages
		mc.LogOutput = io.Discard
		old, err := memberlist.Create(mc)
		if err != nil {
			t.Fatal(err)
		}
		defer old.Shutdown()
		if _, err := old.Join([]string{g.Addr()}); err != nil {
			t.Fatal(err)
		}
		sstest.Eventually(t, 5*time.Second, "the new member sends version 1", func() bool { return g.SendVersion() == protocol.Version1 })
		row := &fuseboxv1.NodeWindow{Node: "new", Dependency: "d", Seq: 1, Counts: &fuseboxv1.Counts{Successes: 1}}
		rec.mu.Lock()
		rec.state = &fuseboxv1.PushPullState{Node: "new", Rows: []*fuseboxv1.NodeWindow{row}}
		rec.mu.Unlock()
		check := func(frame []byte, v byte, plain int) {
			t.Helper()
			f, err := protocol.Codec{}.Decode(frame)
			if err != nil {
				t.Fatal(err)
			}
			var rows, signed int
			if f.Batch != nil {
				rows, signed = len(f.Batch.GetRows()), len(f.Batch.GetSignedRows())
			} else {
				rows, signed = len(f.PushPull.GetRows()), len(f.PushPull.GetSignedRows())
			}
			if f.Version != v || rows != plain || signed != 1 {
				t.Fatalf("%s frame: version %d, %d plain and %d signed rows; want version %d, %d plain, 1 signed", f.Type, f.Version, rows, signed, v, plain)
			}
		}
		g.Broadcast(&fuseboxv1.GossipBatch{Rows: []*fuseboxv1.NodeWindow{row}})
		check(packetFrames(g, 2, 64<<10)[0], protocol.Version1, 1)
		check((*delegate)(g).LocalState(false), protocol.Version1, 1)
		if err := old.Leave(time.Second); err != nil {
			t.Fatal(err)
		}
		sstest.Eventually(t, 5*time.Second, "the new member sends version 2 again", func() bool { return g.SendVersion() == protocol.Version2 })
		row.Seq = 2
		g.Broadcast(&fuseboxv1.GossipBatch{Rows: []*fuseboxv1.NodeWindow{row}})
		check(packetFrames(g, 2, 64<<10)[0], protocol.Version2, 0)
		check((*delegate)(g).LocalState(false), protocol.Version2, 0)
		// The answer to a join goes to a node not known yet: version 1.
		check((*delegate)(g).LocalState(true), protocol.Version1, 1)
	})
}

// This node's rows go out signed together: one signature a frame of up to
// MaxBroadcastFrame bytes (a packet holds one or two), the newest row of
// each dependency only, once a packet.
func TestOwnRowsOneSignatureAPacket(t *testing.T) {
	// Alone, so that memberlist sends nothing by itself while the test
	// takes the broadcasts (frames at version 1: plain rows and the batch).
	cfg := signedConfig("a", newRecorder(), newKey(t))
	cfg.RowFanout = 0 // memberlist's packets (a round's packet is one frame)
	g := newMember(t, cfg)
	var rows []*fuseboxv1.NodeWindow
	for i := range 40 {
		rows = append(rows, benchRow(), &fuseboxv1.NodeWindow{Node: "a", Dependency: "dep-" + strconv.Itoa(i), Seq: uint64(i + 1),
			Counts: &fuseboxv1.Counts{FirstAttempts: 10, Successes: 10}})
		rows[len(rows)-2].Node, rows[len(rows)-2].Dependency, rows[len(rows)-2].Seq = "a", "dep-"+strconv.Itoa(i), uint64(i) // superseded
	}
	g.Broadcast(&fuseboxv1.GossipBatch{Rows: rows})
	signedBefore := g.Stats().Signed
	msgs := (*delegate)(g).GetBroadcasts(2, 1400)
	total := 0
	seen := map[string]bool{}
	for i, m := range msgs {
		f, err := protocol.Codec{}.Decode(m)
		if err != nil {
			t.Fatal(err)
		}
		var batch fuseboxv1.RowBatch
		if len(f.Batch.GetSignedRows()) != 1 || proto.Unmarshal(f.Batch.GetSignedRows()[0].GetBody(), &batch) != nil {
			t.Fatalf("frame %d: %v, want one signed batch", i, f.Batch)
		}
		if len(m) > MaxBroadcastFrame || (i == 0 && len(batch.GetRows()) < 5) {
			t.Fatalf("frame %d: %d rows in %d bytes, want at most %d bytes and many rows", i, len(batch.GetRows()), len(m), MaxBroadcastFrame)
		}
		for _, r := range batch.GetRows() {
			if r.GetCounts().GetSuccesses() != 10 {
				t.Fatalf("a superseded row went out: %v", r)
			}
			if seen[r.GetDependency()] {
				t.Fatalf("the row of %s twice in one packet", r.GetDependency())
			}
			seen[r.GetDependency()] = true
		}
		total += len(batch.GetRows())
	}
	if total < 10 {
		t.Fatalf("one packet carried %d rows", total)
	}
	if used := len(msgs) * 2; used+totalLen(msgs) > 1400 {
		t.Fatalf("the frames take %d bytes of a 1400-byte packet", used+totalLen(msgs))
	}
	if signed := g.Stats().Signed - signedBefore; int(signed) != len(msgs) {
		t.Fatalf("%d signatures for %d frames of rows", signed, len(msgs))
	}
}

func totalLen(msgs [][]byte) (n int) {
	for _, m := range msgs {
		n += len(m)
	}
	return n
}

// A frame of a version this build does not speak is refused and counted
// by its version.
func TestUnknownVersionCounted(t *testing.T) {
	g := newMember(t, testConfig("n", RoleAgent, newRecorder()))
	frame := frameAt(t, protocol.MaxVersion, &fuseboxv1.GossipBatch{})
	frame[0] = protocol.MaxVersion + 1
	(*delegate)(g).NotifyMsg(frame)
	(*delegate)(g).MergeRemoteState(frame, false)
	st := g.Stats()
	if st.Dropped["unknown_version"] != 2 || st.UnknownVersions["3"] != 2 {
		t.Fatalf("dropped %v, by version %v; want 2 unknown_version, both of version 3", st.Dropped, st.UnknownVersions)
	}
}

// A memo answers a check of an item that passed before, and only of that
// item: another body, signature, key or context under the same signature
// is checked, and fails, however often the original passed.
func TestVerifyMemo(t *testing.T) {
	key, other := newKey(t), newKey(t)
	pub, otherPub := key.Public().(ed25519.PublicKey), other.Public().(ed25519.PublicKey)
	body, _ := proto.Marshal(&fuseboxv1.RowBatch{Rows: []*fuseboxv1.NodeWindow{benchRow()}})
	env := sign(key, rowOpts, body)
	memo := NewVerifyMemo()
	for range 3 {
		if !verify(pub, rowOpts, env, memo) {
			t.Fatal("a good item failed its check")
		}
	}
	if memo.Hits() != 2 {
		t.Fatalf("memo hits = %d, want 2 (the first check computes)", memo.Hits())
	}
	forged := slices.Clone(body)
	forged[len(forged)-1] ^= 1
	badSig := slices.Clone(env.GetSignature())
	badSig[0] ^= 1
	for name, c := range map[string]struct {
		pub  ed25519.PublicKey
		opts *ed25519.Options
		it   *fuseboxv1.SignedItem
	}{
		"other body":      {pub, rowOpts, &fuseboxv1.SignedItem{Body: forged, Signature: env.GetSignature()}},
		"other signature": {pub, rowOpts, &fuseboxv1.SignedItem{Body: body, Signature: badSig}},
		"other key":       {otherPub, rowOpts, env},
		"other context":   {pub, recordOpts, env},
	} {
		for range 2 {
			if verify(c.pub, c.opts, c.it, memo) {
				t.Fatalf("%s: passed with the original in the memo", name)
			}
		}
	}
	if memo.Hits() != 2 {
		t.Fatalf("memo hits = %d after the forgeries, want still 2", memo.Hits())
	}
}

// The memo keeps two generations of maxMemo keys: a pass is remembered
// for at least maxMemo further passes, and the memo never holds more
// than twice that.
func TestVerifyMemoBounded(t *testing.T) {
	memo := NewVerifyMemo()
	key := func(i int) (k [32]byte) {
		binary.BigEndian.PutUint64(k[:], uint64(i))
		return k
	}
	for i := range maxMemo + 1 {
		memo.add(key(i))
	}
	if !memo.has(key(0)) {
		t.Fatal("the first pass was forgotten after maxMemo more")
	}
	for i := range maxMemo {
		memo.add(key(maxMemo + 1 + i))
	}
	if memo.has(key(0)) {
		t.Fatal("the first pass is still there after 2 × maxMemo more")
	}
	if n := len(memo.cur) + len(memo.prev); n > 2*maxMemo {
		t.Fatalf("memo holds %d keys, want at most %d", n, 2*maxMemo)
	}
}

func BenchmarkSignRow(b *testing.B) {
	key := newKeyB(b)
	body, _ := proto.Marshal(&fuseboxv1.RowBatch{Rows: []*fuseboxv1.NodeWindow{benchRow()}})
	b.ReportAllocs()
	b.SetBytes(int64(len(body)))
	for b.Loop() {
		sign(key, rowOpts, body)
	}
}

func BenchmarkVerifyRow(b *testing.B) {
	key := newKeyB(b)
	body, _ := proto.Marshal(&fuseboxv1.RowBatch{Rows: []*fuseboxv1.NodeWindow{benchRow()}})
	env := sign(key, rowOpts, body)
	pub := key.Public().(ed25519.PublicKey)
	b.ReportAllocs()
	for b.Loop() {
		if !verify(pub, rowOpts, env, nil) {
			b.Fatal("verify failed")
		}
	}
}

// benchRow is a busy dependency's row as an agent sends it.
func benchRow() *fuseboxv1.NodeWindow {
	return &fuseboxv1.NodeWindow{Node: "agent-17", Zone: "eu-1a", Dependency: "shipping-api", Seq: 1_764_633_600_000_000_123,
		Generation: 3, Counts: &fuseboxv1.Counts{FirstAttempts: 1200, Retries: 40, Successes: 1180, Failures: 60, SlowCalls: 4},
		RecentSuccesses: []uint64{12, 11, 25, 48, 95, 190, 380}, RecentFailures: []uint64{0, 1, 0, 2, 4, 9, 19}, InFlight: 7,
		Cumulative:            &fuseboxv1.Counts{FirstAttempts: 8_640_000, Retries: 43_000, Successes: 8_596_000, Failures: 87_000, SlowCalls: 9_000},
		CumulativeSinceUnixMs: 1_764_547_200_000, CumulativeAgeMs: 86_400_000}
}

func newKeyB(b *testing.B) ed25519.PrivateKey {
	_, k, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		b.Fatal(err)
	}
	return k
}
