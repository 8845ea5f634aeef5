// Package logging builds the slog logger of a Fusebox daemon from its
// --log-format and --log-level flags, and checks those flags. The agent and
// the coordinator (and their mains) share it, so both accept the same
// values and log alike. It imports the standard library only.
//
//	if v := logging.Violations(cfg.LogFormat, cfg.LogLevel); len(v) > 0 { … }
//	lg := logging.New(cfg.LogFormat, cfg.LogLevel, os.Stderr)
package logging

import (
	"fmt"
	"io"
	"log/slog"
)

// Formats and Levels are the accepted flag values.
var (
	Formats = []string{"text", "json"}
	Levels  = []string{"debug", "info", "warn", "error"}
)

// Violations lists what is wrong with a log format and level, each as
// "<flag>: <what is wrong>" (flags log-format and log-level), or nothing.
func Violations(format, level string) []string {
	var out []string
	if format != "text" && format != "json" {
		out = append(out, fmt.Sprintf(`log-format: must be "text" or "json", got %q`, format))
	}
	switch level {
	case "debug", "info", "warn", "error":
	default:
		out = append(out, fmt.Sprintf(`log-level: must be debug, info, warn or error, got %q`, level))
	}
	return out
}

// New returns a logger writing to w: JSON lines for format "json", text
// otherwise, at level ("debug", "warn", "error"; anything else is info).
// Check the values with Violations first.
func New(format, level string, w io.Writer) *slog.Logger {
	var lvl slog.Level
	switch level {
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
	if format == "json" {
		return slog.New(slog.NewJSONHandler(w, opts))
	}
	return slog.New(slog.NewTextHandler(w, opts))
}
