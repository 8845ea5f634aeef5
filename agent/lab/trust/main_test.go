package trust

import (
	"encoding/base64"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"testing"

	"github.com/fusebox-dev/fusebox/agent"
	"github.com/fusebox-dev/fusebox/agent/lab/fleet"
	"github.com/fusebox-dev/fusebox/agent/lab/fleet/fleettest"
)

func TestMain(m *testing.M) { fleettest.Main(m) }

// start starts n agents on loopback (an embedded etcd too, with etcd) at
// the tests' short timings, each with fleettest.Policy() as its own
// default; tune, if any, changes each agent's config last.
func start(t testing.TB, n int, etcd bool, tune func(c *agent.Config)) *fleettest.Fleet {
	t.Helper()
	return fleettest.Start(t, fleet.Config{N: n, Etcd: etcd,
		Options: fleettest.Own(agent.WithDefaultPolicy(fleettest.Policy())),
		Tune: func(_ int, c *agent.Config) {
			fleet.Quick(c)
			if tune != nil {
				tune(c)
			}
		}})
}

// breakerState is what each agent holds, for "nothing changed" checks.
func breakerState(f *fleettest.Fleet) string {
	out := ""
	for _, a := range f.Agents() {
		out += fmt.Sprintf("%s: %d deps %v\n", a.Name(), a.Engine().Stats().Dependencies, a.Engine().Records())
	}
	return out
}

// dropped is how many gossip items the agents dropped for reason.
func dropped(f *fleettest.Fleet, reason string) (n uint64) {
	for _, a := range f.Agents() {
		n += a.Gossip().Stats().Dropped[reason]
	}
	return n
}

func discardLogger() *slog.Logger { return slog.New(slog.NewTextHandler(io.Discard, nil)) }

// writeKeyring writes a gossip keyring file holding key.
func writeKeyring(t *testing.T, key []byte) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "keyring")
	if err := os.WriteFile(p, []byte(base64.StdEncoding.EncodeToString(key)+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}
