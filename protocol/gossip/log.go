package gossip

import (
	"bytes"
	"context"
	"log"
	"log/slog"
	"strings"
)

// memberlistLogWriter turns memberlist's "[LEVEL] memberlist: message" lines
// into slog records at the matching level, so gossip problems (a wrong
// keyring, an unreachable peer) appear in the daemon's log in its format.
type memberlistLogWriter struct {
	lg *slog.Logger
}

// newMemberlistLogger returns a *log.Logger for memberlist.Config.Logger.
func newMemberlistLogger(lg *slog.Logger) *log.Logger {
	return log.New(memberlistLogWriter{lg: lg.With("component", "memberlist")}, "", 0)
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
		w.lg.Log(context.Background(), lvl, msg)
	}
	return len(p), nil
}
