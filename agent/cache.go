package agent

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/fusebox-dev/fusebox/sharedstate/store"
)

// CacheFile is the name of the last-good policy cache in Config.DataDir.
const CacheFile = "policies.json"

const cacheVersion = 1

// policyCache is the on-disk form of the last good set of policies and
// overrides: the raw JSON values as validated from etcd, keyed by name
// (policies, "_default" included) or dependency (overrides), with the etcd
// revision they were read at, the cluster they came from and each one's
// mod revision (the watcher checks them against etcd: a cache from another
// history is not kept; a cache written by an older build has neither).
type policyCache struct {
	Version           int                        `json:"version"`
	Revision          int64                      `json:"revision"`
	ClusterID         store.ClusterID            `json:"clusterId,omitzero"`
	Saved             time.Time                  `json:"saved"`
	Policies          map[string]json.RawMessage `json:"policies"`
	Overrides         map[string]json.RawMessage `json:"overrides"`
	PolicyRevisions   map[string]int64           `json:"policyRevisions,omitempty"`
	OverrideRevisions map[string]int64           `json:"overrideRevisions,omitempty"`
}

// loadCache reads the cache in dir. A missing file is (nil, nil).
func loadCache(dir string) (*policyCache, error) {
	data, err := os.ReadFile(filepath.Join(dir, CacheFile))
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("agent: policy cache: %w", err)
	}
	var c policyCache
	if err := json.Unmarshal(data, &c); err != nil {
		return nil, fmt.Errorf("agent: policy cache %s: %w", filepath.Join(dir, CacheFile), err)
	}
	if c.Version != cacheVersion {
		return nil, fmt.Errorf("agent: policy cache %s: version %d, this build reads %d", filepath.Join(dir, CacheFile), c.Version, cacheVersion)
	}
	return &c, nil
}

// saveCache writes c atomically (temporary file, fsync, rename).
func saveCache(dir string, c *policyCache) error {
	c.Version = cacheVersion
	data, err := json.MarshalIndent(c, "", "  ")
	if err != nil {
		return fmt.Errorf("agent: policy cache: %w", err)
	}
	f, err := os.CreateTemp(dir, CacheFile+".tmp*")
	if err != nil {
		return fmt.Errorf("agent: policy cache: %w", err)
	}
	tmp := f.Name()
	defer os.Remove(tmp) // no-op after the rename
	if _, err := f.Write(data); err != nil {
		f.Close()
		return fmt.Errorf("agent: policy cache: %w", err)
	}
	if err := f.Sync(); err != nil {
		f.Close()
		return fmt.Errorf("agent: policy cache: %w", err)
	}
	if err := f.Close(); err != nil {
		return fmt.Errorf("agent: policy cache: %w", err)
	}
	if err := os.Rename(tmp, filepath.Join(dir, CacheFile)); err != nil {
		return fmt.Errorf("agent: policy cache: %w", err)
	}
	return nil
}
