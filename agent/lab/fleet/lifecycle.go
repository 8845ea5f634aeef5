package fleet

import (
	"context"
	"fmt"
	"syscall"
)

// take removes agent i from the fleet's running members and returns it
// (nil when it was not running).
func (f *Fleet) take(i int) *member {
	f.mu.Lock()
	defer f.mu.Unlock()
	m := f.members[i]
	f.members[i] = nil
	return m
}

// Stop stops agent i as SIGTERM does: it leaves the gossip and revokes its
// etcd registration. It stays in the fleet, not running (Agent, Client and
// Config return nil or zero for it; waits count it short) until Start.
// Stopping a stopped agent does nothing.
func (f *Fleet) Stop(i int) {
	if m := f.take(i); m != nil {
		m.stop()
	}
}

// Crash stops agent i as kill -9 does: without leaving the gossip (its
// peers find it dead by probing) or revoking its etcd registration (it
// expires with its lease). Otherwise as Stop.
func (f *Fleet) Crash(i int) {
	m := f.take(i)
	if m == nil {
		return
	}
	if m.conn != nil {
		m.conn.Close()
	}
	switch {
	case m.proc != nil:
		m.proc.Stop(syscall.SIGKILL, 0)
	case m.inside.Crash != nil:
		m.inside.Crash()
	default:
		m.agent.Close()
	}
}

// Start starts stopped agent i again with the same name, data directory
// and socket (and, on the simulated network, address), joining through
// the seeds. It returns when the agent has started; its Ready tells when
// it has joined.
func (f *Fleet) Start(ctx context.Context, i int) error {
	if f.member(i) != nil {
		return fmt.Errorf("fleet: %s is running", Name(i))
	}
	return f.startAt(ctx, i)
}
