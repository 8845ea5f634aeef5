package soak

import "time"

// Path is a way a fault reaches a subject: the bounds of the checks are
// measured from the end of the faults on the path they depend on.
type Path string

// The paths of the checks.
const (
	// PathGossip: an agent's gossip (partitions, loss at it). The
	// dead-dependency check depends on it.
	PathGossip Path = "gossip"
	// PathMembership: the fleet's membership (any agent's kill, any
	// partition, loss at any agent). Subject Fleet. The membership check
	// depends on it.
	PathMembership Path = "membership"
	// PathEtcd: an agent's watch of etcd (partitions cutting it off from
	// etcd, loss at it or at an etcd member, an etcd member's kill until
	// the etcd client has noticed: see EtcdFailover). The write check
	// depends on it.
	PathEtcd Path = "etcd"
	// PathControl: the operator's writes (coordinator restarts, etcd
	// member kills until a new leader serves, loss at the coordinator or
	// an etcd member). Subject Control.
	PathControl Path = "control"
)

// Fleet is the subject of PathMembership.
const Fleet = "fleet"

// Control is the subject of PathControl: the write path from fuseboxctl
// through the coordinator to etcd.
const Control = "control"

// Exposure records which fault touched which subject on which path, and
// when. It is not safe for concurrent use.
type Exposure struct {
	spans []span
}

type span struct {
	path     Path
	subject  string
	from, to time.Time // to zero: still going on
	fault    int       // the Begin call's id
}

// Begin records that a fault touches subjects on path from at on, until
// End is called with the returned id.
func (e *Exposure) Begin(path Path, subjects []string, at time.Time) int {
	id := len(e.spans)
	for _, s := range subjects {
		e.spans = append(e.spans, span{path: path, subject: s, from: at, fault: id})
	}
	return id
}

// End ends the spans of Begin's id at at. Ending twice keeps the first end.
func (e *Exposure) End(id int, at time.Time) {
	for i := range e.spans {
		if e.spans[i].fault == id && e.spans[i].to.IsZero() {
			e.spans[i].to = at
		}
	}
}

// Window records a fault touching subjects on path from from to to.
func (e *Exposure) Window(path Path, subjects []string, from, to time.Time) {
	e.End(e.Begin(path, subjects, from), to)
}

// Settled says how things stand for subject on path since since: active
// when a fault touching it is going on now, and else ref, the latest end of
// a fault that touched it after since (since itself when none did).
func (e *Exposure) Settled(path Path, subject string, since, now time.Time) (ref time.Time, active bool) {
	ref = since
	for _, s := range e.spans {
		if s.path != path || s.subject != subject || s.from.After(now) {
			continue
		}
		if s.to.IsZero() || s.to.After(now) {
			return ref, true
		}
		if s.to.After(ref) {
			ref = s.to
		}
	}
	return ref, false
}

// Touched reports whether a fault touched subject on path at any time in
// [from, to].
func (e *Exposure) Touched(path Path, subject string, from, to time.Time) bool {
	for _, s := range e.spans {
		if s.path != path || s.subject != subject || s.from.After(to) {
			continue
		}
		if s.to.IsZero() || !s.to.Before(from) {
			return true
		}
	}
	return false
}
