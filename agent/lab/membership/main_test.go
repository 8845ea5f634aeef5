package membership

import (
	"testing"

	"github.com/fusebox-dev/fusebox/agent"
	"github.com/fusebox-dev/fusebox/agent/lab/fleet"
	"github.com/fusebox-dev/fusebox/agent/lab/fleet/fleettest"
)

func TestMain(m *testing.M) { fleettest.Main(m) }

// start starts n agents on loopback (an embedded etcd too, with etcd) at
// the tests' short timings, each with fleettest.Policy() as its own
// default; tune, if any, changes each agent's config last.
func start(t testing.TB, n int, etcd bool, tune func(i int, c *agent.Config)) *fleettest.Fleet {
	t.Helper()
	return fleettest.Start(t, fleet.Config{N: n, Etcd: etcd,
		Options: fleettest.Own(agent.WithDefaultPolicy(fleettest.Policy())),
		Tune: func(i int, c *agent.Config) {
			fleet.Quick(c)
			if tune != nil {
				tune(i, c)
			}
		}})
}
