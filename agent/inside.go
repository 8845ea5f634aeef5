package agent

import "github.com/fusebox-dev/fusebox/protocol/gossip"

// What the lab reads and does through agentopt.Inside, beyond the local
// API: nothing here is part of the agent's API.

// crash closes the agent without leaving the gossip, as a kill -9 would
// leave its peers: they find it dead.
func (a *Agent) crash() {
	a.kill.Store(true)
	a.Close()
}

// gossipKeys returns the gossip keys in use, the primary first (nil
// without a keyring).
func (a *Agent) gossipKeys() [][]byte {
	if a.keyring == nil {
		return nil
	}
	return a.keyring.GetKeys()
}

// peerKey says whether the agent knows node's signing key from the etcd
// member registry (KeyUnknown without etcd).
func (a *Agent) peerKey(node string) gossip.KeyStatus {
	if a.keys == nil {
		return gossip.KeyUnknown
	}
	_, st := a.keys.Key(node)
	return st
}
