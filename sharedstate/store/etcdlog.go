package store

import (
	"fmt"
	"sync/atomic"

	"go.etcd.io/etcd/client/pkg/v3/logutil"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
)

// NewEtcdLogger returns a zap logger for an etcd client or an embedded etcd
// server: etcd's own format on stderr at level (a zap level name), gone
// quiet below fatal once closing is set, because an embedded etcd logs
// errors with stack traces on a normal Close.
func NewEtcdLogger(level string, closing *atomic.Bool) (*zap.Logger, error) {
	lvl, err := zapcore.ParseLevel(level)
	if err != nil {
		return nil, fmt.Errorf("store: etcd log level: %w", err)
	}
	lg, err := logutil.CreateDefaultZapLogger(lvl)
	if err != nil {
		return nil, fmt.Errorf("store: etcd logger: %w", err)
	}
	return zap.New(quietCore{Core: lg.Core(), closing: closing}), nil
}

// quietCore drops every entry below fatal once closing is set.
type quietCore struct {
	zapcore.Core
	closing *atomic.Bool
}

func (q quietCore) With(fields []zapcore.Field) zapcore.Core {
	return quietCore{Core: q.Core.With(fields), closing: q.closing}
}

func (q quietCore) Check(e zapcore.Entry, ce *zapcore.CheckedEntry) *zapcore.CheckedEntry {
	if q.closing.Load() && e.Level < zapcore.FatalLevel {
		return ce
	}
	return q.Core.Check(e, ce)
}
