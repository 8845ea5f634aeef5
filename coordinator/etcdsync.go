package coordinator

import (
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/fusebox-dev/fusebox/protocol/fuseboxv1"
	"github.com/fusebox-dev/fusebox/sharedstate/store"
)

// etcdSyncProto is how a watcher follows etcd, for the Admin API: the
// coordinator's own (GetFleet) or an agent's registration (ListMembers).
// nil stays nil.
func etcdSyncProto(st *store.SyncStatus) *fuseboxv1.EtcdSync {
	if st == nil {
		return nil
	}
	out := &fuseboxv1.EtcdSync{Synced: st.Synced, Revision: st.Revision, Rewinds: st.Rewinds}
	if st.ClusterID != 0 {
		out.ClusterId = st.ClusterID.String()
	}
	if r := st.LastRewind; r != nil {
		out.LastRewind = &fuseboxv1.EtcdRewind{Reason: string(r.Reason), At: timestamppb.New(r.At),
			FromRevision: r.FromRevision, ToRevision: r.ToRevision,
			FromClusterId: r.FromCluster.String(), ToClusterId: r.ToCluster.String()}
	}
	return out
}
