package agent

import (
	"bytes"
	"errors"

	"github.com/fusebox-dev/fusebox/protocol/gossip"
	"github.com/fusebox-dev/fusebox/sharedstate/ctxtime"
	"github.com/fusebox-dev/fusebox/sharedstate/secretfile"
)

// keyringLoop re-reads Config.KeyringFile every KeyringReloadInterval and
// applies changes to the running keyring, so a rotation (add the new key
// second everywhere, then move it first everywhere, then drop the old one)
// needs no restart. It compares the file's keys with the keys in use, not
// the file with an earlier read of it, so a change made between New and the
// loop's start is applied too. An unreadable or invalid file keeps the keys
// in use (and is logged once per content); so does a file that became
// group/other-accessible (secretfile.Check).
func (a *Agent) keyringLoop() {
	var lastBad []byte
	ctxtime.Every(a.ctx, a.cfg.KeyringReloadInterval, func() {
		data, err := secretfile.Read(a.cfg.KeyringFile)
		if err != nil {
			if errors.Is(err, secretfile.ErrExposed) && !bytes.Equal([]byte(err.Error()), lastBad) {
				a.lg.Error("keyring file refused, keeping the keys in use", "err", err)
				lastBad = []byte(err.Error())
			}
			return
		}
		next, err := gossip.ParseKeyring(data)
		if err != nil {
			if !bytes.Equal(data, lastBad) {
				a.lg.Error("keyring file changed but is invalid, keeping the keys in use", "file", a.cfg.KeyringFile, "err", err)
				lastBad = data
			}
			return
		}
		changed, err := gossip.ApplyKeyring(a.keyring, next)
		if err != nil {
			a.lg.Error("keyring reload failed", "file", a.cfg.KeyringFile, "err", err)
			return
		}
		if !changed {
			return
		}
		a.lg.Info("gossip keyring reloaded", "file", a.cfg.KeyringFile, "keys", len(next.GetKeys()))
	})
}
