package store

import (
	"fmt"
	"strconv"
	"time"
)

// ClusterID is an etcd cluster ID, as etcd's response headers carry it. It
// reads and writes as 16 hexadecimal digits (etcdctl's form), in JSON too.
// 0 means unknown.
type ClusterID uint64

func (c ClusterID) String() string { return fmt.Sprintf("%016x", uint64(c)) }

// MarshalText writes c as 16 hexadecimal digits.
func (c ClusterID) MarshalText() ([]byte, error) { return []byte(c.String()), nil }

// UnmarshalText reads hexadecimal digits.
func (c *ClusterID) UnmarshalText(b []byte) error {
	v, err := strconv.ParseUint(string(b), 16, 64)
	if err != nil {
		return fmt.Errorf("store: cluster ID %q: want hexadecimal digits", b)
	}
	*c = ClusterID(v)
	return nil
}

// RewindReason says how a Watcher found that etcd no longer holds the
// history it followed.
type RewindReason string

const (
	// RewindNewCluster: etcd answers with another cluster ID than the one
	// the watcher listed from (another cluster, or one restored with a new
	// cluster token).
	RewindNewCluster RewindReason = "new_cluster"
	// RewindRevisionWentBack: a linearizable read returned a revision
	// below the one the watcher had reached (etcd wiped, or restored from
	// a snapshot, and not yet written past that revision).
	RewindRevisionWentBack RewindReason = "revision_went_back"
	// RewindHistoryChanged: after a reconnection, etcd's keys at the
	// watcher's revision are not the ones the watcher holds (etcd wiped or
	// restored, and written past the watcher's revision since).
	RewindHistoryChanged RewindReason = "history_changed"
	// RewindCompacted: the revision the watcher needed was compacted, and
	// the compaction is beyond every revision the watcher knew etcd had
	// reached (etcd restored with a revision bump and marked compacted, or
	// the watcher was cut off for longer than etcd keeps history). A
	// compaction of history the watcher knew existed is routine: it
	// re-lists without reporting one.
	RewindCompacted RewindReason = "compacted"
)

// RewindReasons lists every RewindReason, for metrics that expose each
// series from the start.
func RewindReasons() []RewindReason {
	return []RewindReason{RewindNewCluster, RewindRevisionWentBack, RewindHistoryChanged, RewindCompacted}
}

// Rewind is one time a Watcher found that etcd's history went back (a
// snapshot restore, a wiped data dir, another cluster) or was compacted
// past what it had seen. The watcher then lists everything again.
type Rewind struct {
	Reason RewindReason `json:"reason"`
	// At is when the watcher noticed.
	At time.Time `json:"at"`
	// FromRevision is the revision the watcher had reached; ToRevision
	// etcd's revision when the watcher noticed (for RewindCompacted, the
	// compaction's revision).
	FromRevision int64 `json:"fromRevision"`
	ToRevision   int64 `json:"toRevision"`
	// FromCluster and ToCluster are the cluster IDs before and after;
	// equal unless Reason is RewindNewCluster (a restore keeps the ID
	// when it keeps the member names, peer URLs and cluster token).
	FromCluster ClusterID `json:"fromCluster"`
	ToCluster   ClusterID `json:"toCluster"`
}

func (r Rewind) String() string {
	s := fmt.Sprintf("%s: revision %d -> %d", r.Reason, r.FromRevision, r.ToRevision)
	if r.FromCluster != r.ToCluster {
		s += fmt.Sprintf(", cluster %s -> %s", r.FromCluster, r.ToCluster)
	}
	return s
}

// RewindHandler is a Handler that wants to know about rewinds: Rewound is
// called, on the watcher's goroutine like the Handler's methods, once per
// rewind, before the watcher lists again; the Sync that follows (after
// retries if the list fails) replaces everything. For every reason but
// RewindCompacted that Sync holds exactly what etcd holds: no last good
// value from before the rewind (WatchOptions.Initial included) survives
// in it.
type RewindHandler interface {
	Handler
	Rewound(r Rewind)
}

// SyncStatus is how a watcher follows etcd: what a node publishes in its
// member registration (Member.Etcd) and what Watcher.Status returns.
type SyncStatus struct {
	// Synced: the watcher listed, and no list or watch error and no rewind
	// was reported since, or etcd accepted its watch again after one.
	Synced bool `json:"synced"`
	// ClusterID is the cluster the watcher listed from.
	ClusterID ClusterID `json:"clusterId,omitzero"`
	// Revision is the revision the watcher's state is at (Watcher.Status
	// only: registrations leave it out, it changes with every write).
	Revision int64 `json:"revision,omitempty"`
	// Rewinds counts the rewinds the watcher saw; LastRewind is the last.
	Rewinds    uint64  `json:"rewinds,omitempty"`
	LastRewind *Rewind `json:"lastRewind,omitempty"`
}
