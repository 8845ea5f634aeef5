package gossip

import (
	"crypto/ed25519"
	"slices"
	"strconv"
	"time"

	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"

	"github.com/fusebox-dev/fusebox/protocol"
	"github.com/fusebox-dev/fusebox/protocol/fuseboxv1"
)

// Screener is implemented by a Handler that can tell cheaply whether an
// item would change nothing: a row whose seq is not above the one held for
// its node and dependency (or that the handler refuses as a replay), a
// record it holds already or that loses to the one it holds. The gossip
// layer asks before it verifies a signature, so that the copies epidemic
// gossip delivers cost no verification. Same concurrency contract as
// Handler.
type Screener interface {
	KnownRow(node, dependency string, seq uint64) bool
	KnownRecord(r *fuseboxv1.BreakerRecord) bool
}

// RowSource is implemented by a Handler that lists this node's current
// rows, those its push-pull state carries, without building the rest of
// that state: a member that comes back gets them (greetAll). Without it
// they are taken from LocalState. Same concurrency contract as Handler.
type RowSource interface {
	OwnRows() []*fuseboxv1.NodeWindow
}

// inbound is what a received frame holds for the handler: the items that
// passed membership and signature checks, and the envelopes they came in
// (relays forward those, unchanged).
type inbound struct {
	rows   []*fuseboxv1.NodeWindow
	recs   []*fuseboxv1.BreakerRecord
	rowEnv map[*fuseboxv1.NodeWindow]*fuseboxv1.SignedItem
	recEnv map[*fuseboxv1.BreakerRecord]*fuseboxv1.SignedItem
}

func (in *inbound) empty() bool { return len(in.rows) == 0 && len(in.recs) == 0 }

// keyOf returns the key node signs with and what is known of it: from the
// KeySource, else from the metadata of the member, or of a member that
// left within retiredKeyTTL (push-pull carries records whose proposer is
// gone).
func (g *Gossip) keyOf(node string) (ed25519.PublicKey, KeyStatus) {
	if g.cfg.Keys != nil {
		return g.cfg.Keys(node)
	}
	g.membersMu.Lock()
	m, ok := g.members[node]
	var pub ed25519.PublicKey
	if ok {
		pub = m.PublicKey
	} else if r, retired := g.retired[node]; retired {
		ok, pub = true, r.key
	}
	g.membersMu.Unlock()
	switch {
	case !ok:
		return nil, KeyUnknown
	case pub != nil:
		return pub, KeyKnown
	}
	return nil, KeyNone
}

// retiredKeyTTL is how long the key of a departed node stays known, so
// that records it proposed still verify when a peer's push-pull brings
// them.
const retiredKeyTTL = time.Hour

// maxRetired bounds the departed nodes whose keys are kept.
const maxRetired = 4096

type retiredKey struct {
	key ed25519.PublicKey
	at  time.Time
	// held is the newest signed row batch the departed member sent while
	// this node did not hold it alive, applied when it is back (holdBack).
	held *heldRows
}

// retire remembers a departed member's key. Caller holds membersMu.
func (g *Gossip) retire(m Member) {
	now := time.Now()
	if len(g.retired) >= maxRetired {
		for n, r := range g.retired {
			if now.Sub(r.at) > retiredKeyTTL || len(g.retired) >= maxRetired {
				delete(g.retired, n)
			}
		}
	}
	g.retired[m.Name] = retiredKey{key: m.PublicKey, at: now}
}

// admitItems checks the plain and the signed items of a frame: each must
// speak for an alive agent member (a row's node, a record's origin; in
// push-pull state, whose sender vouches for the records it holds, a
// record's origin need only have a known key, as its proposer may be gone); an
// item of an origin that has a key is taken only signed with it (a plain
// one is counted as "unsigned" unless a member of the previous release,
// which relays without signatures, is alive), one of an origin registered
// without a key (a build that does not sign) only plain;
// an origin whose key is unknown is dropped (and its key looked up by the
// KeySource). rowFilter, when set, refuses further rows (push-pull: only
// the sender's own). The plain copies a mixed fleet adds to version-1
// frames for 0.1.x (an item that also travels signed) are skipped without
// a count.
func (g *Gossip) admitItems(plainRows []*fuseboxv1.NodeWindow, plainRecs []*fuseboxv1.BreakerRecord,
	signedRows, signedRecs []*fuseboxv1.SignedItem, rowFilter func(*fuseboxv1.NodeWindow) bool) *inbound {
	in := &inbound{}
	hasSigned := len(signedRows)+len(signedRecs) > 0
	screen, _ := g.cfg.Handler.(Screener)
	pushPull := rowFilter != nil
	plain := func(who, dep, role string) bool {
		if pushPull && role == "origin" {
			// vouched for by the sender, as below
		} else if why := g.speaker(who); why != "" {
			g.dropAbout(who, why, 1, role, clip(who), "dependency", clip(dep))
			return false
		}
		switch _, st := g.keyOf(who); st {
		case KeyKnown:
			// Counted only where no member of the previous release is
			// alive: 0.1.x relays what it hears without the signatures.
			if !hasSigned && g.SendVersion() >= protocol.Version2 {
				g.Drop("unsigned", 1, role, clip(who), "dependency", clip(dep))
			}
			return false
		case KeyUnknown:
			g.dropAbout(who, "unknown_key", 1, role, clip(who), "dependency", clip(dep))
			return false
		}
		return true
	}
	for _, r := range plainRows {
		if (rowFilter == nil || rowFilter(r)) && plain(r.GetNode(), r.GetDependency(), "node") {
			in.rows = append(in.rows, r)
		}
	}
	for _, r := range plainRecs {
		if plain(r.GetOrigin(), r.GetDependency(), "origin") {
			in.recs = append(in.recs, r)
		}
	}
	// signed checks an item after decoding: membership, a known key, then
	// the screen, and the signature last (the costly part).
	// rows, a signed batch's, may be held (holdBack) when their node is not
	// a member instead of dropped.
	signed := func(who, dep, role string, known func() bool, rows []*fuseboxv1.NodeWindow, opts *ed25519.Options, it *fuseboxv1.SignedItem) bool {
		if pushPull && role == "origin" {
			// a record the sender holds: its signature is what counts
		} else if why := g.speaker(who); why != "" {
			if why == "not_member" && rows != nil && !pushPull && g.holdBack(who, rows, it) {
				return false
			}
			g.dropAbout(who, why, 1, role, clip(who), "dependency", clip(dep))
			return false
		}
		pub, st := g.keyOf(who)
		if st != KeyKnown {
			g.dropAbout(who, "unknown_key", 1, role, clip(who), "dependency", clip(dep))
			return false
		}
		if known != nil && known() {
			return false
		}
		return g.checkSignature(pub, opts, it, who, dep, role)
	}
	for _, it := range signedRows {
		var batch fuseboxv1.RowBatch
		if err := proto.Unmarshal(it.GetBody(), &batch); err != nil || len(batch.GetRows()) == 0 {
			g.Drop("malformed", 1)
			continue
		}
		rows := batch.GetRows()
		node := rows[0].GetNode()
		if node == g.cfg.Name {
			continue // its own rows tell this node nothing
		}
		if slices.ContainsFunc(rows, func(r *fuseboxv1.NodeWindow) bool { return r.GetNode() != node }) {
			// One node signs its own rows only: a batch that mixes names
			// speaks for another.
			g.Drop("malformed", len(rows), "node", clip(node))
			continue
		}
		if rowFilter != nil && !rowFilter(rows[0]) {
			continue
		}
		var known func() bool
		if screen != nil {
			known = func() bool {
				for _, r := range rows {
					if !screen.KnownRow(r.GetNode(), r.GetDependency(), r.GetSeq()) {
						return false
					}
				}
				return true
			}
		}
		if signed(node, rows[0].GetDependency(), "node", known, rows, rowOpts, it) {
			if in.rowEnv == nil {
				in.rowEnv = map[*fuseboxv1.NodeWindow]*fuseboxv1.SignedItem{}
			}
			for _, r := range rows {
				in.rows = append(in.rows, r)
				in.rowEnv[r] = it
			}
		}
	}
	for _, it := range signedRecs {
		r := &fuseboxv1.BreakerRecord{}
		if err := proto.Unmarshal(it.GetBody(), r); err != nil {
			g.Drop("malformed", 1)
			continue
		}
		var known func() bool
		if screen != nil {
			known = func() bool { return screen.KnownRecord(r) }
		}
		if signed(r.GetOrigin(), r.GetDependency(), "origin", known, nil, recordOpts, it) {
			in.recs = append(in.recs, r)
			if in.recEnv == nil {
				in.recEnv = map[*fuseboxv1.BreakerRecord]*fuseboxv1.SignedItem{}
			}
			in.recEnv[r] = it
		}
	}
	return in
}

// checkSignature verifies it, an item of who signed with pub, and counts
// a failure under who (role and dep name it in the log).
func (g *Gossip) checkSignature(pub ed25519.PublicKey, opts *ed25519.Options, it *fuseboxv1.SignedItem, who, dep, role string) bool {
	g.stats.verified.Add(1)
	if !verify(pub, opts, it, g.cfg.VerifyMemo) {
		g.forged(who)
		g.Drop("bad_signature", 1, role, clip(who), "dependency", clip(dep))
		return false
	}
	return true
}

// heldRows is a departed member's signed row batch and its rows, decoded
// and verified (holdBack).
type heldRows struct {
	rows []*fuseboxv1.NodeWindow
	env  *fuseboxv1.SignedItem
	seq  uint64 // the highest of the rows
}

// holdBack keeps it, a signed batch of node's rows, when node, not a
// member now, is one that departed lately, and reports whether it did (or
// refused it as forged). After a partition heals, the members of
// the other half send their rows (greetLater) as soon as they hold this
// node alive again, which may be a second before this node holds them
// alive: dropped, such a row reached this node only by relays, seconds
// later at N = 1,000. Held, the newest batch of each such member (verified
// with the key it had; bounded by maxRetired) is applied when the member
// is alive again (applyHeld).
func (g *Gossip) holdBack(node string, rows []*fuseboxv1.NodeWindow, it *fuseboxv1.SignedItem) bool {
	if g.cfg.RowFanout == 0 { // no round loop to apply it
		return false
	}
	var seq uint64
	for _, r := range rows {
		seq = max(seq, r.GetSeq())
	}
	g.membersMu.Lock()
	r, retired := g.retired[node]
	g.membersMu.Unlock()
	switch {
	case !retired:
		return false
	case r.held != nil && seq <= r.held.seq:
		return true // nothing newer than what is held
	}
	pub, st := g.keyOf(node)
	if st != KeyKnown {
		return false
	}
	if !g.checkSignature(pub, rowOpts, it, node, rows[0].GetDependency(), "node") {
		return true
	}
	g.membersMu.Lock()
	defer g.membersMu.Unlock()
	if r, ok := g.retired[node]; ok && (r.held == nil || seq > r.held.seq) {
		r.held = &heldRows{rows: rows, env: it, seq: seq}
		g.retired[node] = r
	}
	return true
}

// applyHeld applies the rows holdBack held, verified then, for a member
// that is alive again, as if they had just arrived.
func (g *Gossip) applyHeld(h *heldRows) {
	in := &inbound{rows: h.rows, rowEnv: map[*fuseboxv1.NodeWindow]*fuseboxv1.SignedItem{}}
	for _, r := range h.rows {
		in.rowEnv[r] = h.env
	}
	fresh, refused := g.cfg.Handler.ApplyBatch(&fuseboxv1.GossipBatch{Rows: h.rows})
	g.afterApply(in, fresh, refused)
}

// forged counts a failed signature under its claimed origin, in a table of
// at most maxForgedOrigins names (the rest under "other").
func (g *Gossip) forged(origin string) {
	g.forgedMu.Lock()
	defer g.forgedMu.Unlock()
	if _, ok := g.forgedBy[origin]; !ok && len(g.forgedBy) >= maxForgedOrigins {
		origin = "other"
	}
	g.forgedBy[origin]++
}

// maxForgedOrigins bounds Stats.BadSignatures (claimed origins are alive
// members, but a fleet has hundreds).
const maxForgedOrigins = 64

// recOut is a record on its way out: the message and, when it is signed
// (this node's own, or relayed as its origin signed it), the envelope.
type recOut struct {
	m   *fuseboxv1.BreakerRecord
	env *fuseboxv1.SignedItem
}

// compose builds the batch of a frame of version v: plain rows (at
// version 1 all rows, at version 2 those of origins that do not sign),
// signed row batches, and the records, signed ones in the signed field
// and, at version 1 or unsigned, in the plain one (what 0.1.x reads).
func compose(v byte, plainRows []*fuseboxv1.NodeWindow, rowBatches []*fuseboxv1.SignedItem, recs []recOut) *fuseboxv1.GossipBatch {
	b := &fuseboxv1.GossipBatch{Rows: plainRows, SignedRows: rowBatches}
	for _, r := range recs {
		if r.env != nil {
			b.SignedRecords = append(b.SignedRecords, r.env)
		}
		if r.env == nil || v < protocol.Version2 {
			b.Records = append(b.Records, r.m)
		}
	}
	return b
}

// signRows signs rows of this node as one batch (nil without a Signer).
func (g *Gossip) signRows(rows []*fuseboxv1.NodeWindow) *fuseboxv1.SignedItem {
	if g.cfg.Signer == nil || len(rows) == 0 {
		return nil
	}
	body, err := proto.Marshal(&fuseboxv1.RowBatch{Rows: rows})
	if err != nil {
		return nil
	}
	g.stats.signed.Add(1)
	return sign(g.cfg.Signer, rowOpts, body)
}

// ownRows splits rows into this node's (signed when there is a Signer)
// and the others.
func (g *Gossip) ownRows(rows []*fuseboxv1.NodeWindow) (own, other []*fuseboxv1.NodeWindow) {
	if g.cfg.Signer == nil {
		return nil, rows
	}
	for _, r := range rows {
		if r.GetNode() == g.cfg.Name {
			own = append(own, r)
		} else {
			other = append(other, r)
		}
	}
	return own, other
}

type recKey struct{ dep, zone string }

type heldRecord struct {
	m   *fuseboxv1.BreakerRecord
	env *fuseboxv1.SignedItem
}

// recordEnv returns the envelope of a record: the one it arrived in (or
// this node signed it in) when it is that record, a new signature when this
// node is its origin, else nil (an origin that does not sign).
func (g *Gossip) recordEnv(m *fuseboxv1.BreakerRecord) *fuseboxv1.SignedItem {
	k := recKey{m.GetDependency(), m.GetZone()}
	g.envMu.Lock()
	h, ok := g.recEnv[k]
	g.envMu.Unlock()
	if ok && proto.Equal(h.m, m) {
		return h.env
	}
	if g.cfg.Signer == nil || m.GetOrigin() != g.cfg.Name {
		return nil
	}
	body, err := proto.Marshal(m)
	if err != nil {
		return nil
	}
	env := sign(g.cfg.Signer, recordOpts, body)
	g.stats.signed.Add(1)
	g.keepRecord(m, env)
	return env
}

// keepRecord remembers the envelope of the record this node now holds for
// its dependency and zone, for push-pull.
func (g *Gossip) keepRecord(m *fuseboxv1.BreakerRecord, env *fuseboxv1.SignedItem) {
	if env == nil || !g.keepsEnvelopes() {
		return
	}
	g.envMu.Lock()
	g.recEnv[recKey{m.GetDependency(), m.GetZone()}] = heldRecord{m: m, env: env}
	g.envMu.Unlock()
}

// keepsEnvelopes: a member that relays or sends push-pull state keeps the
// envelopes of what it holds; an observer keeps none.
func (g *Gossip) keepsEnvelopes() bool { return g.cfg.Relay || g.cfg.Signer != nil }

// stateRowsPerBatch bounds the rows one signature covers in a push-pull
// state.
const stateRowsPerBatch = 512

// signState turns the handler's plain push-pull state into the one sent at
// version v, and forgets the envelopes of records the state no longer
// holds.
func (g *Gossip) signState(v byte, s *fuseboxv1.PushPullState) *fuseboxv1.PushPullState {
	out := &fuseboxv1.PushPullState{Node: s.GetNode(), OverridesRevision: s.GetOverridesRevision()}
	recKeys := make(map[recKey]bool, len(s.GetRecords()))
	for _, r := range s.GetRecords() {
		recKeys[recKey{r.GetDependency(), r.GetZone()}] = true
		env := g.recordEnv(r)
		if env != nil {
			out.SignedRecords = append(out.SignedRecords, env)
		}
		if env == nil || v < protocol.Version2 {
			out.Records = append(out.Records, r)
		}
	}
	own, other := g.ownRows(s.GetRows())
	for i := 0; i < len(own); i += stateRowsPerBatch {
		if env := g.signRows(own[i:min(i+stateRowsPerBatch, len(own))]); env != nil {
			out.SignedRows = append(out.SignedRows, env)
		}
	}
	out.Rows = other
	if v < protocol.Version2 {
		out.Rows = s.GetRows()
	}
	g.envMu.Lock()
	for k := range g.recEnv {
		if !recKeys[k] {
			delete(g.recEnv, k)
		}
	}
	g.envMu.Unlock()
	return out
}

// StateItemSize is what an item of the handler's push-pull state (a
// NodeWindow or BreakerRecord) takes in the state this node sends now: a
// row its share of a signed batch (and at version 1 its plain copy too), a
// record its envelope (and at version 1 both). A Handler that fits its
// state into a frame counts with it.
func (g *Gossip) StateItemSize(m proto.Message) int {
	n := proto.Size(m)
	plain := n + protowire.SizeVarint(uint64(n)) + 1
	if g.cfg.Signer == nil {
		return plain
	}
	v1 := g.SendVersion() < protocol.Version2
	if _, isRow := m.(*fuseboxv1.NodeWindow); isRow {
		// In a RowBatch; the batch's envelope, signature and lengths
		// spread over up to stateRowsPerBatch rows: 1 byte a row is more.
		size := plain + 1
		if v1 {
			size += plain
		}
		return size
	}
	env := 1 + protowire.SizeVarint(uint64(n)) + n + 1 + 1 + SignatureSize
	size := env + protowire.SizeVarint(uint64(env)) + 1
	if v1 {
		size += plain
	}
	return size
}

// SendVersion is the frame version this node sends broadcasts and
// push-pull state at: the lowest version an alive member speaks, at most
// MaxVersion (a rolling upgrade from the previous release keeps it at
// MinVersion); MinVersion too while this node knows no other member, since
// whoever it joins may be older.
func (g *Gossip) SendVersion() byte { return byte(g.sendVersion.Load()) }

// recomputeVersion sets SendVersion from the members. Caller holds
// membersMu.
func (g *Gossip) recomputeVersion() {
	v := int(protocol.MaxVersion)
	for w := range g.versions {
		v = min(v, w)
	}
	others := len(g.members)
	if _, self := g.members[g.cfg.Name]; self {
		others--
	}
	if others == 0 {
		v = int(protocol.MinVersion)
	}
	v = max(v, int(protocol.MinVersion))
	g.sendVersion.Store(uint32(v))
}

// noteVersion logs, once per member, a member that speaks an older frame
// version than this build (this node then sends that version while it is
// alive) or no version this build speaks (frames between them are
// refused both ways). Caller holds membersMu.
func (g *Gossip) noteVersion(m Member) {
	w := m.Meta.WireVersion()
	if w == int(protocol.MaxVersion) {
		return
	}
	if _, ok := g.versionLogged[m.Name]; ok || len(g.versionLogged) >= maxVersionLogged {
		return
	}
	g.versionLogged[m.Name] = struct{}{}
	speaks := strconv.Itoa(max(w-1, 1)) + "-" + strconv.Itoa(w)
	mine := strconv.Itoa(int(protocol.MinVersion)) + "-" + strconv.Itoa(int(protocol.MaxVersion))
	if w < int(protocol.MinVersion) || w-1 > int(protocol.MaxVersion) {
		g.lg.Warn("gossip member speaks no frame version this build speaks: frames between them are refused both ways",
			"member", m.Name, "member_versions", speaks, "member_software", m.Meta.Software, "versions", mine)
		return
	}
	if w > int(protocol.MaxVersion) {
		g.lg.Info("gossip member speaks a newer frame version too", "member", m.Name, "member_versions", speaks,
			"member_software", m.Meta.Software, "versions", mine)
		return
	}
	g.lg.Info("gossip member speaks an older frame version: this node sends that version while it is alive",
		"member", m.Name, "member_versions", speaks, "member_software", m.Meta.Software, "versions", mine)
}

const maxVersionLogged = 1024
