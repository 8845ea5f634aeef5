package gossip

import (
	"bytes"
	"encoding/base64"
	"encoding/binary"
	"errors"
	"io"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/hashicorp/memberlist"
	"go.uber.org/goleak"

	"github.com/fusebox-dev/fusebox/protocol"
	"github.com/fusebox-dev/fusebox/protocol/convert"
	"github.com/fusebox-dev/fusebox/protocol/fuseboxv1"
	"github.com/fusebox-dev/fusebox/protocol/gossip/gossiptest"
	"github.com/fusebox-dev/fusebox/sharedstate"
	"github.com/fusebox-dev/fusebox/sharedstate/secretfile"
	"github.com/fusebox-dev/fusebox/sharedstate/sstest"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

// recorder is a Handler that keeps what it hears and refuses what does not
// convert to a valid row or record (as the agent's handler does).
type recorder struct {
	mu      sync.Mutex
	rows    map[string]uint64 // node/dependency -> seq
	calls   map[string]uint64 // node/dependency -> cumulative first attempts
	records map[string]uint64 // dependency -> generation
	state   *fuseboxv1.PushPullState
}

func newRecorder() *recorder {
	return &recorder{rows: map[string]uint64{}, calls: map[string]uint64{}, records: map[string]uint64{}}
}

func (r *recorder) ApplyBatch(b *fuseboxv1.GossipBatch) (*fuseboxv1.GossipBatch, int) {
	r.mu.Lock()
	defer r.mu.Unlock()
	refused := 0
	for _, w := range b.GetRows() {
		if convert.RowFromProto(w).Validate() != nil {
			refused++
			continue
		}
		r.rows[w.GetNode()+"/"+w.GetDependency()] = w.GetSeq()
		r.calls[w.GetNode()+"/"+w.GetDependency()] = w.GetCumulative().GetFirstAttempts()
	}
	for _, m := range b.GetRecords() {
		rec, ok := convert.RecordFromProto(m)
		if !ok || rec.Validate() != nil {
			refused++
			continue
		}
		r.records[m.GetDependency()] = max(r.records[m.GetDependency()], m.GetGeneration())
	}
	return nil, refused
}

func (r *recorder) ApplyState(s *fuseboxv1.PushPullState, join bool) (*fuseboxv1.GossipBatch, int) {
	return r.ApplyBatch(&fuseboxv1.GossipBatch{Rows: s.GetRows(), Records: s.GetRecords()})
}

func (r *recorder) LocalState(bool) *fuseboxv1.PushPullState {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.state
}

func (r *recorder) seen() (rows, records int) {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.rows), len(r.records)
}

func testConfig(name string, role Role, h Handler) Config {
	cfg := DefaultConfig()
	cfg.Name = name
	cfg.BindAddr = "127.0.0.1:0"
	cfg.Meta = NodeMeta{Role: role, Zone: "z1", Software: "test"}
	cfg.Handler = h
	cfg.GossipInterval = 50 * time.Millisecond
	cfg.ProbeInterval = 200 * time.Millisecond
	cfg.PushPullInterval = time.Second
	return cfg
}

func newMember(t *testing.T, cfg Config) *Gossip {
	t.Helper()
	g, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { g.Close(time.Second) })
	return g
}

func TestConfigValidate(t *testing.T) {
	if err := testConfig("n", RoleAgent, newRecorder()).Validate(); err != nil {
		t.Fatalf("a good config refused: %v", err)
	}
	// Every violation is named at once; none is replaced by a default.
	bad := Config{
		BindAddr:       "nope",
		AdvertiseAddr:  "10.0.0.1:http",
		Meta:           NodeMeta{Zone: strings.Repeat("z", 600)},
		GossipInterval: -time.Second,
		RetransmitMult: 0,
		GossipNodes:    65,
	}
	err := bad.Validate()
	if err == nil {
		t.Fatal("a bad config accepted")
	}
	for _, want := range []string{"Name", `BindAddr: must be host:port, got "nope"`, "AdvertiseAddr: port",
		"Meta.Role", "Meta: gossip: node metadata too large", "Handler", "GossipInterval: must be at least 1ms, got -1s",
		"PushPullInterval", "ProbeInterval", "ProbeTimeout", "TCPTimeout", "DeadNodeReclaimTime", "RetransmitMult: must be at least 1, got 0",
		"GossipNodes: must be in 1..64, got 65"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("Validate error does not name %q:\n%v", want, err)
		}
	}
	if _, nerr := New(bad); nerr == nil || nerr.Error() != err.Error() {
		t.Errorf("New(bad) = %v, want the Validate error", nerr)
	}
	// DefaultConfig alone lacks exactly the required fields.
	err = DefaultConfig().Validate()
	for _, f := range []string{"Name", "BindAddr", "Meta.Role", "Handler"} {
		if err == nil || !strings.Contains(err.Error(), f+":") {
			t.Errorf("DefaultConfig().Validate() = %v, want %s named", err, f)
		}
	}
	if err != nil && (strings.Contains(err.Error(), "Interval") || strings.Contains(err.Error(), "Time")) {
		t.Errorf("DefaultConfig's timings refused: %v", err)
	}
}

// Two agents and an observer: broadcasts and direct sends reach the others,
// push-pull carries state to a late joiner, metadata and membership are
// seen by all, and only agents count as agents.
func TestMembersBroadcastAndPushPull(t *testing.T) {
	ha, hb, ho := newRecorder(), newRecorder(), newRecorder()
	ca := testConfig("a", RoleAgent, ha)
	ca.Relay = true
	a := newMember(t, ca)
	b := newMember(t, testConfig("b", RoleAgent, hb))
	if _, err := b.Join([]string{a.Addr()}); err != nil {
		t.Fatal(err)
	}
	sstest.Eventually(t, 10*time.Second, "a and b see each other", func() bool {
		return len(a.Members()) == 2 && len(b.Members()) == 2
	})

	row := convert.RowToProto(sharedstate.NodeWindow{Node: "a", Zone: "z1", Dependency: "dep", Seq: 3,
		Counts:     sharedstate.Counts{FirstAttempts: 1, Successes: 1},
		Cumulative: sharedstate.Cumulative{Counts: sharedstate.Counts{FirstAttempts: 1234, Successes: 1234}, Since: 1_790_000_000_000, At: 1_790_000_000_100}})
	a.Broadcast(&fuseboxv1.GossipBatch{Rows: []*fuseboxv1.NodeWindow{row}})
	a.SendDirect([]*fuseboxv1.BreakerRecord{convert.RecordToProto(sharedstate.BreakerRecord{Dependency: "dep",
		Zone: "z1", Generation: 1, State: sharedstate.Open, OpenCount: 1, Origin: "a"})})
	sstest.Eventually(t, 10*time.Second, "b hears a's row and record", func() bool {
		rows, recs := hb.seen()
		return rows == 1 && recs == 1
	})
	hb.mu.Lock()
	if n := hb.calls["a/dep"]; n != 1234 {
		t.Errorf("b reads a's cumulative first attempts as %d, want 1234", n)
	}
	hb.mu.Unlock()

	// A late observer learns b's state by push-pull on join.
	hb.mu.Lock()
	hb.state = &fuseboxv1.PushPullState{Node: "b", Records: []*fuseboxv1.BreakerRecord{convert.RecordToProto(
		sharedstate.BreakerRecord{Dependency: "other", Zone: "z1", Generation: 2, State: sharedstate.Open, OpenCount: 1, Origin: "b"})}}
	hb.mu.Unlock()
	obs := newMember(t, testConfig("obs", RoleObserver, ho))
	if _, err := obs.Join([]string{b.Addr()}); err != nil {
		t.Fatal(err)
	}
	sstest.Eventually(t, 10*time.Second, "the observer has b's push-pull record", func() bool {
		ho.mu.Lock()
		defer ho.mu.Unlock()
		return ho.records["other"] == 2
	})
	sstest.Eventually(t, 10*time.Second, "everyone sees three members", func() bool {
		return len(a.Members()) == 3 && len(b.Members()) == 3 && len(obs.Members()) == 3
	})
	for _, g := range []*Gossip{a, b, obs} {
		if n := g.NumAgents(); n != 2 {
			t.Errorf("%s counts %d agents, want 2 (the observer is not one)", g.Name(), n)
		}
	}
	for _, m := range a.Members() {
		if m.Name == "obs" && (m.Meta.Role != RoleObserver || m.Meta.Software != "test" || m.State != "alive") {
			t.Errorf("a sees the observer as %+v", m)
		}
	}
	s := b.Stats()
	if s.MsgsIn["message"] == 0 || s.MsgsOut["push_pull"] == 0 {
		t.Errorf("b's stats miss traffic: %+v", s)
	}

	// SetMeta reaches the others.
	if err := b.SetMeta(NodeMeta{Role: RoleAgent, Zone: "z2"}, time.Second); err != nil {
		t.Fatal(err)
	}
	sstest.Eventually(t, 10*time.Second, "a sees b's new zone", func() bool {
		for _, m := range a.Members() {
			if m.Name == "b" {
				return m.Meta.Zone == "z2"
			}
		}
		return false
	})
	// A member that leaves is gone from the others' tables.
	if err := obs.Close(time.Second); err != nil {
		t.Fatal(err)
	}
	if err := obs.Close(time.Second); err != nil {
		t.Fatalf("second Close: %v", err)
	}
	sstest.Eventually(t, 10*time.Second, "a forgets the observer", func() bool { return len(a.Members()) == 2 })
}

func TestKeyringMismatchRefusesJoin(t *testing.T) {
	k1, err := ParseKeyring([]byte(base64.StdEncoding.EncodeToString([]byte("0123456789abcdef"))))
	if err != nil {
		t.Fatal(err)
	}
	k2, err := ParseKeyring([]byte(base64.StdEncoding.EncodeToString([]byte("fedcba9876543210"))))
	if err != nil {
		t.Fatal(err)
	}
	ca := testConfig("a", RoleAgent, newRecorder())
	ca.Keyring = k1
	a := newMember(t, ca)
	cb := testConfig("b", RoleAgent, newRecorder())
	cb.Keyring = k2
	b := newMember(t, cb)
	if _, err := b.Join([]string{a.Addr()}); err == nil || !strings.Contains(err.Error(), "keyring") {
		t.Fatalf("join with another key: %v, want an error with a keyring hint", err)
	}
}

func TestApplyKeyring(t *testing.T) {
	key := func(s string) string { return base64.StdEncoding.EncodeToString([]byte(s)) }
	parse := func(lines ...string) *memberlist.Keyring {
		kr, err := ParseKeyring([]byte(strings.Join(lines, "\n")))
		if err != nil {
			t.Fatal(err)
		}
		return kr
	}
	old, next := key("0123456789abcdef"), key("fedcba9876543210")
	kr := parse(old)
	steps := []struct {
		name    string
		file    *memberlist.Keyring
		changed bool
	}{
		{"same file", parse(old), false},
		{"new key second", parse(old, next), true},
		{"again", parse(old, next), false},
		{"new key first", parse(next, old), true},
		{"old key dropped", parse(next), true},
	}
	for _, s := range steps {
		changed, err := ApplyKeyring(kr, s.file)
		if err != nil || changed != s.changed {
			t.Fatalf("%s: changed %v, err %v; want changed %v", s.name, changed, err, s.changed)
		}
		if string(kr.GetPrimaryKey()) != string(s.file.GetPrimaryKey()) || len(kr.GetKeys()) != len(s.file.GetKeys()) {
			t.Fatalf("%s: keyring holds %d keys, primary %q", s.name, len(kr.GetKeys()), kr.GetPrimaryKey())
		}
	}
}

func droppedTotal(g *Gossip) uint64 {
	var n uint64
	for _, v := range g.Stats().Dropped {
		n += v
	}
	return n
}

// Fuzzed payloads into the receive paths (NotifyMsg and MergeRemoteState)
// never panic; whatever does not decode, or decodes to the wrong frame
// type, or carries items the handler refuses, is counted as dropped. The
// seeds run in every normal test run; `go test -fuzz FuzzReceive`
// explores further.
func FuzzReceive(f *testing.F) {
	var codec protocol.Codec
	for _, seed := range gossiptest.FuzzSeeds() {
		f.Add(seed)
	}
	g, err := New(testConfig("fuzz", RoleAgent, newRecorder()))
	if err != nil {
		f.Fatal(err)
	}
	f.Cleanup(func() { g.Close(0) })
	d := (*delegate)(g)

	f.Fuzz(func(t *testing.T, data []byte) {
		_, decErr := codec.Decode(data)
		before := droppedTotal(g)
		in := append([]byte(nil), data...)
		d.NotifyMsg(in)
		clear(in) // memberlist reuses its buffers: nothing may be kept
		afterMsg := droppedTotal(g)
		if decErr != nil && afterMsg == before {
			t.Fatalf("NotifyMsg: undecodable frame (%v) not counted as dropped", decErr)
		}
		d.MergeRemoteState(append([]byte(nil), data...), false)
		if decErr != nil && len(data) > 0 && droppedTotal(g) == afterMsg {
			t.Fatalf("MergeRemoteState: undecodable state (%v) not counted as dropped", decErr)
		}
	})
}

func TestParseKeyring(t *testing.T) {
	good := base64.StdEncoding.EncodeToString([]byte("0123456789abcdef"))
	tests := []struct {
		name, data, wantErr string
		keys                int
	}{
		{name: "one key", data: good + "\n", keys: 1},
		{name: "comments and blanks", data: "# c\n\n" + good + "\n  \n" + base64.StdEncoding.EncodeToString([]byte("0123456789abcdef01234567")), keys: 2},
		{name: "empty", data: "# nothing\n", wantErr: "no keys"},
		{name: "not base64", data: "!!!", wantErr: "line 1: not base64"},
		{name: "bad length", data: base64.StdEncoding.EncodeToString([]byte("short")), wantErr: "line 1"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			kr, err := ParseKeyring([]byte(tt.data))
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("err = %v, want %q", err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if n := len(kr.GetKeys()); n != tt.keys {
				t.Fatalf("%d keys, want %d", n, tt.keys)
			}
		})
	}
}

func TestLoadKeyringFileRefusesExposedFile(t *testing.T) {
	p := filepath.Join(t.TempDir(), "keyring")
	if err := os.WriteFile(p, []byte(base64.StdEncoding.EncodeToString([]byte("0123456789abcdef"))+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := LoadKeyringFile(p); err != nil {
		t.Fatalf("0600 keyring: %v", err)
	}
	if err := os.Chmod(p, 0o640); err != nil {
		t.Fatal(err)
	}
	_, err := LoadKeyringFile(p)
	if !errors.Is(err, secretfile.ErrExposed) || !errors.Is(err, ErrKeyring) || !strings.Contains(err.Error(), p) {
		t.Fatalf("0640 keyring: err = %v, want a keyring error wrapping secretfile.ErrExposed naming the file", err)
	}
}

func TestNodeMetaRoundTrip(t *testing.T) {
	m := NodeMeta{Role: RoleObserver, Zone: "eu-1a", Software: "9.9.9", GRPCAddr: "127.0.0.1:7950", HTTPAddr: "127.0.0.1:7951"}
	b, err := m.Encode()
	if err != nil {
		t.Fatal(err)
	}
	got, err := DecodeNodeMeta(b)
	m.Version = MetaVersion
	if err != nil || got != m {
		t.Fatalf("round trip: %+v, %v; want %+v", got, err, m)
	}
	if got.IsAgent() {
		t.Error("an observer counts as an agent")
	}
	// Newer encoders may add fields.
	got, err = DecodeNodeMeta([]byte(`{"v":2,"role":"agent","zone":"z","future":true}`))
	if err != nil || !got.IsAgent() || got.Zone != "z" {
		t.Fatalf("forward compatible decode: %+v, %v", got, err)
	}
	for _, bad := range []string{`{"role":"agent"}`, `not json`} {
		if _, err := DecodeNodeMeta([]byte(bad)); err == nil {
			t.Errorf("DecodeNodeMeta(%q) accepted", bad)
		}
	}
	if _, err := (NodeMeta{Role: RoleAgent, Zone: strings.Repeat("z", 600)}).Encode(); err == nil {
		t.Error("oversized metadata encoded")
	}
}

// Items the handler refuses count as dropped with reason invalid_item; a
// frame of the wrong type on a path as unexpected_type.
func TestRefusedItemsCounted(t *testing.T) {
	var codec protocol.Codec
	invalid, err := codec.EncodeBatch(&fuseboxv1.GossipBatch{Rows: []*fuseboxv1.NodeWindow{{Node: "n", Dependency: "bad name"}},
		Records: []*fuseboxv1.BreakerRecord{{Dependency: "y", Origin: "n", State: fuseboxv1.BreakerState_BREAKER_STATE_HALF_OPEN}}})
	if err != nil {
		t.Fatal(err)
	}
	g := newMember(t, testConfig("n", RoleAgent, newRecorder()))
	(*delegate)(g).NotifyMsg(invalid)
	(*delegate)(g).MergeRemoteState(invalid, false)
	d := g.Stats().Dropped
	if d["invalid_item"] != 2 || d["unexpected_type"] != 1 {
		t.Fatalf("dropped = %v, want 2 invalid_item and 1 unexpected_type", d)
	}
}

func TestDropReasonsCount(t *testing.T) {
	if len(DropReasons) != numDropReasons {
		t.Fatalf("%d DropReasons, numDropReasons = %d", len(DropReasons), numDropReasons)
	}
	seen := map[string]bool{}
	for _, r := range DropReasons {
		if seen[r] {
			t.Fatalf("drop reason %q twice", r)
		}
		seen[r] = true
	}
}

// Only members speak: rows and records that speak for a name that is not an
// alive member, or for an observer, never reach the handler; push-pull state
// is taken only from an alive agent and only its own rows.
func TestOnlyMembersSpeak(t *testing.T) {
	rec := newRecorder()
	g := newMember(t, testConfig("a1", RoleAgent, rec))
	obsRec := newRecorder()
	obs := newMember(t, testConfig("obs", RoleObserver, obsRec))
	if _, err := obs.Join([]string{g.Addr()}); err != nil {
		t.Fatal(err)
	}
	sstest.Eventually(t, 5*time.Second, "observer joined", func() bool { return len(g.Members()) == 2 })

	row := func(node, dep string) *fuseboxv1.NodeWindow {
		return &fuseboxv1.NodeWindow{Node: node, Dependency: dep, Seq: 1, Counts: &fuseboxv1.Counts{Successes: 1}}
	}
	record := func(origin, dep string) *fuseboxv1.BreakerRecord {
		return &fuseboxv1.BreakerRecord{Dependency: dep, Origin: origin, Generation: 1, State: fuseboxv1.BreakerState_BREAKER_STATE_OPEN}
	}
	var codec protocol.Codec
	frame, err := codec.EncodeBatch(&fuseboxv1.GossipBatch{
		Rows:    []*fuseboxv1.NodeWindow{row("stranger", "d1"), row("a1", "d2"), row("obs", "d3")},
		Records: []*fuseboxv1.BreakerRecord{record("stranger", "d4"), record("obs", "d5"), record("a1", "d6")},
	})
	if err != nil {
		t.Fatal(err)
	}
	(*delegate)(g).NotifyMsg(frame)
	rec.mu.Lock()
	if len(rec.rows) != 1 || rec.rows["a1/d2"] != 1 || len(rec.records) != 1 || rec.records["d6"] != 1 {
		t.Errorf("handler saw rows %v records %v, want only a1's row d2 and record d6", rec.rows, rec.records)
	}
	rec.mu.Unlock()
	d := g.Stats().Dropped
	if d["not_member"] != 2 || d["not_agent"] != 2 {
		t.Errorf("dropped = %v, want 2 not_member and 2 not_agent", d)
	}

	// Push-pull: a stranger's state is refused whole; a member's state keeps
	// its own rows and the records it holds whose origin's key is known (it
	// vouches for them; a proposer may be gone): not one of a node never
	// heard of.
	st := func(sender string) []byte {
		f, err := codec.EncodePushPull(&fuseboxv1.PushPullState{Node: sender,
			Rows:    []*fuseboxv1.NodeWindow{row(sender, "p1"), row("someone-else", "p2")},
			Records: []*fuseboxv1.BreakerRecord{record("long-gone", "p3")}})
		if err != nil {
			t.Fatal(err)
		}
		return f
	}
	(*delegate)(g).MergeRemoteState(st("stranger"), false)
	(*delegate)(g).MergeRemoteState(st("obs"), false)
	rec.mu.Lock()
	if len(rec.rows) != 1 || len(rec.records) != 1 {
		t.Errorf("state of a stranger or an observer applied: rows %v records %v", rec.rows, rec.records)
	}
	rec.mu.Unlock()
	(*delegate)(g).MergeRemoteState(st("a1"), false)
	rec.mu.Lock()
	if rec.rows["a1/p1"] != 1 || rec.rows["someone-else/p2"] != 0 || rec.records["p3"] != 0 {
		t.Errorf("member's state: rows %v records %v, want its own row p1 only", rec.rows, rec.records)
	}
	rec.mu.Unlock()
	d = g.Stats().Dropped
	if d["not_member"] != 2+3 || d["not_agent"] != 2+3 || d["row_not_sender"] != 1 || d["unknown_key"] != 1 {
		t.Errorf("dropped = %v, want 5 not_member, 5 not_agent, 1 row_not_sender, 1 unknown_key", d)
	}
}

// A stranger's undecryptable packets are logged once a minute per sender.
func TestRateLog(t *testing.T) {
	now := time.Unix(1000, 0)
	r := rateLog{now: func() time.Time { return now }}
	if !r.allow("a") || r.allow("a") || !r.allow("b") {
		t.Fatal("first line per key must pass, the second within a minute must not")
	}
	now = now.Add(61 * time.Second)
	if !r.allow("a") {
		t.Fatal("a minute later the key logs again")
	}
	for i := range 5000 {
		r.allow(strconv.Itoa(i))
	}
	if len(r.last) > maxRateLogKeys+1 {
		t.Fatalf("rate log holds %d keys, bound %d", len(r.last), maxRateLogKeys+1)
	}
	if from, ok := undecryptableSender("failed to receive: no installed keys could decrypt the message from=127.0.0.1:39720"); !ok || from != "127.0.0.1:39720" {
		t.Fatalf("sender = %q, %v", from, ok)
	}
}

// A stranger (a memberlist that never joined) sends a user message whose
// record names a real member as its origin: the guard drops it by source
// address before the delegate sees it. A member's own direct send passes.
func TestStrangerUserMessageDropped(t *testing.T) {
	rec := newRecorder()
	g := newMember(t, testConfig("a1", RoleAgent, rec))
	peer := newMember(t, testConfig("a2", RoleAgent, newRecorder()))
	if _, err := peer.Join([]string{g.Addr()}); err != nil {
		t.Fatal(err)
	}
	sstest.Eventually(t, 5*time.Second, "a2 joined", func() bool { return len(g.Members()) == 2 })

	mc := memberlist.DefaultLocalConfig()
	mc.Name, mc.BindAddr, mc.BindPort = "stranger", "127.0.0.1", 0
	mc.LogOutput = io.Discard
	stranger, err := memberlist.Create(mc)
	if err != nil {
		t.Fatal(err)
	}
	defer stranger.Shutdown()
	var codec protocol.Codec
	frame, err := codec.EncodeBatch(&fuseboxv1.GossipBatch{Records: []*fuseboxv1.BreakerRecord{{
		Dependency: "forged", Generation: 2, State: fuseboxv1.BreakerState_BREAKER_STATE_OPEN, Origin: "a2"}}})
	if err != nil {
		t.Fatal(err)
	}
	if err := stranger.SendToAddress(memberlist.Address{Addr: g.Addr(), Name: "a1"}, frame); err != nil {
		t.Fatal(err)
	}
	sstest.Eventually(t, 5*time.Second, "the stranger's message counted as not_member", func() bool {
		return g.Stats().Dropped["not_member"] >= 1
	})
	if _, recs := rec.seen(); recs != 0 {
		t.Fatalf("the handler saw %d records from a stranger", recs)
	}
	// The same frame from the member itself arrives.
	peer.SendDirect([]*fuseboxv1.BreakerRecord{{Dependency: "real", Generation: 1, State: fuseboxv1.BreakerState_BREAKER_STATE_OPEN, Origin: "a2"}})
	sstest.Eventually(t, 5*time.Second, "the member's direct send applied", func() bool { _, n := rec.seen(); return n == 1 })
}

func TestStripUserMessages(t *testing.T) {
	compound := func(parts ...[]byte) []byte {
		out := []byte{mlCompoundMsg, byte(len(parts))}
		for _, p := range parts {
			out = binary.BigEndian.AppendUint16(out, uint16(len(p)))
		}
		for _, p := range parts {
			out = append(out, p...)
		}
		return out
	}
	ping := []byte{0, 1, 2, 3}
	user := []byte{mlUserMsg, 9, 9}
	for _, tc := range []struct {
		name     string
		in, want []byte
		stripped int
	}{
		{"ping", ping, ping, 0},
		{"user", user, nil, 1},
		{"compressed", []byte{mlCompressMsg, 1}, nil, 1},
		{"crc then user", append([]byte{mlHasCrcMsg, 1, 2, 3, 4}, user...), nil, 1},
		{"compound without user", compound(ping, ping), compound(ping, ping), 0},
		{"compound with user", compound(ping, user, ping), compound(ping, ping), 1},
		{"compound of users", compound(user, user), nil, 2},
		{"truncated compound", []byte{mlCompoundMsg, 2, 0, 9}, []byte{mlCompoundMsg, 2, 0, 9}, 0},
		{"lying length", []byte{mlCompoundMsg, 1, 0, 9, 1}, nil, 1},
		{"empty", []byte{}, []byte{}, 0},
	} {
		got, n := stripUserMessages(tc.in)
		if n != tc.stripped || !bytes.Equal(got, tc.want) || (tc.want == nil) != (got == nil) {
			t.Errorf("%s: got %v (%d stripped), want %v (%d)", tc.name, got, n, tc.want, tc.stripped)
		}
	}
}

// New on a taken port returns the bind's *net.OpError (wrapped), not only
// memberlist's words, so a daemon can name the flag of the address: TCP or
// UDP taken, with gossip's own transport and with a keyring (memberlist's).
func TestNewOnBusyPort(t *testing.T) {
	k, err := ParseKeyring([]byte(base64.StdEncoding.EncodeToString([]byte("0123456789abcdef"))))
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name    string
		network string
		keyring *memberlist.Keyring
	}{{"tcp", "tcp", nil}, {"udp", "udp", nil}, {"tcp with keyring", "tcp", k}, {"udp with keyring", "udp", k}} {
		t.Run(tc.name, func(t *testing.T) {
			busy := sstest.BusyUDP
			if tc.network == "tcp" {
				busy = sstest.BusyTCP
			}
			addr := busy(t)
			cfg := testConfig("a", RoleAgent, newRecorder())
			cfg.BindAddr = addr
			cfg.Keyring = tc.keyring
			g, err := New(cfg)
			if err == nil {
				_ = g.Close(0)
				t.Fatalf("New on busy %s port %s succeeded", tc.network, addr)
			}
			var op *net.OpError
			if !errors.As(err, &op) || op.Op != "listen" || !errors.Is(err, syscall.EADDRINUSE) {
				t.Errorf("New on busy %s port: %v (%T), want a listen *net.OpError", tc.network, err, err)
			}
		})
	}
}

// packetFrames returns the frames of the next packet g gossips, in either
// of the ways it gossips: memberlist's packets (GetBroadcasts) with
// RowFanout 0, else the one frame of a broadcast round's packet.
func packetFrames(g *Gossip, overhead, limit int) [][]byte {
	if g.cfg.RowFanout == 0 {
		return (*delegate)(g).GetBroadcasts(overhead, limit)
	}
	if f := g.roundFrame(); f != nil {
		return [][]byte{f}
	}
	return nil
}

// bothPaths runs f with records and rows in memberlist's packets
// (RowFanout 0) and in broadcast rounds (the default).
func bothPaths(t *testing.T, f func(t *testing.T, fanout int)) {
	for _, fanout := range []int{0, DefaultRowFanout} {
		t.Run("fanout="+strconv.Itoa(fanout), func(t *testing.T) { f(t, fanout) })
	}
}

// A record withdrawn with Forget (its dependency was evicted) is never
// broadcast, while the others queued beside it still are.
func TestForgetWithdrawsQueuedRecord(t *testing.T) {
	bothPaths(t, func(t *testing.T, fanout int) {
		cfg := testConfig("n", RoleAgent, newRecorder())
		cfg.RowFanout = fanout
		g := newMember(t, cfg)
		rec := func(dep string) *fuseboxv1.BreakerRecord {
			return &fuseboxv1.BreakerRecord{Dependency: dep, Origin: "n", Generation: 2,
				State: fuseboxv1.BreakerState_BREAKER_STATE_CLOSED}
		}
		g.Broadcast(&fuseboxv1.GossipBatch{Records: []*fuseboxv1.BreakerRecord{rec("forgotten-dep"), rec("kept-dep")}})
		g.Forget("forgotten-dep")
		var kept int
		for range 50 { // past every retransmit
			for _, f := range packetFrames(g, 3, 1400) {
				if len(f) == 0 {
					t.Fatal("an empty broadcast frame was handed to memberlist")
				}
				if bytes.Contains(f, []byte("forgotten-dep")) {
					t.Fatal("the forgotten dependency's record was broadcast")
				}
				if bytes.Contains(f, []byte("kept-dep")) {
					kept++
				}
			}
		}
		if kept == 0 {
			t.Fatal("the other record was never broadcast")
		}
	})
}

// Items about a member that left a moment ago (its rows still travel in
// relays' queues when a fleet stops, its last packets are on their way)
// are dropped as not_member like a stranger's, but logged at debug level:
// only the stranger's is a warning.
func TestDepartedMemberDropsAreNotWarnings(t *testing.T) {
	var log sstest.Buffer
	cfg := testConfig("a1", RoleAgent, newRecorder())
	cfg.Logger = slog.New(slog.NewTextHandler(&log, &slog.HandlerOptions{Level: slog.LevelDebug}))
	g := newMember(t, cfg)
	peer, err := New(testConfig("a2", RoleAgent, newRecorder()))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := peer.Join([]string{g.Addr()}); err != nil {
		t.Fatal(err)
	}
	sstest.Eventually(t, 5*time.Second, "a2 joined", func() bool { return len(g.Members()) == 2 })
	peerAddr := peer.Addr()
	g.membersMu.Lock()
	g.settling["a2"] = time.Now().Add(-2 * settleTime) // joined long ago: the leave is what counts
	g.membersMu.Unlock()
	if err := peer.Close(time.Second); err != nil {
		t.Fatal(err)
	}
	sstest.Eventually(t, 5*time.Second, "a2 left", func() bool { return len(g.Members()) == 1 })

	var codec protocol.Codec
	frame := func(node string) []byte {
		f, err := codec.EncodeBatch(&fuseboxv1.GossipBatch{Rows: []*fuseboxv1.NodeWindow{
			{Node: node, Dependency: "d1", Seq: 1, Counts: &fuseboxv1.Counts{Successes: 1}}}})
		if err != nil {
			t.Fatal(err)
		}
		return f
	}
	(*delegate)(g).NotifyMsg(frame("a2"))
	if d := g.Stats().Dropped["not_member"]; d != 1 {
		t.Fatalf("a departed member's row: not_member = %d, want 1", d)
	}
	for _, l := range strings.Split(log.String(), "\n") {
		if strings.Contains(l, "dropped") && strings.Contains(l, "node=a2") && !strings.Contains(l, "level=DEBUG") {
			t.Errorf("a departed member's row is logged above debug: %s", l)
		}
	}
	if !strings.Contains(log.String(), "level=DEBUG msg=\"gossip items dropped about a member that joined or left a moment ago") {
		t.Errorf("the departed member's row is not logged at debug:\n%s", log.String())
	}
	// A packet that was on its way from a2's address when it left.
	pc, err := net.ListenPacket("udp", peerAddr)
	if err != nil {
		t.Fatal(err)
	}
	defer pc.Close()
	to, err := net.ResolveUDPAddr("udp", g.Addr())
	if err != nil {
		t.Fatal(err)
	}
	if _, err := pc.WriteTo(append([]byte{mlUserMsg}, frame("a2")...), to); err != nil {
		t.Fatal(err)
	}
	sstest.Eventually(t, 5*time.Second, "the packet from a2's address counted as not_member", func() bool {
		return g.Stats().Dropped["not_member"] >= 2
	})
	for _, l := range strings.Split(log.String(), "\n") {
		if strings.Contains(l, "dropped") && strings.Contains(l, "from="+peerAddr) && !strings.Contains(l, "level=DEBUG") {
			t.Errorf("a packet from a departed member's address is logged above debug: %s", l)
		}
	}
	(*delegate)(g).NotifyMsg(frame("stranger"))
	if d := g.Stats().Dropped["not_member"]; d != 3 {
		t.Fatalf("a stranger's row: not_member = %d, want 3", d)
	}
	if !regexp.MustCompile(`level=WARN msg="gossip items dropped.*reason=not_member.*node=stranger`).MatchString(log.String()) {
		t.Errorf("a stranger's row is not a warning:\n%s", log.String())
	}
}

// memberlist's errors about its closed sockets while the Gossip closes (a
// probe in flight) are logged at debug level; the same line at any other
// time, and other errors, stay errors.
func TestClosingSocketErrorsAreDebug(t *testing.T) {
	var log sstest.Buffer
	var closing bool
	ml := newMemberlistLogger(slog.New(slog.NewTextHandler(&log, &slog.HandlerOptions{Level: slog.LevelDebug})), func() bool { return closing })
	const closed = "[ERR] memberlist: Failed to send UDP ping: write udp 127.0.0.1:1->127.0.0.1:2: use of closed network connection"
	ml.Print(closed)
	closing = true
	ml.Print(closed)
	ml.Print("[ERR] memberlist: Failed to send TCP ack: timeout")
	lines := strings.Split(strings.TrimSpace(log.String()), "\n")
	want := []string{"level=ERROR", "level=DEBUG", "level=ERROR"}
	if len(lines) != len(want) {
		t.Fatalf("log:\n%s\nwant %d lines", log.String(), len(want))
	}
	for i, l := range lines {
		if !strings.Contains(l, want[i]) {
			t.Errorf("line %d: %s, want %s", i, l, want[i])
		}
	}
}
