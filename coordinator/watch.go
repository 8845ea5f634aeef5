package coordinator

import (
	"errors"
	"fmt"

	"google.golang.org/grpc/metadata"

	"github.com/fusebox-dev/fusebox/coordinator/internal/events"
	"github.com/fusebox-dev/fusebox/protocol/convert"
	"github.com/fusebox-dev/fusebox/protocol/fuseboxv1"
	"github.com/fusebox-dev/fusebox/sharedstate"
)

// Watch streams the events of the broker behind /api/v1/events (see the
// Admin service in fusebox.proto). The stream's queue is the broker's:
// bounded, and a watcher that falls behind is ended with the events
// already queued, then ResourceExhausted (toStatus), and counted in
// fusebox_coordinator_sse_events_dropped_total. The stream ends when the
// client cancels or the coordinator closes (the broker's Close ends it with
// Unavailable); Close waits for it like for any RPC, bounded by
// ShutdownTimeout when a client stopped reading.
func (a *adminServer) Watch(req *fuseboxv1.WatchRequest, stream fuseboxv1.Admin_WatchServer) error {
	opts := events.WatchOptions{After: req.GetAfterId()}
	if dep := req.GetDependency(); dep != "" {
		if dep != sharedstate.DefaultPolicyName {
			if err := sharedstate.ValidateDependencyName(dep); err != nil {
				return err
			}
		}
		opts.Filter = func(e events.Event) bool { return e.Dependency == dep }
	}
	opts.Key = identityFrom(stream.Context()).Name
	sub, err := a.c.broker.Watch(opts)
	if errors.Is(err, events.ErrTooManySubscribers) {
		return streamRefusal(err)
	}
	if err != nil {
		return fmt.Errorf("fusebox: watch after event %d: %w", opts.After, err)
	}
	defer sub.Close()
	ctx := stream.Context()
	// Subscribed: tell the client, so that it knows every later event
	// reaches it.
	if err := stream.SendHeader(metadata.MD{}); err != nil {
		return streamError(ctx.Err(), err)
	}
	last := opts.After // the last event the client has: its resume point
	for {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case e, ok := <-sub.C:
			if !ok {
				err := sub.Err()
				if errors.Is(err, events.ErrFellBehind) {
					a.c.log.Info("watch stream fell behind and was ended", "caller", identityFrom(ctx).Name, "last_event", last)
				}
				return watchEnded(err, last)
			}
			if err := stream.Send(convert.EventToProto(e)); err != nil {
				return streamError(ctx.Err(), err)
			}
			last = e.ID
		}
	}
}

// watchEnded is the error that ends a stream whose subscription the
// broker closed after event last.
func watchEnded(err error, last uint64) error {
	switch {
	case errors.Is(err, events.ErrFellBehind):
		return fmt.Errorf("fusebox: watch fell behind after event %d: resume with after_id %d: %w", last, last, err)
	case errors.Is(err, events.ErrClosed):
		return fmt.Errorf("fusebox: coordinator closing, watch ended after event %d: %w", last, err)
	case err == nil: // the subscription's own Close: not done by this handler
		err = errors.New("closed")
	}
	return fmt.Errorf("fusebox: watch ended after event %d: %w", last, err)
}

// streamError is the error of a failed send on a stream: the client's
// cancellation when that is what happened, else errStreamBroken.
func streamError(ctxErr, err error) error {
	if ctxErr != nil {
		return ctxErr
	}
	return fmt.Errorf("%w: %v", errStreamBroken, err)
}
