package gossip

import (
	"bytes"
	"context"
	"log"
	"log/slog"
	"net"
	"strings"
	"sync"
	"time"
)

// memberlistLogWriter turns memberlist's "[LEVEL] memberlist: message" lines
// into slog records at the matching level, so gossip problems (a wrong
// keyring, an unreachable peer) appear in the daemon's log in its format.
//
// Packets that no key decrypts (a peer with another keyring, or someone
// without one) are logged at most once a minute per sender address: a
// stranger spraying packets must not flood the log.
//
// Once the Gossip closes, a probe or send still in flight fails on the
// closed sockets ("use of closed network connection"): memberlist logs
// that as an error, this at debug level.
type memberlistLogWriter struct {
	lg      *slog.Logger
	decrypt *rateLog
	closing func() bool // nil: never
}

// newMemberlistLogger returns a *log.Logger for memberlist.Config.Logger;
// closing reports whether the Gossip is closing.
func newMemberlistLogger(lg *slog.Logger, closing func() bool) *log.Logger {
	return log.New(memberlistLogWriter{lg: lg.With("component", "memberlist"), decrypt: &rateLog{}, closing: closing}, "", 0)
}

// undecryptableSender returns the sender of a memberlist "could not
// decrypt" line ("" for any other line).
func undecryptableSender(msg string) (string, bool) {
	low := strings.ToLower(msg)
	if !strings.Contains(low, "decrypt") {
		return "", false
	}
	if i := strings.LastIndex(msg, "from="); i >= 0 {
		return strings.Fields(msg[i+len("from="):] + " ")[0], true
	}
	return "unknown", true
}

func (w memberlistLogWriter) Write(p []byte) (int, error) {
	for _, line := range bytes.Split(bytes.TrimRight(p, "\n"), []byte("\n")) {
		msg := string(line)
		lvl := slog.LevelInfo
		if strings.HasPrefix(msg, "[") {
			if i := strings.IndexByte(msg, ']'); i > 0 {
				switch msg[1:i] {
				case "DEBUG", "TRACE":
					lvl = slog.LevelDebug
				case "WARN":
					lvl = slog.LevelWarn
				case "ERR", "ERROR":
					lvl = slog.LevelError
				}
				msg = strings.TrimSpace(msg[i+1:])
			}
		}
		msg = strings.TrimPrefix(msg, "memberlist: ")
		if lvl > slog.LevelDebug && w.closing != nil && w.closing() && strings.Contains(msg, net.ErrClosed.Error()) {
			lvl = slog.LevelDebug
		}
		if from, ok := undecryptableSender(msg); ok && w.decrypt != nil {
			if !w.decrypt.allow(from) {
				continue
			}
			msg += " (logged at most once a minute per sender)"
		}
		w.lg.Log(context.Background(), lvl, msg)
	}
	return len(p), nil
}

// rateLog allows one log line per key per interval (default a minute), for
// a bounded number of keys: past maxRateLogKeys distinct keys in one
// interval, further new keys share one slot, so a flood of invented senders
// cannot grow it.
type rateLog struct {
	mu       sync.Mutex
	now      func() time.Time // nil: time.Now
	interval time.Duration    // 0: a minute
	last     map[string]time.Time
}

const maxRateLogKeys = 1024

func (r *rateLog) allow(key string) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	now := time.Now()
	if r.now != nil {
		now = r.now()
	}
	iv := r.interval
	if iv == 0 {
		iv = time.Minute
	}
	if r.last == nil {
		r.last = map[string]time.Time{}
	}
	if len(r.last) >= maxRateLogKeys {
		for k, t := range r.last {
			if now.Sub(t) >= iv {
				delete(r.last, k)
			}
		}
		if _, ok := r.last[key]; !ok && len(r.last) >= maxRateLogKeys {
			key = "\x00overflow"
		}
	}
	if t, ok := r.last[key]; ok && now.Sub(t) < iv && !now.Before(t) {
		return false
	}
	r.last[key] = now
	return true
}
