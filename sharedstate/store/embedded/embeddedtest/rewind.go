package embeddedtest

import (
	"context"
	"io"
	"os"
	"path/filepath"
	"testing"
	"time"

	"go.etcd.io/etcd/etcdutl/v3/snapshot"
	"go.uber.org/zap"

	"github.com/fusebox-dev/fusebox/sharedstate/store"
	"github.com/fusebox-dev/fusebox/sharedstate/store/embedded"
)

// Wipe stops s, deletes its data directory and starts it again, empty, on
// the same client URL: an etcd that lost its disk and was started again
// without a backup. Its member and cluster IDs stay the same (they come
// from the member name, peer URL and cluster token); its revision starts
// again at 1. Clients reconnect by themselves.
func Wipe(t testing.TB, s *embedded.Server) {
	t.Helper()
	s.Stop()
	dir := s.DataDir()
	if err := os.RemoveAll(dir); err != nil {
		t.Fatalf("embeddedtest: wipe %s: %v", dir, err)
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		t.Fatalf("embeddedtest: wipe %s: %v", dir, err)
	}
	restart(t, s)
}

// Snapshot saves a snapshot of the etcd that cli reaches (the first of its
// endpoints) to a file in t.TempDir(), as `etcdctl snapshot save` does, and
// returns the file's path.
func Snapshot(t testing.TB, cli *store.Client) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	rc, err := cli.Snapshot(ctx)
	if err != nil {
		t.Fatalf("embeddedtest: snapshot: %v", err)
	}
	defer rc.Close()
	path := filepath.Join(t.TempDir(), "snapshot.db")
	f, err := os.OpenFile(path, os.O_CREATE|os.O_EXCL|os.O_WRONLY, 0o600)
	if err != nil {
		t.Fatalf("embeddedtest: snapshot: %v", err)
	}
	if _, err := io.Copy(f, rc); err != nil {
		f.Close()
		t.Fatalf("embeddedtest: snapshot: %v", err)
	}
	if err := f.Close(); err != nil {
		t.Fatalf("embeddedtest: snapshot: %v", err)
	}
	return path
}

// RestoreOptions are the choices of `etcdutl snapshot restore` that
// Restore offers. The zero value restores as etcd's documentation shows:
// same member name, peer URL and cluster token, so the same member and
// cluster IDs.
type RestoreOptions struct {
	// ClusterToken, when set and not the server's Config.ClusterToken,
	// gives the restored member new member and cluster IDs
	// (--initial-cluster-token).
	ClusterToken string
	// RevisionBump raises the restored revision by this much, and
	// MarkCompacted marks it compacted (--bump-revision, --mark-compacted:
	// etcdutl needs both or neither).
	RevisionBump  uint64
	MarkCompacted bool
}

// Restore stops s, replaces its data directory with one restored from the
// snapshot file at path (etcd's etcdutl snapshot restore, with s's member
// name and peer URL) and starts s again on the same client URL. Clients
// reconnect by themselves.
func Restore(t testing.TB, s *embedded.Server, path string, o RestoreOptions) {
	t.Helper()
	cfg := s.Config()
	token := o.ClusterToken
	if token == "" {
		token = cfg.ClusterToken
	}
	s.Stop()
	if err := os.RemoveAll(cfg.Dir); err != nil {
		t.Fatalf("embeddedtest: restore into %s: %v", cfg.Dir, err)
	}
	err := snapshot.NewV3(zap.NewNop()).Restore(snapshot.RestoreConfig{
		SnapshotPath:        path,
		Name:                cfg.Name,
		OutputDataDir:       cfg.Dir,
		PeerURLs:            []string{cfg.PeerURL},
		InitialCluster:      cfg.Name + "=" + cfg.PeerURL,
		InitialClusterToken: token,
		RevisionBump:        o.RevisionBump,
		MarkCompacted:       o.MarkCompacted,
	})
	if err != nil {
		t.Fatalf("embeddedtest: restore %s into %s: %v", path, cfg.Dir, err)
	}
	restart(t, s)
}

func restart(t testing.TB, s *embedded.Server) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := s.Restart(ctx); err != nil {
		t.Fatalf("embeddedtest: restart etcd in %s: %v", s.DataDir(), err)
	}
}
