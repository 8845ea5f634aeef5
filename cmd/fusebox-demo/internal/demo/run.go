package demo

import (
	"context"
	"errors"
	"time"
)

// Run runs the demo until ctx is done (main cancels it on SIGINT and
// SIGTERM) or Config.Duration has passed, then closes it and prints the
// summary to Config.Out. Asked to stop while starting, it returns nil.
func Run(ctx context.Context, cfg Config) error {
	d, err := Start(ctx, cfg)
	if err != nil {
		if ctx.Err() != nil && errors.Is(err, ctx.Err()) {
			return nil
		}
		return err
	}
	select {
	case <-ctx.Done():
		d.printf("%7.2fs  stopping: %v\n", time.Since(d.sched.start).Seconds(), context.Cause(ctx))
	case <-d.Done():
		d.printf("%7.2fs  stopping: --duration reached\n", time.Since(d.sched.start).Seconds())
	}
	err = d.Close()
	s := d.Summary()
	d.outMu.Lock()
	_, _ = s.WriteTo(d.cfg.Out)
	d.outMu.Unlock()
	return err
}
