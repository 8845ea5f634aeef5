package gossip

import (
	"net"
	"time"
)

// Drop counts n items a handler refused, under one of DropReasons (an
// unknown reason counts as "invalid_item"), and logs the reason at most
// once a minute.
func (g *Gossip) Drop(reason string, n int, detail ...any) {
	if n <= 0 {
		return
	}
	g.stats.drop(reason, n)
	if g.dropLog.allow(reason) {
		g.lg.Warn("gossip items dropped (logged at most once a minute per reason)", append([]any{"reason", reason, "count", n}, detail...)...)
	}
}

// settleTime is how long after a member joined or left the items that
// speak for it may be dropped as a matter of course: its rows and records
// still travel in relays' queues after it left, and arrive before its key
// is known when it just joined.
const settleTime = time.Minute

// settle notes that a member (by name, or by address in
// settlingAddrs) joined or left now. Caller holds membersMu.
func settle(m map[string]time.Time, key string) {
	now := time.Now()
	if len(m) >= maxRetired {
		for k, at := range m {
			if now.Sub(at) > settleTime {
				delete(m, k)
			}
		}
		if len(m) >= maxRetired {
			return // a storm of joins: drops about these are warned of
		}
	}
	m[key] = now
}

// settled reports whether key joined or left within settleTime.
func (g *Gossip) settled(m map[string]time.Time, key string) bool {
	g.membersMu.Lock()
	at, ok := m[key]
	g.membersMu.Unlock()
	return ok && time.Since(at) <= settleTime
}

// dropAbout is Drop for items refused for what the node who they speak for
// is (Gossip.speaker's reasons, "unknown_key"). Those about a member that
// joined or left within settleTime ("not_member", "unknown_key") are
// expected: counted alike, but logged at debug level, not as a warning.
func (g *Gossip) dropAbout(who, reason string, n int, detail ...any) {
	if (reason == "not_member" || reason == "unknown_key") && g.settled(g.settling, who) {
		g.dropQuietly(reason, n, detail...)
		return
	}
	g.Drop(reason, n, detail...)
}

// dropFrom is Drop for messages refused as "not_member" by their source
// address: quietly when a member left from that address a moment ago.
func (g *Gossip) dropFrom(addr string, n int, detail ...any) {
	detail = append([]any{"from", addr}, detail...)
	if g.settled(g.settlingAddrs, addr) {
		g.dropQuietly("not_member", n, detail...)
		return
	}
	g.Drop("not_member", n, detail...)
}

// dropQuietly counts an expected drop and logs it at debug level.
func (g *Gossip) dropQuietly(reason string, n int, detail ...any) {
	if n <= 0 {
		return
	}
	g.stats.drop(reason, n)
	if g.dropLog.allow("settling/" + reason) {
		g.lg.Debug("gossip items dropped about a member that joined or left a moment ago (logged at most once a minute per reason)",
			append([]any{"reason", reason, "count", n}, detail...)...)
	}
}

// memberAddr reports whether a packet's source is the gossip address of an
// alive member (any role).
func (g *Gossip) memberAddr(from net.Addr) bool {
	a := from.String()
	g.membersMu.Lock()
	_, ok := g.memberAddrs[a]
	g.membersMu.Unlock()
	return ok
}

// speaker classifies the node a row or record speaks for: "" when it is an
// alive member with role agent, else the drop reason ("not_member",
// "not_agent").
func (g *Gossip) speaker(name string) string {
	g.membersMu.Lock()
	m, ok := g.members[name]
	g.membersMu.Unlock()
	switch {
	case !ok:
		return "not_member"
	case !m.Meta.IsAgent():
		return "not_agent"
	}
	return ""
}
