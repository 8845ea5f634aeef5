package agent

import (
	"bytes"
	"context"
	"io"
	"log"
	"log/slog"
	"strings"
)

// NewLogger returns the slog logger the Config asks for (text or JSON, at
// LogLevel), writing to w.
func NewLogger(cfg Config, w io.Writer) *slog.Logger {
	var lvl slog.Level
	switch cfg.LogLevel {
	case "debug":
		lvl = slog.LevelDebug
	case "warn":
		lvl = slog.LevelWarn
	case "error":
		lvl = slog.LevelError
	default:
		lvl = slog.LevelInfo
	}
	opts := &slog.HandlerOptions{Level: lvl}
	if cfg.LogFormat == "json" {
		return slog.New(slog.NewJSONHandler(w, opts))
	}
	return slog.New(slog.NewTextHandler(w, opts))
}

// memberlistLogWriter turns memberlist's "[LEVEL] memberlist: message" lines
// into slog records at the matching level, so gossip problems (a wrong
// keyring, an unreachable peer) appear in the agent's log in its format.
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
